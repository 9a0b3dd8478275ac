"""The interval columns of a statement of several DP leaves (``dpsql.show_intervals``): their
plan over the leaves' shapes (:mod:`dpsql.sql.tree_intervals`), each leaf's interval level from
the leaf values an output row reads (counted over the leaves' public rows before any release:
:mod:`dpsql.execute.tree_levels`), and the post-processing that returns them
(:mod:`dpsql.execute.tree_intervals`), falling back to the statement's own query with NULL
intervals when PostgreSQL refuses the rewritten one.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

from dpsql.errors import UpstreamError
from dpsql.execute.backend import CancelToken
from dpsql.execute.noise import Release
from dpsql.execute.tree_budget import LeafPlan
from dpsql.execute.tree_intervals import (
    Attached,
    attach,
    leaf_shape,
    post_sql_iv,
    upstream_fallback,
)
from dpsql.execute.tree_leaves import LeafRun, declared_of
from dpsql.execute.tree_levels import counted_reads, key_rows, leaf_levels, static_reads
from dpsql.execute.tree_post import leaf_query, leaf_row_bound, run_post
from dpsql.result import IntervalFallback
from dpsql.sql.interval_sql import Held
from dpsql.sql.tree import Split
from dpsql.sql.tree_intervals import IvPlan, plan_intervals

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def noisy_outputs(
    engine: EngineContext, sp: Split, run: LeafRun, plan: IvPlan | None
) -> list[tuple[str, Held | None]]:
    """The statement's noisy output columns and the leaves each reads (None: not known), from
    the interval columns' plan (made here without ``dpsql.show_intervals``: the rewrite alone,
    no SQL)."""
    if plan is None:
        n = len(run.plans)
        labels = [sp.labels[i] if i < len(sp.labels) else f"leaf {i}" for i in range(n)]
        shapes = [
            leaf_shape(p.analysis, labels[i], leaf_row_bound(engine, p.analysis))
            for i, p in enumerate(run.plans)
        ]
        plan = plan_intervals(sp.post, shapes)
    return [(o.name, o.info if isinstance(o.info, Held) else None) for o in plan.outputs]


def iv_plan(
    engine: EngineContext, sp: Split, run: LeafRun, confidence: float, show: bool
) -> tuple[IvPlan | None, list[float], dict[int, int | None], tuple[IntervalFallback, ...]]:
    """With ``dpsql.show_intervals``: the interval columns' plan, each leaf's interval level,
    the leaf intervals an output row reads at most, by output
    (:mod:`dpsql.execute.tree_intervals`), and the fallbacks so far; else None and the
    session's confidence."""
    n = len(run.plans)
    if not show:
        return None, [confidence] * n, {}, ()
    labels = [sp.labels[i] if i < len(sp.labels) else f"leaf {i}" for i in range(n)]
    bounds = [leaf_row_bound(engine, p.analysis) for p in run.plans]
    shapes = [leaf_shape(p.analysis, labels[i], bounds[i]) for i, p in enumerate(run.plans)]
    plan = plan_intervals(sp.post, shapes)
    static = static_reads(plan, bounds)
    counted, failed = (
        _counted(engine, plan, run, bounds) if _reads_many(plan, bounds) else ({}, None)
    )
    reads = {h: counted.get(h) or k for h, k in static.items()}
    fallbacks = tuple(f for f in (plan.fallback, failed) if f is not None)
    return plan, leaf_levels(plan, bounds, confidence, counted), reads, fallbacks


def _reads_many(plan: IvPlan, bounds: Sequence[int | None]) -> bool:
    """Whether an output aggregates over a leaf of several known rows (else the static count
    is exact: one value per leaf a row reads)."""
    return any(
        every and (bounds[leaf] or 0) > 1
        for o in plan.outputs
        if isinstance(o.info, Held)
        for leaf, every in o.info.events
    )


def _counted(
    engine: EngineContext, plan: IvPlan, run: LeafRun, bounds: Sequence[int | None]
) -> tuple[dict[int, int], IntervalFallback | None]:
    """The leaf intervals each output's rows read, counted by the rewritten post-processing
    over the leaves' public rows (:func:`~dpsql.execute.tree_levels.key_rows`), before any
    release; only for outputs whose leaves' rows are all known (static count not None). If
    PostgreSQL refuses that query: nothing counted (the static count holds) and why."""
    analyses = [p.analysis for p in run.plans]
    rels = [
        key_rows(a, engine.group_types(leaf, a), declared_of(engine, p))
        for leaf, a, p in zip(run.leaves, analyses, run.plans, strict=True)
    ]
    plain = [leaf_query(a, rel, 0) for a, rel in zip(analyses, rels, strict=True)]
    text, params = post_sql_iv(plan, plain, analyses, rels, [Decimal(1)] * len(rels))
    try:
        got = engine.backend.run(text, params, private=False)
    except UpstreamError as e:  # the statement's own error, if any, is reported when it runs
        return {}, upstream_fallback(e, "counting the leaf values an output row reads")
    static = static_reads(plan, bounds)
    counted = counted_reads(plan, got.columns, got.rows)
    return {h: k for h, k in counted.items() if static.get(h) is not None}, None


def post_iv(
    engine: EngineContext,
    sp: Split,
    plan: IvPlan,
    plans: Sequence[LeafPlan],
    releases: Sequence[Release],
    confidence: float,
    reads: dict[int, int | None],
    cancel: CancelToken | None = None,
) -> tuple[Attached, IntervalFallback | None]:
    """The post-processing with the interval columns; if PostgreSQL refuses the rewritten
    query, the statement's own (its error, if any, is the user's) with NULL intervals, and
    why (:func:`~dpsql.execute.tree_intervals.upstream_fallback`)."""
    analyses = [p.analysis for p in plans]
    plain = [leaf_query(a, rel, 0) for a, rel in zip(analyses, releases, strict=True)]
    text, params = post_sql_iv(plan, plain, analyses, releases)
    labels = list(sp.labels) or [f"leaf {i}" for i in range(len(plans))]
    try:
        got = engine.backend.run(text, params, private=False, cancel=cancel)
    except UpstreamError as e:
        got = run_post(engine, sp, plans, releases, cancel)
        failed = upstream_fallback(e, "the interval columns' query")
        out = attach(
            plan, got.columns, got.rows, releases, labels, confidence, failed.reason, reads
        )
        return out, failed
    return attach(plan, got.columns, got.rows, releases, labels, confidence, reads=reads), None

"""A statement of several DP leaves after its leaves are released: the post-processing SQL
over their noisy rows (each leaf's own post-processing SELECT over typed arrays of its values,
passed as parameters, never formatted into the SQL), and the statement's columns without
reading any data (:func:`describe_tree`). :mod:`dpsql.execute.tree` runs the statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.errors import InternalError, UpstreamError
from dpsql.execute.backend import CancelToken
from dpsql.execute.noise import Release
from dpsql.execute.prepared import TreeQuery
from dpsql.execute.tree_budget import LeafPlan
from dpsql.execute.tree_intervals import (
    attach,
    leaf_shape,
    post_sql_iv,
    reported,
    row_bound,
    upstream_fallback,
)
from dpsql.execute.tree_prepare import bound_split
from dpsql.result import ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.order_ties import order_ties
from dpsql.sql.postprocess import outer_query, outer_sql, shift_arrays
from dpsql.sql.tree import Split, fill
from dpsql.sql.tree_intervals import plan_intervals

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def leaf_row_bound(engine: EngineContext, a: Analysis) -> int | None:
    """A leaf's rows at most, from its declared keys (None with grouping sets: not counted)."""
    return None if a.grouping_sets else row_bound(a, engine.declared_keys(a))


def leaf_query(a: Analysis, rel: Release, offset: int) -> tuple[exp.Select, list[list[Any]]]:
    """A leaf's released rows as its own post-processing SELECT over typed arrays, the array
    parameters numbered from ``offset``; and the arrays."""
    q, _ = outer_query(a, rel.key_types)
    renumbered = shift_arrays(q, offset)
    if not isinstance(renumbered, exp.Select):
        raise InternalError("renumbering a leaf's parameters changed its SELECT")
    arrays: list[list[Any]] = [[g[i] for g in rel.groups] for i in range(len(rel.key_types))]
    arrays += [[row[j] for row in rel.stats] for j in range(len(a.statistics))]
    if not arrays:
        arrays.append(list(range(len(rel.groups))))
    return renumbered, arrays


def post_sql(
    sp: Split, analyses: Sequence[Analysis], releases: Sequence[Release]
) -> tuple[str, dict[str, list[Any]]]:
    """The post-processing SQL over the released leaves, and its array parameters."""
    queries: list[exp.Expr] = []
    params: dict[str, list[Any]] = {}
    for a, rel in zip(analyses, releases, strict=True):
        q, arrays = leaf_query(a, rel, len(params))
        for arr in arrays:
            params[f"_dpsql_arr{len(params)}"] = arr
        queries.append(q)
    return outer_sql(fill(order_ties(sp.post.copy()), queries)), params  # type: ignore[arg-type]


def run_post(
    engine: EngineContext,
    sp: Split,
    plans: Sequence[LeafPlan],
    releases: Sequence[Release],
    cancel: CancelToken | None = None,
) -> Any:
    text, params = post_sql(sp, [p.analysis for p in plans], releases)
    return engine.backend.run(text, params, private=False, cancel=cancel)


def describe_tree(
    engine: EngineContext, prepared: TreeQuery, session: SessionContext
) -> tuple[ResultColumn, ...]:
    """The result columns: the post-processing over empty releases, LIMIT 0 (no data read)."""
    # $n placeholders (PostgreSQL types them from their use) as NULLs: the rows are empty anyway
    sp, leaves = bound_split(engine, prepared, [None] * prepared.param_count)
    analyses = [leaf.analysis for leaf in leaves]
    rels = [
        Release(engine.group_types(leaf, a), [], [], [])
        for leaf, a in zip(leaves, analyses, strict=True)
        if a is not None
    ]
    present = [a for a in analyses if a is not None]
    if session.show_intervals and len(present) == len(rels):
        labels = list(sp.labels) or [f"leaf {i}" for i in range(len(rels))]
        shapes = [
            leaf_shape(a, lb, leaf_row_bound(engine, a))
            for a, lb in zip(present, labels, strict=False)
        ]
        plan = plan_intervals(sp.post, shapes)
        plain = [leaf_query(a, rel, 0) for a, rel in zip(present, rels, strict=True)]
        text, params = post_sql_iv(plan, plain, present, rels)
        q = f"SELECT * FROM ({text}) AS _dp_describe LIMIT 0"
        reported((plan.fallback,) if plan.fallback else (), prepared.fingerprint)
        try:
            cols = engine.backend.run(q, params, private=False).columns
        except UpstreamError as e:  # as run_tree: the statement's own columns, NULL intervals
            reported((upstream_fallback(e, "describing"),), prepared.fingerprint)
            text, params = post_sql(sp, present, rels)
            q = f"SELECT * FROM ({text}) AS _dp_describe LIMIT 0"
            cols = engine.backend.run(q, params, private=False).columns
        return attach(plan, cols, [], rels, labels, 0.0, "-").columns
    text, params = post_sql(sp, present, rels)
    q = f"SELECT * FROM ({text}) AS _dp_describe LIMIT 0"
    return engine.backend.run(q, params, private=False).columns


__all__ = ["describe_tree", "leaf_query", "leaf_row_bound", "post_sql", "run_post"]

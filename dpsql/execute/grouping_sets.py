"""Run the measurements of a GROUP BY with grouping sets and stitch them into one release.

Each distinct set runs its own bounded SQL (:func:`dpsql.sql.rewrite.private_query` of the set's
single-GROUP-BY analysis) and is released by :func:`dpsql.execute.noise.release` under its own
plan (see :mod:`dpsql.sql.grouping_sets`). The stitched :class:`Release` has every key of any
set (None where the set rolled it up) plus the row's set number as the last key, so the usual
post-processing query (HAVING, ORDER BY, LIMIT, GROUPING()) runs once over the noisy union.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from dpsql.dp.quantiles import Quantile
from dpsql.execute import group_keys
from dpsql.execute.backend import CancelToken, Rows
from dpsql.execute.disowned import quantile_disown
from dpsql.execute.noise import Release, release
from dpsql.execute.private_sql import bounded_sql, hashed_key_types, hashed_keys, salted
from dpsql.execute.tree_rounding import half_widths
from dpsql.sql.analysis import Analysis
from dpsql.sql.grouping_sets import SetsPlan, dedupe, set_analysis, set_label

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext
    from dpsql.execute.prepared import PrivateQuery

SET_TYPE = "int4"  # the type of the set-number key (GROUPING() returns integer)


def set_sql(
    engine: EngineContext, prepared: PrivateQuery, a: Analysis, keys: tuple[int, ...]
) -> str:
    """The bounded SQL of one grouping set (memoized per statement, like Engine.private_sql)."""
    # keyed by the analysis itself, not the text alone: the same text prepared under another
    # analyst's view (a denied keys_from table) has another analysis and another SQL
    key = ("private-set", prepared.text, id(a), keys)
    stable = a is prepared.analysis
    memo = engine.caches.sql
    if stable:
        hit = memo.get(key)
        if hit is not None and hit[0] is a:
            return str(hit[1])
    # the set's keys of a type hashed as values (as Engine.private_sql's)
    types = engine.group_types(prepared, a)
    one = set_analysis(a, keys)
    unit = group_keys.unit_type(engine, prepared, a)
    set_types = tuple(types[i] for i in keys)
    one = replace(
        one,
        hashed_keys=hashed_keys(one, set_types),
        hashed_key_types=hashed_key_types(one, set_types),
        unit_type=unit,
    )
    text = bounded_sql(prepared, one)
    if stable:
        memo.remember(key, (a, text))  # holds ``a``: its id can't be reused while the entry lives
    return text


def private_sqls(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> list[str]:
    """Every SQL text the statement may run on private rows (one per distinct grouping set)."""
    if not a.grouping_sets:
        return [engine.private_sql(prepared, a)]
    return [set_sql(engine, prepared, a, keys) for keys in dedupe(a.grouping_sets)]


def set_texts(engine: EngineContext, prepared: PrivateQuery, plan: SetsPlan) -> list[str]:
    """Every set's bounded SQL (:func:`set_sql`, in the plan's order), all written before the
    first runs (nothing is read while they are written: zero-row probes at most)."""
    return [set_sql(engine, prepared, plan.analysis, sp.keys) for sp in plan.sets]


def run_sets(
    engine: EngineContext, texts: Sequence[str], cancel: CancelToken | None, fingerprint: str
) -> list[Rows]:
    """Every set's upstream rows (one row per group of that set, never a row of a table) from
    its SQL (:func:`set_texts`), each with a fresh salt (a Parse failure of one is dpsql's
    own: :mod:`dpsql.execute.own_sql`)."""
    from dpsql.execute import own_sql

    return [own_sql.run(engine.backend, salted(text), fingerprint, cancel=cancel) for text in texts]


def release_sets(
    engine: EngineContext,
    plan: SetsPlan,
    rows: Sequence[Rows],
    key_types: Sequence[str],
    declared: Sequence[list[tuple[str | None, ...]] | None],
    confidence: float,
    candidates: dict[str, tuple[str, ...]],
) -> Release:
    """Release each set under its own plan, then stitch.

    ``key_types``: the types of all keys, then the set number's; ``declared``: per set, its
    public key values (Engine.declared_keys of the set's analysis).
    """
    by_position: dict[int, Release] = {}
    notes: dict[str, None] = {}  # the sets' accuracy summaries, each line once, in order
    for sp, got, public in zip(plan.sets, rows, declared, strict=True):
        types = [key_types[i] for i in sp.keys]
        rel = release(
            sp.plan, got.rows, types, public, confidence, engine.noise, candidates=candidates
        )
        label = set_label(plan.analysis, sp.keys)
        notes.update(dict.fromkeys(f"grouping set {label}: {note}" for note in rel.notes))
        for pos in sp.positions:
            by_position[pos] = rel
    n = len(plan.analysis.group_keys)
    parts = [
        _widened(by_position[pos], plan.sets[_set_of(plan, pos)].keys, n, pos)
        for pos in sorted(by_position)
    ]
    intervals = [list(row) for p in parts for row in p.intervals]
    _quantiles_as_noticed(plan, intervals)
    noise = [row for p in parts for row in p.noise]
    derived_halves = [row for p in parts for row in p.derived_half_widths]
    return Release(
        tuple(key_types),
        [g for p in parts for g in p.groups],
        [list(row) for p in parts for row in p.stats],
        intervals,
        [row for p in parts for row in p.derived],
        confidence,
        tuple(notes),
        [row for p in parts for row in p.half_widths],
        derived_half_widths=derived_halves
        if any(h is not None for row in derived_halves for h in row)
        else [],
        noise=noise if any(any(row) for row in noise) else [],  # (Release.noise: picked_words)
    )


def _widened(rel: Release, keys: tuple[int, ...], n: int, pos: int) -> Release:
    """One set's release as rows of the whole statement: all ``n`` keys (None where the set
    rolled one up, its ``keys`` where it groups by them), then the set number ``pos``; every
    row with its derived intervals, half-widths (presentation rounding: Release.half_widths,
    Release.derived_half_widths) and noise-alone intervals, empty or None where the set's
    release has none."""
    groups: list[list[str | None]] = []
    for g in rel.groups:
        full: list[str | None] = [None] * n
        for i, v in zip(keys, g, strict=True):
            full[i] = v
        groups.append([*full, str(pos)])
    derived = [list(row) for row in rel.derived] if rel.derived else [[] for _ in rel.groups]
    return replace(
        rel,
        groups=groups,
        derived=derived,
        half_widths=[list(row) for row in half_widths(rel)],
        derived_half_widths=[list(row) for row in rel.derived_half_widths]
        if rel.derived_half_widths
        else [[None] * len(row) for row in derived],
        noise=[list(row) for row in rel.noise]
        if rel.noise
        else [[None] * len(s) for s in rel.stats],
    )


def _quantiles_as_noticed(
    plan: SetsPlan, intervals: list[list[tuple[float, float] | None]]
) -> None:
    """A quantile's columns as its one notice over all the sets says (dpsql.execute.notices:
    :func:`~dpsql.execute.disowned.quantile_disown` of the whole statement): a set that cannot
    lose a whole group keeps MIN's high end (MAX's low end) in its own release, but where
    another set can, the notice NULLs both ends, so every set's do."""
    for si, s in enumerate(plan.analysis.statistics):
        mech = plan.measure_plan(s.measures[0]).mechanism if s.func == "quantile" else None
        if not isinstance(mech, Quantile):
            continue
        d = quantile_disown(plan.analysis, float(mech.quantile))
        if d is not None and d.keep == "none":
            for row in intervals:
                row[si] = None


def _set_of(plan: SetsPlan, position: int) -> int:
    return next(i for i, sp in enumerate(plan.sets) if position in sp.positions)

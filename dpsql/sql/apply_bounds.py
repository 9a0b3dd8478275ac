"""A statement's analysis with its ``auto`` contribution bounds in place (pure).

:func:`apply_bounds` is what every path runs once the bounds are known (chosen now, stored by an
earlier statement, or their defaults: :mod:`dpsql.sql.auto_bounds` says what to choose,
:mod:`dpsql.execute.auto_bounds` chooses): the rewrite and the plan then read R, G and the
clamping ranges from the resolved :class:`~dpsql.sql.analysis.Analysis` as they read fixed numbers
from the policy.
"""

from __future__ import annotations

from dataclasses import replace

from dpsql.sql.analysis import Analysis, Measure, Statistic
from dpsql.sql.auto_bound_types import DECLARED, DECLARED_TOTAL, ONE_ROW, AutoBounds
from dpsql.sql.auto_bounds import (
    CLAMPED_KINDS,
    TOTAL_KINDS,
    auto_column,
    declared_choices,
    total_column,
)

LOSSY = ("rows", "groups", "total")
"""The bounds that can leave a unit's rows or groups out (Analysis.auto_bounded)."""


def apply_bounds(a: Analysis, bounds: AutoBounds) -> Analysis:
    """``a`` with the chosen R, G and clamping ranges in place of ``auto`` (pure).

    The policy table is copied with the numbers (so the rewrite and the plan read them as fixed
    ones); clamped measures of a column get the chosen range, and their statistics' keys, range
    and AVG/VAR midpoints follow.
    """
    if not bounds.chosen:
        return a
    update: dict[str, int] = {}
    rows, groups = bounds.get("rows"), bounds.get("groups")
    if rows is not None:
        update["max_rows_per_unit"] = int(rows.value)
    if groups is not None:
        update["max_groups_per_unit"] = int(groups.value)
    private = a.private.model_copy(update=update) if update else a.private
    # a join's private tables all take the chosen numbers (chosen only when all say auto)
    sources = tuple(
        (al, t, private if p is a.private else p.model_copy(update=update) if p else p)
        for al, t, p in a.sources
    )
    renamed: dict[str, Measure] = {}
    measures = []
    for m in a.measures:
        new = m
        if auto_column(a, m) is not None and m.arg is not None:
            text = m.arg_sql
            lo, hi = bounds.get("value_lo", text), bounds.get("value_hi", text)
            new = replace(
                m,
                lo=lo.value if lo is not None else m.lo,
                hi=hi.value if hi is not None else m.hi,
            )
        total = bounds.get("total", total_column(m)) if m.kind in TOTAL_KINDS else None
        if total is not None:
            new = replace(new, total=total.value)
        renamed[m.key] = new
        measures.append(new)
    stats = tuple(_restat(s, renamed) for s in a.statistics)
    # no unit can lose a row or a group to these (a declared total: none whose rows are as
    # the data owner declared them, as for declared max_rows_per_unit)
    exact = (DECLARED, ONE_ROW, DECLARED_TOTAL)
    auto = {c.kind for c in bounds.chosen if c.kind in LOSSY and c.rule not in exact}
    # kept at the fixed default by the guard (too few units at this epsilon): Analysis.fell_back
    fell = {c.kind for c in bounds.chosen if c.kind in auto and c.fallback and not c.wider}
    return replace(
        a,
        private=private,
        sources=sources,
        measures=tuple(measures),
        statistics=stats,
        auto_bounded=tuple(sorted(set(a.auto_bounded) | auto)),
        fell_back=tuple(sorted(set(a.fell_back) | fell)),
    )


def with_declared_total(a: Analysis) -> Analysis:
    """``a`` with the L1 caps over groups of its table's declared per-unit total
    (``max_rows_per_unit_total``: :func:`dpsql.sql.auto_bounds.declared_choices`) in place, for
    declared and ``auto`` R and G alike; ``a`` itself when none applies."""
    chosen = declared_choices(a)
    return apply_bounds(a, AutoBounds(chosen)) if chosen else a


def _restat(s: Statistic, renamed: dict[str, Measure]) -> Statistic:
    keys = tuple(renamed[k].key if k in renamed else k for k in s.measures)
    if keys == s.measures:
        return s
    first = renamed[s.measures[0]]
    lo, hi = (first.lo, first.hi) if first.kind in CLAMPED_KINDS else (s.lo, s.hi)
    return replace(s, measures=keys, lo=lo, hi=hi)

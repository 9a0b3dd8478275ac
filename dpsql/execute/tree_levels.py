"""Each leaf's interval level for a tree statement's ``_low``/``_high`` columns (step 2 of
:mod:`dpsql.execute.tree_intervals`).

An output row built from k leaf intervals holds when all k hold: at least 1 - k x (1 - level)
by the union bound, so a leaf whose values enter an output row k at a time is asked for
1 - alpha/k. k is counted per output row before any release (:func:`counted_reads`), by the
rewritten post-processing run over the leaves' public rows (:func:`key_rows`) with every leaf
interval's miss set to 1; where that is not known, statically (:func:`static_reads`: all of a
leaf's declared rows). The argument, in plain words: docs/accuracy.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from dpsql.execute.noise import Release
from dpsql.result import ResultColumn
from dpsql.sql.analysis import Analysis
from dpsql.sql.interval_sql import Held
from dpsql.sql.intervals import derived_outputs
from dpsql.sql.tree_intervals import IvPlan, OutCol


def _k(out: OutCol, rows: Sequence[int | None]) -> int | None:
    """How many leaf intervals an output row reads at most, counted statically: a SUM over a
    leaf's rows reads all of them (None: a leaf's row count is not known)."""
    if not isinstance(out.info, Held):
        return 0
    k = 0
    for leaf, every in out.info.events:
        n = rows[leaf] if every else 1
        if n is None:
            return None
        k += max(1, n)
    return k


def static_reads(plan: IvPlan, rows: Sequence[int | None]) -> dict[int, int | None]:
    """Per noisy output (by hid), the leaf intervals a row of it reads at most, counted from
    the plan alone (``rows[i]``: leaf i's rows, or a bound on them; None when unknown)."""
    return {o.info.hid: _k(o, rows) for o in plan.outputs if isinstance(o.info, Held)}


def counted_reads(
    plan: IvPlan, columns: Sequence[ResultColumn], rows: Sequence[Sequence[Any]]
) -> dict[int, int]:
    """Per noisy output (by hid), the most leaf intervals one of its rows read, from the
    rewritten post-processing run with every leaf interval's miss set to 1 (so its ``_miss``
    column counts them); outputs without a row or a count are left out."""
    at = {c.name: j for j, c in enumerate(columns)}
    out: dict[int, int] = {}
    for o in plan.outputs:
        if not isinstance(o.info, Held):
            continue
        j = at.get(f"_dpsql_iv{o.info.hid}_miss")
        got = [int(math.ceil(r[j])) for r in rows if j is not None and r[j] is not None]
        if got:
            out[o.info.hid] = max(got)
    return out


def leaf_levels(
    plan: IvPlan,
    rows: Sequence[int | None],
    confidence: float,
    counted: dict[int, int] | None = None,
) -> list[float]:
    """Each leaf's interval level: 1 - alpha/k for the largest k of the output rows it enters.
    ``rows[i]``: leaf i's rows, or a bound on them (None when unknown); ``counted``: the reads
    per output row counted on the leaves' public rows (:func:`counted_reads`), used where known.
    Valid either way: the union bound over a row's k intervals at 1 - alpha/k each, where k is
    at least what that row reads, gives it alpha; :func:`attach` checks each row's own sum."""
    alpha = 1 - confidence
    out = [confidence] * len(rows)
    static = static_reads(plan, rows)
    for o in plan.outputs:
        if not isinstance(o.info, Held):
            continue
        k = (counted or {}).get(o.info.hid) or static[o.info.hid]
        if not k:
            continue
        for leaf, _ in o.info.events:
            out[leaf] = max(out[leaf], 1 - alpha / k)
    return out


def key_rows(a: Analysis, key_types: Sequence[str], declared: Any) -> Release:
    """Leaf ``a``'s rows as known before its release, values and intervals NULL: one row
    without GROUP BY, every declared key combination (public: a release has exactly these
    rows), none when partition selection will choose them (``declared`` None)."""
    nk = len(a.group_keys)
    if declared is None:
        keys: list[list[str | None]] = []
    else:
        keys = [list(k) for k in itertools.product(*declared)] if nk else [[]]
    ns = len(a.statistics)
    nd = len(derived_outputs(a))
    return Release(
        tuple(key_types),
        keys,
        [[None] * ns for _ in keys],
        [[None] * ns for _ in keys],
        [[None] * nd for _ in keys],
    )


__all__ = ["counted_reads", "key_rows", "leaf_levels", "static_reads"]

"""A tree statement's derived values rounded to the resolution their noise supports.

The post-processing of a statement of several DP leaves (re-aggregation, shares, windows) runs in
PostgreSQL over the released values, and its numeric arithmetic keeps every digit a division
makes (``COUNT(*) * 100.0 / SUM(COUNT(*)) OVER ()`` printed 20.1436633317241265, a released AVG
of counts 24014.000000000000). Those digits are noise. A noisy output column's value ``v`` is
rounded to the nearest multiple of a power of ten about 1/100 of ``r |v|``, where ``r`` is the
smallest relative half-width among the released values of the leaves the column reads (each leaf
value's interval half-width over its value): the step interval ends get (1/100 of the half-width,
:func:`dpsql.execute.bias.round_outwards`), never coarser than that for the usual
post-processing, as a sum, product, ratio, scaling, max or min of released values has a relative
half-width (by interval arithmetic) at least the smallest of its inputs', and a difference a
larger one. Integer columns, NULLs, keys and other columns that carry no noise are untouched, and
so is a leaf's value passed through unchanged (as a flat statement's: the same released value
reads the same in every statement); so is everything when no released value has a finite,
nonzero relative half-width.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from dpsql.execute.bias import round_nearest
from dpsql.execute.noise import Release
from dpsql.sql.interval_sql import Held


def relative_resolution(releases: Iterable[Release]) -> float | None:
    """The smallest half-width / |value| over the released values' intervals (None: none)."""
    best: float | None = None
    for rel in releases:
        for stats, halves in zip(rel.stats, half_widths(rel), strict=False):
            for v, half in zip(stats, halves, strict=False):
                if half is None or isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
                    continue
                x = abs(float(v))
                if x > 0 and half > 0 and math.isfinite(x) and math.isfinite(half):
                    best = half / x if best is None else min(best, half / x)
    return best


def half_widths(rel: Release) -> list[list[float | None]]:
    """Per row, per statistic: its interval's half-width, also where the accuracy notice
    disowned the interval (NULL columns: the noise's resolution is still the same)."""
    if rel.half_widths:
        return rel.half_widths
    return [
        [None if iv is None else (float(iv[1]) - float(iv[0])) / 2 for iv in row]
        for row in rel.intervals
    ]


def round_value(v: Any, r: float) -> Any:
    """``v`` (numeric or float) to a multiple of 10^(floor(log10(r |v|)) - 2), nearest: the
    step of a noise half-width ``r |v|`` (:func:`dpsql.execute.bias.round_nearest`); other
    values, integers, whole numbers (:func:`whole`) and 0 unchanged."""
    if isinstance(v, bool) or not isinstance(v, (float, Decimal)):
        return v
    if whole(v):
        return v.to_integral_value() if isinstance(v, Decimal) else v
    x = abs(float(v))
    if not (x > 0 and math.isfinite(x) and r > 0 and math.isfinite(r) and r * x > 0):
        return v  # (r x underflows to 0 for tiny values: no step)
    return round_nearest(v, r * x)


def whole(v: Any) -> bool:
    """A numeric or float value that is a whole number: a sum, a window SUM or a multiple of
    released values that are themselves whole (counts, sums rounded to their step) is kept
    as it is, digit for digit, so that it adds up with the values it is computed from (a
    one-row ``SUM(COUNT(*)) OVER (PARTITION BY category)`` read 23,890 beside its only input
    23,889; newcomer21 #20). Its digits below the step are no noise of their own: they are
    the inputs' digits, already shown."""
    if isinstance(v, Decimal):
        return v.is_finite() and v == v.to_integral_value()
    return isinstance(v, float) and math.isfinite(v) and v == math.floor(v)


def column_resolutions(
    outputs: Iterable[tuple[str, Held | None]], releases: Sequence[Release]
) -> dict[str, float]:
    """Per noisy output column (lower-case name): the smallest relative half-width of the
    leaves it reads (``Held.events``; every leaf when that is not known, None); a leaf's own
    value passed through unchanged (``passthrough``) is not rounded, as a flat statement's is
    not: the same released value reads the same in every statement."""
    per_leaf = [relative_resolution([r]) for r in releases]
    every = relative_resolution(releases)
    out: dict[str, float] = {}
    for name, held in outputs:
        if held is not None and held.passthrough:
            continue
        leaves = {leaf for leaf, _ in held.events} if held is not None else None
        found = [
            x for i, x in enumerate(per_leaf) if x is not None and (leaves is None or i in leaves)
        ]
        r = min(found) if found else (every if leaves is None else None)
        if r is not None:
            key = name.lower()
            out[key] = min(r, out.get(key, r))
    return out


def round_rows(
    names: Sequence[str], rows: Sequence[Sequence[Any]], resolution: dict[str, float]
) -> list[tuple[Any, ...]]:
    """The rows with each column named in ``resolution`` (lower case) rounded by
    :func:`round_value` at its relative resolution."""
    at = [(j, resolution[n.lower()]) for j, n in enumerate(names) if n.lower() in resolution]
    if not at:
        return [tuple(row) for row in rows]
    out = []
    for row in rows:
        cells = list(row)
        for j, r in at:
            cells[j] = round_value(cells[j], r)
        out.append(tuple(cells))
    return out

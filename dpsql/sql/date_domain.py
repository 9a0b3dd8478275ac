"""Public key domains of ``date_trunc(unit, d)``: every unit between public bounds of ``d``.

``date_trunc('month', d)`` can only take the months from ``date_trunc('month', lo)`` to
``date_trunc('month', hi)`` when ``lo <= d <= hi``. Those bounds are public: the policy's declared
``bounds`` of ``d`` (a date or timestamp column), and the statement's own range on ``d``
(``d >= TO_DATE('2025-03-01', 'YYYY-MM-DD') AND d < DATE '2025-07-01'``, ANDed at the top level:
a Superset time range), whichever is narrower. The generated months are the key domain: every
one is released with noise, no partition selection (threshold, delta) is needed, and nothing
about the data shapes the list. Rows outside the bounds (a policy promise broken) give keys
outside the domain and are filtered out upstream (``CAST(key AS text) IN (...)``), so they can't
add groups. The keys are printed as PostgreSQL prints the result in dpsql's upstream sessions
(TimeZone UTC, DateStyle ISO): ``date_trunc`` of a date or timestamptz is a timestamptz
(``2025-03-01 00:00:00+00``), of a timestamp a timestamp (``2025-03-01 00:00:00``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from fractions import Fraction
from typing import TypeVar

from sqlglot import exp

from dpsql.sql.constants import add_months, as_point, constant, parse_timestamp
from dpsql.sql.nodes import POSTGRES

_P = TypeVar("_P", datetime, Fraction)

MAX_KEYS = 5000  # a longer domain (days over decades, seconds) is left to partition selection

_MONTHS = {"month": 1, "quarter": 3, "year": 12, "decade": 120, "century": 1200,
           "millennium": 12000}  # fmt: skip
_STEPS = {
    "week": timedelta(weeks=1),
    "day": timedelta(days=1),
    "hour": timedelta(hours=1),
    "minute": timedelta(minutes=1),
    "second": timedelta(seconds=1),
}


def unit_end(start: datetime, unit: str) -> datetime:
    """The start of the next ``unit`` after ``start`` (itself the start of one)."""
    if unit in _MONTHS:
        return add_months(start, _MONTHS[unit])
    return start + _STEPS.get(unit, timedelta(microseconds=1))


def trunc(t: datetime, unit: str) -> datetime:
    """PostgreSQL's date_trunc(unit, t) for the units above (centuries start in year 1)."""
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "second":
        return t.replace(microsecond=0)
    if unit == "minute":
        return t.replace(second=0, microsecond=0)
    if unit == "hour":
        return t.replace(minute=0, second=0, microsecond=0)
    if unit == "day":
        return day
    if unit == "week":
        return day - timedelta(days=day.weekday())  # ISO weeks start on Monday
    if unit == "month":
        return day.replace(day=1)
    if unit == "quarter":
        return day.replace(month=1 + 3 * ((t.month - 1) // 3), day=1)
    first = {"year": 1, "decade": 10, "century": 100, "millennium": 1000}[unit]
    if unit == "year":
        year = t.year
    elif unit == "decade":
        year = t.year - t.year % 10
    else:
        year = t.year - (t.year - 1) % first  # 2025 -> 2001 (century), 2001 (millennium)
    return day.replace(year=max(year, 1), month=1, day=1)


def range_parts(where: exp.Expr | None, base: str) -> list[tuple[str, exp.Expr, bool]]:
    """The bounds the top-level ANDed conditions of ``where`` put on ``base`` (its SQL text):
    ("lo" or "hi", the other side's expression, whether strict), from ``>``, ``>=``, ``<``,
    ``<=``, ``=`` and ``BETWEEN`` with ``base`` on either side; nothing else is read."""
    out: list[tuple[str, exp.Expr, bool]] = []
    node = where
    while isinstance(node, exp.Paren):
        node = node.this
    parts = list(node.flatten()) if isinstance(node, exp.And) else [node] if node else []
    for c in parts:
        while isinstance(c, exp.Paren):
            c = c.this
        if c.args.get("negate"):
            continue
        bounds: list[tuple[str, exp.Expr, bool]] = []
        if isinstance(c, exp.Between) and not c.args.get("symmetric"):
            if c.this.sql(POSTGRES) == base:
                bounds = [("lo", c.args["low"], False), ("hi", c.args["high"], False)]
        elif isinstance(c, (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ)):
            low = isinstance(c, (exp.GT, exp.GTE))
            strict = isinstance(c, (exp.GT, exp.LT))
            if c.this.sql(POSTGRES) == base:
                bounds = [("lo" if low else "hi", c.expression, strict)]
            elif c.expression.sql(POSTGRES) == base:
                bounds = [("hi" if low else "lo", c.this, strict)]
            if isinstance(c, exp.EQ):
                bounds = (
                    [("lo", bounds[0][1], False), ("hi", bounds[0][1], False)] if bounds else []
                )
        out.extend(bounds)
    return out


def where_bounds(
    where: exp.Expr | None,
    base: str,
    read: Callable[[str, exp.Expr], datetime | None] | None = None,
) -> tuple[tuple[datetime, bool] | None, tuple[datetime, bool] | None]:
    """The tightest lower and upper bounds on ``base`` of the top-level ANDed conditions, each
    with whether it is strict (``>``, ``<``); None for a side without one. ``read`` gives a
    bound's value from its side and the other side's expression (the session's zone:
    :func:`dpsql.sql.zone_bounds.read_point`); without it, a constant as written."""
    points: list[tuple[str, datetime, bool]] = []
    for side, value, strict in range_parts(where, base):
        if read is not None:
            p = read(side, value)
        else:
            v = constant(value)
            p = as_point(parse_timestamp(v) if isinstance(v, str) else v)
        if p is not None:
            points.append((side, p, strict))
    return tightest(points)


def number_bounds(
    where: exp.Expr | None, base: str
) -> tuple[tuple[Fraction, bool] | None, tuple[Fraction, bool] | None]:
    """:func:`where_bounds` for a number: the bounds whose other side is a number constant
    (``amount < 100``, ``income BETWEEN 1e5 AND 2e5``); a string constant is not read."""
    points: list[tuple[str, Fraction, bool]] = []
    for side, value, strict in range_parts(where, base):
        v = constant(value)
        if isinstance(v, Fraction):
            points.append((side, v, strict))
    return tightest(points)


def tightest(
    points: list[tuple[str, _P, bool]],
) -> tuple[tuple[_P, bool] | None, tuple[_P, bool] | None]:
    """The largest lower and the smallest upper bound of ``points`` (a strict one wins a tie)."""
    lo: tuple[_P, bool] | None = None
    hi: tuple[_P, bool] | None = None
    for side, p, strict in points:
        if side == "lo":
            if lo is None or p > lo[0] or (p == lo[0] and strict):
                lo = (p, strict)
        elif hi is None or p < hi[0] or (p == hi[0] and strict):
            hi = (p, strict)
    return lo, hi

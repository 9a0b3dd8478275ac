"""Value ranges of row-level expressions from declared bounds (interval arithmetic, exact).

The range of an aggregate's argument gives its sensitivity: one row changes a SUM by at most
max(|lo|, |hi|). Ranges come from the policy's declared bounds and the query's literals only,
never from the data. An expression whose range can't be bounded returns None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.functions import INTEGER_TYPES as _INTEGER_TYPES
from dpsql.sql.pg_types import Columns as Columns
from dpsql.sql.pg_types import is_integer, untyped_number
from dpsql.sql.pg_types import lookup as lookup
from dpsql.sql.temporal import temporal_type, unit_text


@dataclass(frozen=True)
class Interval:
    lo: Fraction
    hi: Fraction

    def __or__(self, other: Interval) -> Interval:
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    @property
    def magnitude(self) -> Fraction:
        return max(abs(self.lo), abs(self.hi))

    @property
    def mid(self) -> Fraction:
        return (self.lo + self.hi) / 2

    @property
    def half_width(self) -> Fraction:
        return (self.hi - self.lo) / 2


def literal_value(node: exp.Expr) -> Fraction | None:
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Neg):
        v = literal_value(node.this)
        return -v if v is not None else None
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return Fraction(Decimal(node.this))
        except (InvalidOperation, ValueError):
            return None
    return None


def _rounded(node: exp.Expr, columns: Columns) -> Interval | None:
    """ROUND(x[, d]) and TRUNC(x[, d]) lie in [floor(lo), ceil(hi)] at d's precision (monotone
    in x); FLOOR and CEIL in [floor(lo), floor(hi)] and [ceil(lo), ceil(hi)]."""
    r = value_range(node.this, columns)
    if r is None:
        return None
    if isinstance(node, exp.Floor):
        return Interval(Fraction(math.floor(r.lo)), Fraction(math.floor(r.hi)))
    if isinstance(node, exp.Ceil):
        return Interval(Fraction(math.ceil(r.lo)), Fraction(math.ceil(r.hi)))
    d = (
        literal_value(node.args["decimals"])
        if node.args.get("decimals") is not None
        else Fraction(0)
    )
    if d is None or d.denominator != 1 or abs(d) > 1000:
        return Interval(r.lo - 1, r.hi + 1)  # (a parameter: bound once known)
    unit = Fraction(10) ** -int(d)
    return Interval(math.floor(r.lo / unit) * unit, math.ceil(r.hi / unit) * unit)


Half = tuple[Fraction | None, Fraction | None]  # (lower, upper) bound; None: unbounded there


def _half_range(node: exp.Expr, columns: Columns) -> Half | None:
    """Lower and upper bounds of ``node`` (None in a place: unbounded on that side; None: an
    argument that is neither bounded nor a plain number column).

    ``LEAST(x, 100)`` is at most 100 whatever ``x``, ``GREATEST(x, 0)`` at least 0, so
    ``GREATEST(LEAST(x, 100), 0)`` is in [0, 100] even for a numeric column without declared
    bounds: an analyst's own clamp (NULL arguments are ignored, as PostgreSQL does; the whole
    aggregate argument is clamped to the interval again in the private SQL). A column without
    bounds counts only when it is a number (a text column would be compared as text).
    """
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.Greatest, exp.Least)):
        parts = [_half_range(p, columns) for p in [node.this, *node.expressions]]
        if any(p is None for p in parts):
            return None
        los = [p[0] for p in parts if p is not None]
        his = [p[1] for p in parts if p is not None]
        if isinstance(node, exp.Least):
            known_hi = [x for x in his if x is not None]
            lo = None if any(x is None for x in los) else min(x for x in los if x is not None)
            return lo, min(known_hi) if known_hi else None
        known_lo = [x for x in los if x is not None]
        hi = None if any(x is None for x in his) else max(x for x in his if x is not None)
        return max(known_lo) if known_lo else None, hi
    r = value_range(node, columns)
    if r is not None:
        return r.lo, r.hi
    if isinstance(node, exp.Column):
        col = lookup(columns, node)
        if col is not None and col.family in ("integer", "numeric") and not col.identifier:
            return None, None
    return None


def _divisor(node: exp.Expr) -> Fraction | None:
    """A constant divisor: a number, or a quoted one PostgreSQL types as the dividend."""
    v = literal_value(node)
    return v if v is not None else untyped_number(node)


def _quotient(node: exp.Div | exp.IntDiv, columns: Columns) -> Interval | None:
    """The range of ``a / b``: the real quotient's, and for PostgreSQL's integer division (both
    operands integers: :func:`~dpsql.sql.pg_types.is_integer`, or ``div(a, b)``) the integers it
    truncates to toward zero, ``trunc(lo) .. trunc(hi)`` (trunc is monotone): ``quantity / 3``
    over [1, 10] is [0, 3], whose 0 the aggregate's clamp must keep."""
    a = value_range(node.this, columns)
    if a is None:
        return None
    d = _divisor(node.expression)
    if d is None:  # by an expression: bounded when its range excludes 0
        b = value_range(node.expression, columns)
        if b is None or b.lo <= 0 <= b.hi:
            return None  # near zero the quotient is unbounded; the rewrite guards zero
        q = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi]
    elif d == 0:
        return None
    else:
        q = [a.lo / d, a.hi / d]
    if isinstance(node, exp.IntDiv) or is_integer(node, columns):
        return Interval(Fraction(math.trunc(min(q))), Fraction(math.trunc(max(q))))
    return Interval(min(q), max(q))


def _remainder(node: exp.Mod, columns: Columns) -> Interval | None:
    """The range of ``a % d`` for a constant ``d``: the sign of ``a``, below ``|d|`` in size (at
    most ``|d| - 1`` between integers) and never larger than ``a`` itself."""
    a = value_range(node.this, columns)
    d = _divisor(node.expression)
    if a is None or d is None or d == 0:
        return None
    top = abs(d) - 1 if is_integer(node, columns) and d.denominator == 1 else abs(d)
    lo = Fraction(0) if a.lo >= 0 else max(-top, a.lo)
    hi = Fraction(0) if a.hi <= 0 else min(top, a.hi)
    return Interval(lo, hi)


# EXTRACT / date_part fields of a date or timestamp whose range is the calendar's, whatever the
# value (PostgreSQL 15: an infinite date or timestamp gives NULL for these, not a number):
# seconds below 60 (a leap second's 23:59:60 is read as the next minute's 00), a week of the ISO
# year 1..53, a day of the year 1..366
FIELD_RANGES = {
    "month": (1, 12), "day": (1, 31), "dow": (0, 6), "isodow": (1, 7), "doy": (1, 366),
    "quarter": (1, 4), "week": (1, 53), "hour": (0, 23), "minute": (0, 59), "second": (0, 60),
    "milliseconds": (0, 60_000), "microseconds": (0, 60_000_000),
}  # fmt: skip


def _field(node: exp.Extract, columns: Columns) -> Interval | None:
    """``EXTRACT(field FROM d)`` / ``date_part('field', d)`` of a date or timestamp: the field's
    calendar range (:data:`FIELD_RANGES`); a year or epoch from the column's declared bounds
    (:func:`_at_bounds`); None for another field or an argument of another type (an interval's
    day is any number)."""
    field = unit_text(node.this)
    known = FIELD_RANGES.get(field or "")
    if known is None:
        return _at_bounds(field or "", node.expression, columns)
    text = Column(type="text")
    if temporal_type(node.expression, lambda c: lookup(columns, c) or text) is None:
        return None
    return Interval(Fraction(known[0]), Fraction(known[1]))


def _at_bounds(field: str, arg: exp.Expr, columns: Columns) -> Interval | None:
    """``EXTRACT(year | isoyear | epoch FROM c)`` of a date or timestamp column ``c`` with
    declared bounds: the field at the two bounds (each field only grows with time, so over
    [lo, hi] it lies between its values there). A timestamptz's year is read in the session's
    time zone: a day either side covers every zone. As for a numeric column, the bounds are
    the policy's, not the data's: the aggregate's argument is clamped into this range
    (:func:`dpsql.sql.rewrite.clamp_values.clamp_values`), so a value outside the declared
    bounds counts as the nearest bound's field. None for another field or argument.

    >>> cols = {"d": Column(type="date", bounds=["2024-12-30", "2031-01-01"])}
    >>> [_at_bounds(f, exp.column("d"), cols) for f in ("year", "isoyear", "epoch")]
    [Interval(lo=Fraction(2024, 1), hi=Fraction(2031, 1)), Interval(lo=Fraction(2025, 1), hi=Fraction(2031, 1)), Interval(lo=Fraction(1735516800, 1), hi=Fraction(1924992000, 1))]
    """
    while isinstance(arg, exp.Paren):
        arg = arg.this
    col = lookup(columns, arg) if isinstance(arg, exp.Column) else None
    if col is None or col.bounds is None or not col.temporal:
        return None
    kind = temporal_type(arg, lambda _: col)
    if field == "epoch":  # a date's at its midnight (PostgreSQL 15), a timestamp's as read
        scale = 86400 if kind == "date" else 1
        return Interval(col.lo * scale, col.hi * scale)
    if field not in ("year", "isoyear"):
        return None
    lo, hi = col.bounds
    assert isinstance(lo, date) and isinstance(hi, date)  # (a temporal column's)
    if kind == "timestamptz" or any(isinstance(v, datetime) and v.tzinfo for v in (lo, hi)):
        lo, hi = lo - timedelta(days=1), hi + timedelta(days=1)
    if field == "isoyear":
        return Interval(Fraction(lo.isocalendar()[0]), Fraction(hi.isocalendar()[0]))
    return Interval(Fraction(lo.year), Fraction(hi.year))


def value_range(node: exp.Expr, columns: Columns) -> Interval | None:
    """The range of ``node`` over all rows, given the (clamped) columns' declared bounds."""
    v = literal_value(node)
    if v is not None:
        return Interval(v, v)
    if isinstance(node, exp.Paren):
        return value_range(node.this, columns)
    if isinstance(node, exp.Column):
        col = lookup(columns, node)
        if col is None or col.bounds is None or col.temporal:
            return None  # a date's bounds are for MIN/MAX/percentiles (analyze_quantiles)
        return Interval(col.lo, col.hi)
    if isinstance(node, exp.Boolean):
        return Interval(Fraction(int(node.this)), Fraction(int(node.this)))
    if isinstance(node, exp.Neg):
        r = value_range(node.this, columns)
        return Interval(-r.hi, -r.lo) if r else None
    if isinstance(node, exp.Cast):
        r = value_range(node.this, columns)
        if r is not None and node.to.this in _INTEGER_TYPES:  # rounds to an integer
            return Interval(Fraction(math.floor(r.lo)), Fraction(math.ceil(r.hi)))
        return r
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        a = value_range(node.this, columns)
        b = value_range(node.expression, columns)
        if a is None or b is None:
            return None
        if isinstance(node, exp.Add):
            return Interval(a.lo + b.lo, a.hi + b.hi)
        if isinstance(node, exp.Sub):
            return Interval(a.lo - b.hi, a.hi - b.lo)
        prods = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
        return Interval(min(prods), max(prods))
    if isinstance(node, (exp.Div, exp.IntDiv)):
        return _quotient(node, columns)
    if isinstance(node, exp.Mod):
        return _remainder(node, columns)
    if isinstance(node, exp.Abs):
        r = value_range(node.this, columns)
        if r is None:
            return None
        lo = Fraction(0) if r.lo <= 0 <= r.hi else min(abs(r.lo), abs(r.hi))
        return Interval(lo, r.magnitude)
    if isinstance(node, (exp.Round, exp.Floor, exp.Ceil, exp.Trunc)):
        return _rounded(node, columns)
    if isinstance(node, exp.Extract):
        return _field(node, columns)
    if isinstance(node, exp.WidthBucket):  # a bucket number: 0 .. count + 1
        n = node.args.get("num_buckets")
        count = literal_value(n) if isinstance(n, exp.Expr) else None
        return None if count is None else Interval(Fraction(0), count + 1)
    if isinstance(node, (exp.Greatest, exp.Least)):
        half = _half_range(node, columns)
        if half is None or half[0] is None or half[1] is None:
            return None
        return Interval(half[0], half[1])
    if isinstance(node, exp.Coalesce):
        parts = [node.this, *node.expressions]
        found = [value_range(p, columns) for p in parts]
        rs = [r for r in found if r is not None]
        if len(rs) != len(found):
            return None
        joined = rs[0]
        for r in rs[1:]:
            joined = joined | r
        return joined
    if isinstance(node, exp.Nullif):
        r = value_range(node.this, columns)
        v = literal_value(node.expression)
        if r is not None and v is not None and is_integer(node.this, columns):
            # NULLIF(quantity, 0) over whole numbers in [0, 10]: never 0, so [1, 10]
            if v == r.lo and r.lo < r.hi:
                return Interval(r.lo + 1, r.hi)
            if v == r.hi and r.lo < r.hi:
                return Interval(r.lo, r.hi - 1)
        return r
    if isinstance(node, (exp.Case, exp.If)):
        branches = [i.args.get("true") for i in node.args.get("ifs") or []]
        default = node.args.get("default")
        if isinstance(node, exp.If):
            branches = [node.args.get("true")]
            default = node.args.get("false")
        out: Interval | None = None
        for b in [*branches, default]:
            if b is None:
                continue  # missing ELSE gives NULL, ignored by aggregates
            r = value_range(b, columns)
            if r is None:
                return None
            out = r if out is None else out | r
        return out
    if isinstance(node, (exp.Predicate, exp.Not, exp.And, exp.Or, exp.Is, exp.In, exp.Between)):
        return Interval(Fraction(0), Fraction(1))  # booleans sum as 0/1 after a cast
    return None

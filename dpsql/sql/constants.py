"""The value of a public constant expression, computed as PostgreSQL would (or ``UNKNOWN``).

Used where dpsql reasons about the query's own constants without running anything: to narrow a
GROUP BY key's domain by the WHERE clause (:mod:`dpsql.sql.key_domain`) and to check that a
constant date/time constructor can't fail (:mod:`dpsql.sql.temporal`). Only the query text is
read, never data. Whatever is not understood exactly is ``UNKNOWN``: a caller must then assume
nothing about it. ``now()``/``current_date`` are ``UNKNOWN`` too (their value is the upstream
transaction's start time, not ours).

>>> import sqlglot
>>> constant(sqlglot.parse_one("DATE '2025-03-01' + INTERVAL '1 month'", read="postgres"))
datetime.datetime(2025, 4, 1, 0, 0)
>>> constant(sqlglot.parse_one("TO_DATE('2025-03-01', 'YYYY-MM-DD')", read="postgres"))
datetime.date(2025, 3, 1)
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Final

from sqlglot import exp

from dpsql.sql.formats import written_format


class _Unknown:
    """A value dpsql can't compute exactly from the query text."""

    def __repr__(self) -> str:
        return "UNKNOWN"


class _Null:
    """SQL NULL."""

    def __repr__(self) -> str:
        return "NULL"


UNKNOWN: Final = _Unknown()
NULL: Final = _Null()

Value = Fraction | str | bool | date | datetime | _Null  # datetime before date in isinstance
Const = Value | _Unknown

# The to_date / to_timestamp formats understood exactly (sqlglot's translation to strftime):
# values must match them strictly (PostgreSQL is more lenient; anything else is refused).
DATE_FORMATS: Final = ("%Y-%m-%d", "%Y%m%d", "%Y/%m/%d", *(DAY_FIRST := (
    "%d/%m/%Y", "%m/%d/%Y", "%d.%m.%Y", "%d-%m-%Y"
)))  # fmt: skip
TIME_FORMATS: Final = (
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
)
_DATE = re.compile(r"\s*(\d{4})-(\d{2})-(\d{2})\s*$")
_TIMESTAMP = re.compile(
    r"\s*(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,6})?)?)?\s*$"
)
_UNITS: Final = {
    "microsecond": timedelta(microseconds=1),
    "millisecond": timedelta(milliseconds=1),
    "second": timedelta(seconds=1),
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(weeks=1),
}
_MONTHS: Final = {"month": 1, "quarter": 3, "year": 12, "decade": 120}


def parse_date(text: str) -> date | None:
    """A 'YYYY-MM-DD' text as a date (None for any other spelling or an invalid date)."""
    m = _DATE.match(text)
    if m is None:
        return None
    try:
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def parse_timestamp(text: str) -> datetime | None:
    """'YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]' as a naive datetime (None for anything else)."""
    m = _TIMESTAMP.match(text)
    if m is None:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    try:
        return datetime(
            int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0),
            int((frac or ".0")[1:].ljust(6, "0")),
        )  # fmt: skip
    except ValueError:
        return None


def pg_format(fmt: str) -> str:
    """A PostgreSQL date/time pattern (``'YYYY-MM-DD'``) in the ``strftime`` terms sqlglot gives
    a literal pattern when it parses ``to_date(x, 'YYYY-MM-DD')`` (``'%Y-%m-%d'``).

    >>> pg_format("YYYY-MM-DD HH24:MI:SS")
    '%Y-%m-%d %H:%M:%S'
    """
    from sqlglot.dialects.postgres import Postgres
    from sqlglot.time import format_time

    return format_time(fmt, Postgres.TIME_MAPPING, Postgres.TIME_TRIE) or fmt


def strptime_strict(value: str, fmt: str) -> datetime | None:
    """``value`` parsed by ``fmt`` (one of the formats above), or None. A day-first or
    month-first date must be written in full (``01/10/2025``, as ``fmt`` prints it back):
    Python's ``strptime`` takes spellings PostgreSQL's ``to_date`` may read otherwise."""
    try:
        t = datetime.strptime(value, fmt)
    except ValueError:
        return None
    return t if fmt not in DAY_FIRST or t.strftime(fmt) == value else None


def interval_delta(n: exp.Interval) -> tuple[int, timedelta] | None:
    """An INTERVAL constant as (months, the rest), or None when not a plain '<number> <unit>'."""
    this = n.this
    text = str(this.this) if isinstance(this, exp.Literal) else None
    unit_node = n.args.get("unit")
    unit = str(unit_node.this).lower() if isinstance(unit_node, (exp.Var, exp.Literal)) else None
    parts = (text or "").split()
    if unit is None and len(parts) == 2:
        parts, unit = parts[:1], parts[1].lower()
    if len(parts) != 1 or unit is None:
        return None
    unit = unit.rstrip("s")
    try:
        amount = Fraction(Decimal(parts[0]))
    except (InvalidOperation, ValueError):
        return None
    if unit in _MONTHS:
        if amount.denominator != 1:
            return None  # PostgreSQL spills fractional months into days: not modelled
        return int(amount) * _MONTHS[unit], timedelta(0)
    if unit not in _UNITS:
        return None
    micro = amount * int(_UNITS[unit] / timedelta(microseconds=1))
    if micro.denominator != 1:
        return None
    return 0, timedelta(microseconds=int(micro))


def add_months(t: datetime, months: int) -> datetime:
    """PostgreSQL's timestamp + months: the day is clamped to the end of the target month."""
    y, m = divmod(t.month - 1 + months, 12)
    year, month = t.year + y, m + 1
    day = min(t.day, calendar.monthrange(year, month)[1])
    return t.replace(year=year, month=month, day=day)


def _shift(t: Const, delta: tuple[int, timedelta], sign: int) -> Const:
    if isinstance(t, datetime):
        base = t
    elif isinstance(t, date):
        base = datetime(t.year, t.month, t.day)  # date + interval is a timestamp
    else:
        return UNKNOWN
    months, rest = delta
    try:
        return add_months(base, sign * months) + sign * rest
    except (ValueError, OverflowError):
        return UNKNOWN


def _arith(node: exp.Add | exp.Sub) -> Const:
    sign = 1 if isinstance(node, exp.Add) else -1
    left, right = node.this, node.expression
    if isinstance(right, exp.Interval):
        d = interval_delta(right)
        return UNKNOWN if d is None else _shift(constant(left), d, sign)
    if isinstance(left, exp.Interval) and sign == 1:
        d = interval_delta(left)
        return UNKNOWN if d is None else _shift(constant(right), d, 1)
    a, b = constant(left), constant(right)
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a + sign * b
    if isinstance(a, date) and not isinstance(a, datetime) and isinstance(b, Fraction):
        if b.denominator != 1:
            return UNKNOWN
        try:
            return a + timedelta(days=sign * int(b))
        except OverflowError:
            return UNKNOWN
    return UNKNOWN


def _cast(node: exp.Cast) -> Const:
    to = node.to.this
    inner = constant(node.this)
    if isinstance(inner, _Null):
        return NULL
    T = exp.DataType.Type
    if to == T.DATE:
        if isinstance(inner, str):
            return parse_date(inner) or UNKNOWN
        if isinstance(inner, datetime):
            return inner.date()
        return inner if isinstance(inner, date) else UNKNOWN
    if to in (T.TIMESTAMP, T.TIMESTAMPTZ):
        if isinstance(inner, str):
            return parse_timestamp(inner) or UNKNOWN
        if isinstance(inner, datetime):
            return inner
        if isinstance(inner, date):
            return datetime(inner.year, inner.month, inner.day)
        return UNKNOWN
    if to in (T.TEXT, T.VARCHAR) and isinstance(inner, str):
        return inner
    return UNKNOWN


def constant(node: exp.Expr | None) -> Const:
    """The value of a constant expression (timestamps naive, in the upstream's UTC), or UNKNOWN.

    Parameters (``$1``) are UNKNOWN: a statement is analyzed again once they are bound.
    """
    if node is None:
        return UNKNOWN
    if isinstance(node, exp.Paren):
        return constant(node.this)
    if isinstance(node, exp.Null):
        return NULL
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return str(node.this)
        try:
            return Fraction(Decimal(str(node.this)))
        except (InvalidOperation, ValueError):
            return UNKNOWN
    if isinstance(node, exp.Neg):
        v = constant(node.this)
        return -v if isinstance(v, Fraction) else UNKNOWN
    if isinstance(node, exp.Cast):
        return _cast(node)
    if isinstance(node, (exp.Add, exp.Sub)):
        return _arith(node)
    if isinstance(node, exp.UnixToTime) and len([v for v in node.args.values() if v]) == 1:
        secs = constant(node.this)  # to_timestamp(seconds): an instant, naive UTC
        if isinstance(secs, _Null):
            return NULL
        if not isinstance(secs, Fraction) or not -62135596800 <= secs <= 253402300799:
            return UNKNOWN
        micros = round(secs * 1_000_000)
        return datetime(1970, 1, 1) + timedelta(microseconds=micros)
    if isinstance(node, (exp.StrToDate, exp.StrToTime)):
        fmt_node = node.args.get("format")
        value, fmt = constant(node.this), constant(fmt_node)
        if isinstance(value, _Null) or isinstance(fmt, _Null):
            return NULL  # to_date / to_timestamp are strict: NULL, never an error
        if not isinstance(value, str) or not isinstance(fmt, str):
            return UNKNOWN
        written = written_format(node)
        if written is not None:  # the format PostgreSQL reads (sent as written)
            if "%" in written:
                return UNKNOWN  # a literal % in PostgreSQL's terms, not strftime's
            fmt = pg_format(written)
        elif not isinstance(fmt_node, exp.Literal) or "%" not in fmt:
            # PostgreSQL's pattern: ('YYYY-MM-DD')::varchar, or a bound $2 ('YYYY-MM-DD'); a
            # literal pattern sqlglot parsed is in strftime terms already ('%Y-%m-%d')
            fmt = pg_format(fmt)
        fmt = fmt.replace('"T"', "T")
        formats = DATE_FORMATS if isinstance(node, exp.StrToDate) else TIME_FORMATS
        t = strptime_strict(value, fmt) if fmt in formats else None
        if t is None:
            return UNKNOWN
        return t.date() if isinstance(node, exp.StrToDate) else t
    return UNKNOWN


# What keeps an expression from being a public constant: a column (private or not), a parameter
# (bound later), a subquery, and the clock (its value is the upstream transaction's start: a
# query run apart from the statement would read another one).
_NOT_CONSTANT: Final = (
    exp.Column,
    exp.Star,
    exp.Placeholder,
    exp.Parameter,
    exp.Query,
    exp.Subquery,
    exp.AggFunc,
    exp.Window,
    exp.CurrentTimestamp,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.Localtimestamp,
    exp.Anonymous,
)


def is_public_constant(node: exp.Expr) -> bool:
    """True when ``node`` (a checked row-level expression: only deterministic functions) reads
    nothing but the statement's text: literals, casts and functions of them, so it takes one
    value on every row.

    >>> import sqlglot
    >>> [is_public_constant(sqlglot.parse_one(s, read="postgres"))
    ...  for s in ("ABS(3)", "'x'", "1 + 2", "a + 1", "now()", "$1")]
    [True, True, True, False, False, False]
    """
    return not any(isinstance(n, _NOT_CONSTANT) for n in node.walk())


def as_utc(t: datetime) -> datetime:
    """A naive UTC datetime (aware ones converted; dpsql's upstream sessions run in UTC)."""
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def as_point(v: object) -> datetime | None:
    """A date or timestamp as a naive UTC point in time (a date at its midnight); None for
    anything else.

    >>> as_point(date(2024, 2, 29)), as_point("2024-02-29")
    (datetime.datetime(2024, 2, 29, 0, 0), None)
    """
    return as_datetime(v) if isinstance(v, date) else None


def as_datetime(v: date) -> datetime:
    """A date (at its midnight) or a timestamp as a naive UTC datetime."""
    return as_utc(v) if isinstance(v, datetime) else datetime(v.year, v.month, v.day)

"""Date and time constructs over private rows: units, fields, constants, to_char/to_timestamp.

Part of the totality checks (:mod:`dpsql.sql.totality`): ``date_trunc`` units and ``extract``
fields must be valid for their argument's type (an invalid one fails only when a row reaches it),
constants stay within years 1..9999 and intervals within 100 years each, an interval is never
multiplied or divided and a date moves by at most 36525 days at a time
(:func:`check_time_arithmetic`), so ``now() ± interval`` and ``current_date ± n``, evaluated per
row (``now()`` is stable, not folded by the planner), can never overflow.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime
from fractions import Fraction

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.tables import Column
from dpsql.sql.constants import _Null, constant
from dpsql.sql.wording import plain_sql

ColumnOf = Callable[[exp.Column], Column]

TRUNC_UNITS = frozenset(
    "microseconds milliseconds second minute hour day week month quarter year decade century "
    "millennium".split()
)
DATE_FIELDS = frozenset(
    "century day decade dow doy epoch isodow isoyear julian millennium month quarter week year".split()
)
TIME_FIELDS = frozenset("hour minute second milliseconds microseconds".split())
TZ_FIELDS = frozenset("timezone timezone_hour timezone_minute".split())


def unit_text(node: exp.Expr | None) -> str | None:
    if isinstance(node, (exp.Var, exp.Literal)):
        return str(node.this).lower()
    if isinstance(node, exp.Column) and not node.table:
        return node.name.lower()  # sqlglot parses some units as bare names
    return None


def temporal_type(node: exp.Expr, column: ColumnOf) -> str | None:
    """'date', 'timestamp' or 'timestamptz' when ``node``'s type is known to be one of them."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        col = column(node)
        if col.family == "date":
            return "date"
        if col.family == "timestamp":
            return (
                "timestamptz"
                if col.type in ("timestamptz", "timestamp with time zone")
                else ("timestamp")
            )
        return None
    if isinstance(node, exp.Cast):
        t = node.to.this
        if t == exp.DataType.Type.DATE:
            return "date"
        if t == exp.DataType.Type.TIMESTAMP:
            return "timestamp"
        if t == exp.DataType.Type.TIMESTAMPTZ:
            return "timestamptz"
        return None
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        inner = temporal_type(node.this, column)
        return "timestamptz" if inner == "date" else inner
    if isinstance(node, (exp.CurrentTimestamp, exp.StrToTime, exp.UnixToTime)):
        return "timestamptz"
    if isinstance(node, (exp.CurrentDate, exp.StrToDate)):
        return "date"
    if isinstance(node, exp.Localtimestamp):
        return "timestamp"
    if isinstance(node, (exp.Add, exp.Sub)) and not node.find(exp.Column):
        kinds = {temporal_type(x, column) for x in (node.this, node.expression)}
        if "timestamptz" in kinds:
            return "timestamptz"
        if kinds & {"date", "timestamp"}:
            return "timestamp"
    return None


MAX_INTERVAL_YEARS = 100  # per INTERVAL literal
MAX_INTERVALS = 20  # per expression: constants stay within years 1..9999 ± 2000
_UNIT_YEARS = {
    "microsecond": 1e-6 / 31557600,
    "millisecond": 1e-3 / 31557600,
    "second": 1 / 31557600,
    "minute": 60 / 31557600,
    "hour": 3600 / 31557600,
    "day": 1 / 365.25,
    "week": 7 / 365.25,
    "month": 1 / 12,
    "quarter": 0.25,
    "year": 1.0,
}


def check_interval(n: exp.Interval) -> None:
    """An INTERVAL constant of at most 100 years (now() ± it is evaluated per row: no overflow)."""
    text = str(n.this.this) if isinstance(n.this, exp.Literal) and n.this.is_string else None
    unit = unit_text(n.args.get("unit"))
    parts = (text or "").split()
    if unit is None and len(parts) == 2:
        parts, unit = parts[:1], parts[1].lower()
    unit = (unit or "").rstrip("s")
    try:
        amount = float(parts[0]) if len(parts) == 1 else None
    except ValueError:
        amount = None
    if (
        amount is None
        or unit not in _UNIT_YEARS
        or abs(amount) * _UNIT_YEARS[unit] > MAX_INTERVAL_YEARS
    ):
        raise UnsupportedSql(
            f"the interval {plain_sql(n)} is not supported in private queries",
            hint=f"write INTERVAL '<number> <unit>' of at most {MAX_INTERVAL_YEARS} years",
        )


def check_year(text: str, sql: str) -> None:
    m = re.match(r"\s*(\d{1,5})-", text)
    if m is None or not 1 <= int(m.group(1)) <= 9999 or "bc" in text.lower():
        raise UnsupportedSql(
            f"the date/time constant {sql} is not supported in private queries",
            hint="write dates as 'YYYY-MM-DD' with a year between 1 and 9999",
        )


def check_to_char(n: exp.TimeToStr, column: ColumnOf) -> None:
    """to_char of a date/timestamp with a constant format never fails (infinite values give NULL)."""
    fmt = n.args.get("format")
    ok = isinstance(fmt, exp.Literal) and fmt.is_string and len(str(fmt.this)) <= 100
    if not ok or temporal_type(n.this, column) is None:
        raise UnsupportedSql(
            "to_char is supported on date/timestamp columns with a constant format",
            hint="e.g. to_char(created_at, 'YYYY-MM')",
        )


def check_str_to_time(n: exp.StrToTime | exp.StrToDate) -> None:
    """to_timestamp / to_date of constants that parse (checked here, so the call can't fail
    when PostgreSQL evaluates it per row: to_date and to_timestamp are not folded in advance)."""
    if isinstance(constant(n), datetime | date | _Null):  # NULL: strict, never an error
        return
    if any(isinstance(x, (exp.Parameter, exp.Placeholder)) for x in n.walk()):
        return  # checked again once its values are bound (SQLAlchemy binds both arguments)
    name = "to_date" if isinstance(n, exp.StrToDate) else "to_timestamp"
    example = (
        "to_date('2025-03-01', 'YYYY-MM-DD'), or DATE '2025-03-01'"
        if name == "to_date"
        else "to_timestamp('2025-03-01 00:00:00', 'YYYY-MM-DD HH24:MI:SS'), or TIMESTAMP "
        "'2025-03-01 00:00:00'"
    )
    raise UnsupportedSql(
        f"{plain_sql(n)} is not supported in private queries",
        detail=f"{name} is supported with a constant date in one of the formats YYYY-MM-DD, "
        "YYYYMMDD, YYYY/MM/DD (with HH24:MI[:SS[.US]] for to_timestamp), and for to_date also "
        "DD/MM/YYYY, MM/DD/YYYY, DD.MM.YYYY, DD-MM-YYYY written in full (01/10/2025), and a "
        "valid date",
        hint=f"e.g. {example}",
    )


def check_unix_to_time(n: exp.UnixToTime) -> None:
    """``to_timestamp(seconds)`` (Grafana's ``$__unixEpochFrom()`` / ``$__unixEpochTo()``
    written inside it) of a number constant whose instant lies in years 1..9999 (as every date
    constant here), or of a parameter (checked once bound, as a literal): PostgreSQL folds it
    before any row is read, and it can't fail on these values. Anything else, even a constant
    out of range (a data-independent error), is refused before anything runs or is charged."""
    extra = [k for k, v in n.args.items() if k != "this" and v is not None]
    arg = n.this
    if not extra and isinstance(arg, (exp.Parameter, exp.Placeholder)):
        return
    value = constant(arg)
    if not extra and isinstance(value, _Null):
        return  # strict: NULL, never an error
    if not extra and isinstance(value, Fraction) and UNIX_MIN <= value <= UNIX_MAX:
        return
    raise UnsupportedSql(
        f"{plain_sql(n)} is not supported in private queries",
        detail="to_timestamp(seconds) is supported with a number constant of seconds since "
        "1970-01-01 00:00:00+00 whose instant lies in the years 1 to 9999",
        hint="e.g. to_timestamp(1735689600), or TIMESTAMPTZ '2025-01-01 00:00:00+00'",
    )


UNIX_MIN = Fraction(-62135596800)  # 0001-01-01 00:00:00+00
UNIX_MAX = Fraction(253402300799)  # 9999-12-31 23:59:59+00


def check_trunc(n: exp.Expr, column: ColumnOf) -> None:
    unit = unit_text(n.args.get("unit"))
    if n.args.get("zone") is not None:
        raise UnsupportedSql("date_trunc with a time zone is not supported in private queries")
    if unit not in TRUNC_UNITS:
        raise UnsupportedSql(
            f"date_trunc unit {unit!r} is not valid",
            hint="use one of: " + ", ".join(sorted(TRUNC_UNITS)),
        )
    if temporal_type(n.this, column) is None:
        raise UnsupportedSql(
            "date_trunc needs a date or timestamp column in private queries",
            hint="e.g. date_trunc('month', created_at)",
        )


def check_extract(n: exp.Extract, column: ColumnOf) -> None:
    field = unit_text(n.this)
    kind = temporal_type(n.expression, column)
    if kind is None:
        raise UnsupportedSql(
            "extract/date_part needs a date or timestamp column in private queries",
            hint="e.g. extract(year FROM created_at)",
        )
    allowed = set(DATE_FIELDS)
    if kind != "date":
        allowed |= TIME_FIELDS
    if kind == "timestamptz":
        allowed |= TZ_FIELDS
    if field not in allowed:
        raise UnsupportedSql(
            f"field {field!r} is not supported for type {kind} in extract/date_part",
            hint="use one of: " + ", ".join(sorted(allowed)),
        )


# --- date/time arithmetic between constants (no column can take part: dpsql.sql.totality) -------

_TIME_NODES = (
    exp.Interval, exp.CurrentTimestamp, exp.CurrentDate, exp.Localtimestamp, exp.StrToTime,
    exp.StrToDate, exp.UnixToTime, exp.TimestampTrunc, exp.DateTrunc,
)  # fmt: skip
_TIME_TYPES = frozenset(
    {
        exp.DataType.Type.DATE,
        exp.DataType.Type.TIMESTAMP,
        exp.DataType.Type.TIMESTAMPTZ,
        exp.DataType.Type.INTERVAL,
    }
)
_NUMBER_TYPES = frozenset(
    {
        exp.DataType.Type.DECIMAL, exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT,
        exp.DataType.Type.BIGDECIMAL, exp.DataType.Type.INT, exp.DataType.Type.BIGINT,
        exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT,
    }
)  # fmt: skip
_NUMBER_NODES = (
    exp.Extract, exp.Length, exp.Round, exp.Floor, exp.Ceil, exp.Trunc, exp.WidthBucket, exp.Sign, exp.Abs, exp.Mod,
    exp.IntDiv,
)  # fmt: skip
# dpsql's own total forms (dpsql.sql.rewrite.make_total): numbers
_NUMBER_FUNCTIONS = frozenset(
    {"div", "trunc", "numeric_larger", "numeric_smaller", "float8larger", "float8smaller"}
)
MAX_DAYS = 36525  # a number of days added to a date: at most 100 years, as one INTERVAL


def value_kind(node: exp.Expr) -> str | None:
    """'number' or 'time' (a date, timestamp or interval) when ``node``'s type is clear from its
    shape, else None (a string literal, a column, NULL...).

    >>> import sqlglot
    >>> [value_kind(sqlglot.parse_one(s, read="postgres")) for s in (
    ...     "now() - INTERVAL '1 day'", "current_date - DATE '2020-01-01'",
    ...     "extract(year FROM now()) * 2", "'5'")]
    ['time', 'number', 'number', None]
    """
    while isinstance(node, (exp.Paren, exp.Neg)):
        node = node.this
    if isinstance(node, exp.Literal):
        return None if node.is_string else "number"
    if isinstance(node, _TIME_NODES):
        return "time"
    if isinstance(node, exp.Cast):
        to = node.to.this
        return "time" if to in _TIME_TYPES else "number" if to in _NUMBER_TYPES else None
    if isinstance(node, _NUMBER_NODES) or (
        isinstance(node, exp.Anonymous) and str(node.name).lower() in _NUMBER_FUNCTIONS
    ):
        return "number"
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        kinds = {value_kind(node.this), value_kind(node.expression)}
        if isinstance(node, exp.Sub) and kinds == {"time"}:
            return "number" if _is_date(node.this) and _is_date(node.expression) else "time"
        return "time" if "time" in kinds else "number" if "number" in kinds else None
    if isinstance(node, (exp.Nullif, exp.Coalesce, exp.Greatest, exp.Least)):
        return value_kind(node.this)
    return None


def _is_date(node: exp.Expr) -> bool:
    """Is ``node`` a date (date - date is an integer number of days)?"""
    while isinstance(node, exp.Paren):
        node = node.this
    return isinstance(node, (exp.CurrentDate, exp.StrToDate)) or (
        isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.DATE
    )


def int_literal(node: exp.Expr | None) -> int | None:
    """The value of an integer literal (signs and parentheses read), else None."""
    neg = False
    while isinstance(node, (exp.Neg, exp.Paren)):
        neg = neg != isinstance(node, exp.Neg)
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        return -int(node.this) if neg else int(node.this)
    return None


def check_time_arithmetic(n: exp.Expr) -> None:
    """Date/time arithmetic must stay within the bounded constants.

    ``now()``, ``current_date`` and ``to_timestamp`` are stable: PostgreSQL evaluates
    ``now() + x`` for each row that reaches it, so an out-of-range result (``now() + INTERVAL
    '100 years' * 3000``, ``current_date + 2147483647``) failed only when some row reached it,
    e.g. behind ``CASE WHEN amount > T``: a data-gated error. Intervals are at most 100 years
    each (:func:`check_interval`), a number of days added to a date at most :data:`MAX_DAYS`, at
    most ``MAX_INTERVALS`` of both per expression, and an interval is never multiplied or
    divided, so the result stays within years 1..9999 ± 2000, far inside PostgreSQL's range.
    """
    if n.find(exp.Column):
        return  # a column in arithmetic is numeric (dpsql.sql.totality._check_arithmetic)
    sides = (n.this, n.expression)
    kinds = [value_kind(x) for x in sides]
    if "time" not in kinds:
        return
    if not isinstance(n, (exp.Add, exp.Sub)):
        raise UnsupportedSql(
            f"{plain_sql(n)}: multiplying or dividing an interval is not supported in private "
            "queries",
            hint=f"write the interval as one constant, e.g. INTERVAL '90 days' (at most "
            f"{MAX_INTERVAL_YEARS} years)",
        )
    for side, k in zip(sides, kinds, strict=True):
        if k == "time":
            continue
        days = int_literal(side)
        if days is None or abs(days) > MAX_DAYS:
            raise UnsupportedSql(
                f"{plain_sql(n)} is not supported in private queries",
                detail=f"a date may be moved by a whole number of days up to {MAX_DAYS} or by "
                f"an INTERVAL constant of at most {MAX_INTERVAL_YEARS} years",
                hint="e.g. current_date - 30, or now() - INTERVAL '3 months'",
            )


def time_constants(node: exp.Expr) -> int:
    """INTERVAL constants and numbers of days added to dates in ``node`` (at most
    ``MAX_INTERVALS`` per expression)."""
    count = sum(1 for _ in node.find_all(exp.Interval))
    for n in node.find_all(exp.Add, exp.Sub):
        sides = (n.this, n.expression)
        if "time" in (value_kind(sides[0]), value_kind(sides[1])):
            count += sum(1 for x in sides if int_literal(x) is not None)
    return count

"""Date and time constructs over private rows: units, fields, constants, to_char/to_timestamp.

Part of the totality checks (:mod:`dpsql.sql.totality`): ``date_trunc`` units and ``extract``
fields must be valid for their argument's type (an invalid one fails only when a row reaches it),
constants stay within years 1..9999 and intervals within 100 years each, so ``now() ± interval``,
evaluated per row, can never overflow.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.tables import Column
from dpsql.sql.constants import constant
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
    if isinstance(node, (exp.CurrentTimestamp, exp.StrToTime)):
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
    if isinstance(constant(n), datetime | date):
        return
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
        "YYYYMMDD, YYYY/MM/DD (with HH24:MI[:SS[.US]] for to_timestamp), and a valid date",
        hint=f"e.g. {example}",
    )


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

"""A GROUP BY key that moves a bounded date by a constant: BI tools' weeks.

Metabase's week starting on Sunday is ``CAST((CAST(DATE_TRUNC('week', CAST((d + INTERVAL '1
day') AS date)) AS date) + INTERVAL '-1 day') AS date)``, Tableau's ``CAST((DATE_TRUNC('DAY',
CAST(d AS DATE)) + (-EXTRACT(DOW FROM d) * INTERVAL '1 DAY')) AS DATE)``. Date/time arithmetic
on a column is otherwise refused (:func:`dpsql.sql.totality._check_time_columns`): ``d +
INTERVAL '1 day'`` raises (22008) for a date past 294276 AD or near 4713 BC, and only when a row
holds one, so whether a statement failed would tell whether such a row exists (a free bit).

Here such a *shift* is allowed in a GROUP BY key when it reads one private date or timestamp
column with both bounds declared, and moves it by INTERVAL constants (at most 100 years each),
whole numbers of days, or an interval times a small bounded number (``EXTRACT(dow FROM d)``, an
integer up to 366), :data:`MAX_SHIFT_YEARS` in all. The rewrite (:func:`guard`, from
:mod:`dpsql.sql.rewrite.make_total`) evaluates each shift only for rows inside the column's
declared bounds: ``CASE WHEN d BETWEEN lo AND hi THEN d + INTERVAL '1 day' END``. The policy's
bounds are years 1..9999 (Python's dates), so every shifted value stays within years -2000..12000,
far inside PostgreSQL's 4713 BC..294276 AD: no row can make it raise. A row outside the bounds
gets NULL, which is no key (a date's bounds are its domain, docs/policy.md): the keys come from
the bounds (:mod:`dpsql.sql.shifted_keys`) and the key filter leaves such a row out.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timedelta

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.tables import Column
from dpsql.sql.constants import as_point, interval_delta
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.sources import PUBLIC_COLUMN
from dpsql.sql.temporal import check_interval, int_literal, temporal_type, value_kind
from dpsql.sql.wording import plain_sql

MAX_SHIFT_YEARS = 2000  # a key's shifts in all: years 1..9999 stay within -2000..12000
_FACTOR_FIELDS = {"dow": 6, "isodow": 7, "day": 31, "month": 12, "quarter": 4, "week": 53,
                  "doy": 366}  # fmt: skip
_MAX_FACTOR = 366
_MAX_DAYS = 36525  # a whole number of days added to a date: at most 100 years


def _bare(n: exp.Expr) -> exp.Expr:
    while isinstance(n, exp.Paren):
        n = n.this
    return n


def is_shift(n: exp.Expr, column: Callable[[exp.Column], Column | None]) -> bool:
    """``n`` is date/time arithmetic that reads a row: a date, timestamp or interval plus or
    minus something, with a column in it (or an interval times a number read from a row)."""
    if not isinstance(n, (exp.Add, exp.Sub, exp.Mul)) or n.find(exp.Column) is None:
        return False
    sides = (_bare(n.this), _bare(n.expression))
    if isinstance(n, exp.Mul):
        return any(isinstance(s, exp.Interval) for s in sides)

    def timely(x: exp.Expr) -> bool:
        if value_kind(x) == "time" or isinstance(x, exp.Interval):
            return True
        if isinstance(x, exp.Column):
            col = column(x)
            return col is not None and col.family in ("date", "timestamp")
        return temporal_type(x, lambda c: column(c) or PUBLIC_COLUMN) is not None

    return any(timely(s) for s in sides)


def _years(n: exp.Interval) -> float:
    from dpsql.sql.temporal import _UNIT_YEARS, unit_text

    text = str(n.this.this) if isinstance(n.this, exp.Literal) else ""
    unit = unit_text(n.args.get("unit"))
    parts = text.split()
    if unit is None and len(parts) == 2:
        parts, unit = parts[:1], parts[1].lower()
    return abs(float(parts[0])) * _UNIT_YEARS[(unit or "").rstrip("s")]


def _factor(x: exp.Expr, col_sql: str) -> int | None:
    """The largest magnitude of number ``x`` multiplying an interval: an integer literal up to
    366, or ``EXTRACT`` / ``date_part`` of a small field of the shifted column (a sign and casts
    to a number type read through); None otherwise."""
    x = _bare(x)
    while isinstance(x, (exp.Neg, exp.Cast, exp.Paren)):
        if isinstance(x, exp.Cast) and x.to.this not in (
            exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT,
            exp.DataType.Type.DECIMAL, exp.DataType.Type.DOUBLE,
        ):  # fmt: skip
            return None
        x = x.this
    lit = int_literal(x)
    if lit is not None:
        return abs(lit) if abs(lit) <= _MAX_FACTOR else None
    if isinstance(x, exp.Extract) and isinstance(x.expression, exp.Expr):
        field = str(x.this.this if isinstance(x.this, exp.Var) else x.this.name).lower()
        inner = _bare(x.expression)
        inner_cols = {c.sql(POSTGRES) for c in inner.find_all(exp.Column)}
        if field in _FACTOR_FIELDS and inner_cols <= {col_sql}:
            return _FACTOR_FIELDS[field]
    return None


def _offset_years(x: exp.Expr, base_kind: str | None, col_sql: str) -> float | None:
    """How far (in years, at most) offset ``x`` moves a date or time; None: not a shift dpsql
    can bound."""
    x = _bare(x)
    neg = False
    while isinstance(x, exp.Neg):
        neg, x = not neg, _bare(x.this)
    if isinstance(x, exp.Interval):
        check_interval(x)
        return _years(x)
    days = int_literal(x)
    if days is not None and base_kind == "date" and abs(days) <= _MAX_DAYS:
        return abs(days) / 365.25
    if isinstance(x, exp.Mul):
        a, b = _bare(x.this), _bare(x.expression)
        iv, num = (a, b) if isinstance(a, exp.Interval) else (b, a)
        if not isinstance(iv, exp.Interval):
            return None
        check_interval(iv)
        f = _factor(num, col_sql)
        return None if f is None else f * _years(iv)
    return None


def shifted_stand_in(
    expr: exp.Expr, column: Callable[[exp.Column], Column]
) -> tuple[exp.Expr, list[exp.Expr]]:
    """``expr`` (a GROUP BY key) with each shift replaced by the date or time it moves (``d +
    INTERVAL '1 day'`` reads ``d``), for the row-level checks; and the numbers that multiply an
    interval (``EXTRACT(dow FROM d)``), to be checked as row-level expressions of their own.
    ``expr`` itself unchanged when it has no shift.

    Raises:
        UnsupportedSql: a shift that is not one :func:`guard` makes total (the words say what
            is: a constant interval added to one bounded date or timestamp column)."""

    def known(c: exp.Column) -> Column | None:
        got = column(c)
        return None if got is PUBLIC_COLUMN else got

    if not any(is_shift(n, known) for n in expr.walk()):
        return expr, []
    out = expr.copy()
    factors: list[exp.Expr] = []
    total = 0.0
    for n in list(out.walk(bfs=False))[::-1]:  # innermost first
        if not isinstance(n, (exp.Add, exp.Sub)) or not is_shift(n, known):
            continue
        sides = [n.this, n.expression]
        kinds = [temporal_type(s, column) for s in sides]
        at = 0 if kinds[0] is not None else 1 if isinstance(n, exp.Add) else None
        if at is None or kinds[at] is None:
            raise _refused(n)
        base, offset = sides[at], sides[1 - at]
        cols = {c.sql(POSTGRES): c for c in n.find_all(exp.Column)}
        if len(cols) != 1:
            raise _refused(n)
        ((col_sql, c),) = cols.items()
        decl = known(c)
        if decl is None or decl.family not in ("date", "timestamp") or decl.bounds is None:
            raise _refused(n)
        years = _offset_years(offset, kinds[at], col_sql)
        if years is None:
            raise _refused(n)
        total += years
        factors += [
            m.expression if isinstance(_bare(m.this), exp.Interval) else m.this
            for m in offset.find_all(exp.Mul)
        ]
        if n is out:
            out = base
        else:
            n.replace(base)
    if total > MAX_SHIFT_YEARS:
        raise UnsupportedSql(
            f"{plain_sql(expr)} moves a date by up to {total:,.0f} years in all, above the "
            f"{MAX_SHIFT_YEARS:,} private queries allow",
            hint="move a date by less: e.g. d + INTERVAL '1 day'",
        )
    return out, factors


def _refused(n: exp.Expr) -> UnsupportedSql:
    return UnsupportedSql(
        f"{plain_sql(n)}: date/time arithmetic on a column is supported in a GROUP BY key only "
        "as a constant interval added to one private date or timestamp column with declared "
        "bounds (d + INTERVAL '1 day', d - EXTRACT(dow FROM d) * INTERVAL '1 day')",
        hint="group with date_trunc or extract of the column (date_trunc('week', d)), or "
        "declare the column's bounds in the policy",
    )


def _literal(v: date | datetime, decl: Column) -> exp.Expr:
    point = as_point(v)
    assert point is not None
    if decl.family == "date":
        return exp.Literal.string(point.date().isoformat())
    text = point.isoformat(sep=" ")
    if decl.type in ("timestamptz", "timestamp with time zone"):
        text += "+00"  # bounds of a timestamptz are UTC instants
    return exp.Literal.string(text)


def guard(n: exp.Expr, column: Callable[[exp.Column], Column | None]) -> exp.Expr | None:
    """``n`` (a shift :func:`shifted_stand_in` let through) evaluated only for rows inside its
    column's declared bounds: ``CASE WHEN d BETWEEN lo AND hi THEN n END`` (NULL outside);
    None when ``n`` is not such a shift (a Mul of an interval is left as it is: the shift that
    adds it is guarded)."""
    if not isinstance(n, (exp.Add, exp.Sub)) or not is_shift(n, column):
        return None
    c = n.find(exp.Column)
    decl = column(c) if c is not None else None
    if c is None or decl is None or decl.bounds is None:
        return None
    lo, hi = decl.bounds
    assert isinstance(lo, date) and isinstance(hi, date)
    cond = exp.Between(this=c.copy(), low=_literal(lo, decl), high=_literal(hi, decl))
    return exp.Case(ifs=[exp.If(this=cond, true=n)])


# the parts of a key that give the same value for every time of a day (dpsql.sql.time_keys:
# a timestamp's shifted keys): fields and truncations of a day or longer, whole-day moves
_DAY_FIELDS = {"year", "isoyear", "decade", "century", "millennium", "quarter", "month", "week",
               "day", "dow", "isodow", "doy"}  # fmt: skip
_DAY_UNITS = {"day", "week", "month", "quarter", "year", "decade", "century", "millennium"}
_DAY_NODES = (exp.Column, exp.Identifier, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Neg,
              exp.Literal, exp.Var, exp.Interval, exp.Extract, exp.TimestampTrunc, exp.DateTrunc,
              exp.Cast, exp.DataType)  # fmt: skip
_DAY_TYPES = {exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ}


def by_whole_days(expr: exp.Expr) -> bool:
    """Whether shifted key ``expr`` (of a timestamp column) moves it by whole days, months and
    years only, and reads it otherwise only through fields and truncations of a day or longer
    (Metabase's and Tableau's weeks of a timestamp), with no other function: then a row's key
    is the same at every time of a day where it is the same at the day's first and last
    microsecond (the moved time is increasing in the row's; the rest constant over a day)."""
    for n in expr.walk():
        if not isinstance(n, _DAY_NODES):
            return False
        if isinstance(n, exp.Interval):
            delta = interval_delta(n)
            if delta is None or delta[1] % timedelta(days=1):
                return False
        elif isinstance(n, exp.Extract):
            field = n.this.this if isinstance(n.this, exp.Var) else n.this.name
            if str(field).lower() not in _DAY_FIELDS:
                return False
        elif isinstance(n, (exp.TimestampTrunc, exp.DateTrunc)):
            unit = n.args.get("unit")
            text = str(unit.this).lower() if isinstance(unit, (exp.Var, exp.Literal)) else ""
            if text not in _DAY_UNITS or n.args.get("zone"):
                return False
        elif isinstance(n, exp.Cast) and (n.to.this not in _DAY_TYPES or n.to.expressions):
            return False
    return True

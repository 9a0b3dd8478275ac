"""Checks that keep row-level SQL total: no construct may raise depending on the data.

The rewrite (:mod:`dpsql.sql.rewrite.make_total`) makes arithmetic and numeric casts total. What it
can't repair is refused here, before anything reaches PostgreSQL:

* errors gated by data: a function that fails on a constant argument (``date_trunc('foo', ts)``,
  ``LIKE 'a\\'``, ``extract(hour FROM date)``) fails only when some row reaches it, so *whether* a
  row passes the rest of a filter leaks. Units, fields and patterns must be valid literals;
* casts that fail on some values (text to numbers or dates, numbers to booleans);
* literals PostgreSQL can't hold (numbers beyond 10^1000 or with over 200 characters);
* date/time arithmetic that could leave PostgreSQL's range when evaluated per row
  (``now() + INTERVAL '100 years' * 3000``, ``current_date + 2147483647``): intervals are not
  multiplied, days added to dates are small constants (:mod:`dpsql.sql.temporal`).

Immutable functions on constants are folded by PostgreSQL's planner before any row is read, so a
failing constant expression fails whatever the data (a data-independent error). Stable ones
(``now()``, ``current_date``, ``to_timestamp``, ``extract`` of a timestamptz) are not: they are
evaluated for each row that reaches them, so an expression over them must be total like one over
a column (numeric arithmetic: :mod:`dpsql.sql.rewrite.make_total`; dates: above).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from sqlglot import exp

from dpsql.errors import (
    InvalidParameter,
    NumericValueOutOfRange,
    UndefinedFunction,
    UnsupportedSql,
)
from dpsql.sql import functions as fn
from dpsql.sql.names import cast_sql, type_sql
from dpsql.sql.sources import PUBLIC_COLUMN
from dpsql.sql.temporal import (
    MAX_INTERVALS,
    ColumnOf,
    check_extract,
    check_interval,
    check_str_to_time,
    check_time_arithmetic,
    check_to_char,
    check_trunc,
    check_unix_to_time,
    check_year,
    int_literal,
    temporal_type,
    time_constants,
    value_kind,
)
from dpsql.sql.width_bucket import check_width_bucket
from dpsql.sql.wording import plain_sql

MAX_LITERAL_CHARS = 200
MAX_LITERAL = Decimal("1e1000")
NUMERIC_MAX_EXP = 131072  # PostgreSQL numeric: up to 131072 digits before the point

__all__ = [
    "MAX_INTERVALS",
    "check_cast",
    "check_literal",
    "check_total",
    "temporal_type",
    "time_constants",
]
_BOUND = (exp.Parameter, exp.Placeholder)  # replaced by literals (and checked again) when bound


def check_literal(n: exp.Literal) -> None:
    if n.is_string:
        return
    text = str(n.this)
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise UnsupportedSql(f"the number {text[:40]} is not valid") from None
    exponent = value.as_tuple().exponent  # an int for a finite number
    if isinstance(exponent, int) and (value.adjusted() >= NUMERIC_MAX_EXP or -exponent > 16383):
        # PostgreSQL's numeric holds < 1e131072 with at most 16383 digits after the point;
        # decided on the exponent (abs() of such a Decimal overflows its context: was XX000)
        raise NumericValueOutOfRange(
            "value overflows numeric format",
            hint="write a number below 1e131072 with at most 16383 digits after the point "
            "(private queries allow up to 1e1000)",
        )
    if len(text) > MAX_LITERAL_CHARS or not value.is_finite() or value.copy_abs() > MAX_LITERAL:
        raise InvalidParameter(
            f"the number {text[:40]}... is too large or too long for a private query",
            hint=f"numbers up to 1e1000 with at most {MAX_LITERAL_CHARS} characters are allowed",
        )


def _check_like(n: exp.Like | exp.ILike) -> None:
    pat = n.expression
    escape = like_escape(n)
    if escape is None:
        raise UnsupportedSql(
            "the ESCAPE of a LIKE in a private query must be a constant of at most one character",
            hint="e.g. col LIKE 'a!_%' ESCAPE '!'",
        )
    if isinstance(pat, _BOUND):
        return
    if not (isinstance(pat, exp.Literal) and pat.is_string):
        raise UnsupportedSql(
            "a LIKE pattern must be a string constant in private queries",
            hint="write the pattern as a literal, e.g. col LIKE 'abc%'",
        )
    text = str(pat.this)
    trailing = len(text) - len(text.rstrip(escape)) if escape else 0
    if trailing % 2 == 1:  # PostgreSQL raises it only when a row reaches the LIKE
        raise UnsupportedSql(
            "LIKE pattern must not end with escape character",
            hint=f"escape a final {escape} as {escape * 2}",
        )


def like_escape(n: exp.Like | exp.ILike) -> str | None:
    """The escape character of ``n`` (a backslash unless its ``ESCAPE`` names another; ''
    turns escaping off), None for an escape PostgreSQL would refuse (longer than one
    character) or one that is not a string constant."""
    parent = n.parent
    if not (isinstance(parent, exp.Escape) and parent.this is n):
        return "\\"
    esc = parent.expression
    if isinstance(esc, exp.Literal) and esc.is_string and len(str(esc.this)) <= 1:
        return str(esc.this)
    return None


def _check_substring(n: exp.Substring) -> None:
    for key in ("start", "length"):
        arg = n.args.get(key)
        if arg is None or isinstance(arg, _BOUND):
            continue
        v = int_literal(arg)
        if v is None or abs(v) > 2**31 - 1:
            raise UnsupportedSql(
                "substring positions and lengths must be integer constants in private queries",
                hint="e.g. substring(col, 1, 3); regular-expression substring is not supported",
            )
        if key == "length" and v < 0:
            raise UnsupportedSql("negative substring length not allowed")


def _check_round(n: exp.Round | exp.Trunc) -> None:
    d = n.args.get("decimals")
    if d is None or isinstance(d, _BOUND):
        return
    v = int_literal(d)
    if v is None or abs(v) > 1000:
        name = "ROUND" if isinstance(n, exp.Round) else "TRUNC"
        raise UnsupportedSql(
            f"{name}'s number of decimals must be an integer constant in private queries"
        )


_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.Neg, exp.Abs)


def _time_operand(arg: exp.Expr | None, column: ColumnOf) -> exp.Column | None:
    """The column in ``arg`` when ``arg`` is a date, time or interval value read from a row."""
    while isinstance(arg, exp.Paren):
        arg = arg.this
    if arg is None:
        return None
    col = arg if isinstance(arg, exp.Column) else arg.find(exp.Column)
    if col is None:
        return None
    if arg is col:
        return col if column(col).family in ("date", "timestamp") else None
    return col if value_kind(arg) == "time" else None


def _check_time_columns(n: exp.Expr, column: ColumnOf) -> None:
    """Date/time arithmetic with a column (``purchased_at::timestamp + INTERVAL '1 day'``,
    ``INTERVAL '1 day' * quantity``) is refused: the rewrite makes row-level arithmetic total in
    NUMERIC, and a timestamp cast to NUMERIC failed while PostgreSQL planned the statement
    (42000, in PostgreSQL's words). Moving the constant to the other side of the comparison
    asks the same question."""
    sides = (n.args.get("this"), n.args.get("expression"))
    cols = [_time_operand(x, column) for x in sides]
    col = next((c for c in cols if c is not None), None)
    if col is None and n.find(exp.Column) is not None:
        if "time" in (value_kind(x) for x in sides if x is not None):
            col = n.find(exp.Column)
    if col is None:
        return
    if column(col).family in ("date", "timestamp"):
        hint = (
            f"compare the column itself with a constant, e.g. WHERE {col.name} > now() - "
            "INTERVAL '1 day' instead of adding the interval to the column; group with "
            "date_trunc or extract"
        )
    else:
        hint = f"compare {col.name} with a number instead of multiplying an interval by it"
    raise UnsupportedSql(
        f"{plain_sql(n)}: date/time arithmetic on the column {col.name} is not supported in "
        "private queries",
        hint=hint,
    )


def _check_arithmetic(n: exp.Expr, column: ColumnOf) -> None:
    _check_time_columns(n, column)
    for key in ("this", "expression"):
        arg = n.args.get(key)
        while isinstance(arg, exp.Paren):
            arg = arg.this
        if isinstance(arg, exp.Column) and column(arg) is PUBLIC_COLUMN:
            raise UnsupportedSql(
                f"arithmetic on {arg.name}, a column of a public table, is not supported "
                "in private queries: the policy declares no type or bounds for a public table's "
                "columns",
                hint=f"group by it and count: SELECT {plain_sql(arg)}, COUNT(*) ... GROUP BY "
                f"{plain_sql(arg)}, then compute with the counts",
            )
        if isinstance(arg, exp.Column) and column(arg).family not in ("integer", "numeric"):
            raise UnsupportedSql(
                f"arithmetic on the {column(arg).family} column {arg.name} is not supported in "
                "private queries",
                hint="compare dates with constants, or group with date_trunc / extract",
            )


_FLOAT8 = frozenset({"float8", "double", "double precision", "float"})
_FLOAT4 = frozenset({"float4", "real"})
_CAST_NAMES = {
    exp.DataType.Type.DOUBLE: "double precision", exp.DataType.Type.FLOAT: "real",
    exp.DataType.Type.INT: "integer", exp.DataType.Type.BIGINT: "bigint",
    exp.DataType.Type.SMALLINT: "smallint", exp.DataType.Type.DECIMAL: "numeric",
}  # fmt: skip


def _type_name(x: exp.Expr, column: ColumnOf) -> str | None:
    """PostgreSQL's name of ``x``'s number type where it is plain from the statement (a column,
    a cast, a literal, arithmetic of floats), else None."""
    while isinstance(x, (exp.Paren, exp.Neg)):
        x = x.this
    if isinstance(x, exp.Column):
        t = column(x).type.lower()
        return "double precision" if t in _FLOAT8 else "real" if t in _FLOAT4 else None
    if isinstance(x, exp.Cast):
        return _CAST_NAMES.get(x.to.this)
    if isinstance(x, exp.Literal) and not x.is_string:
        text = str(x.this)
        if text.isdigit():
            return "integer" if int(text) < 2**31 else "bigint" if int(text) < 2**63 else "numeric"
        return "numeric"
    if isinstance(x, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        sides = {_type_name(x.this, column), _type_name(x.expression, column)}
        return next((f for f in ("double precision", "real") if f in sides), None)
    return None


def _check_float_modulo(n: exp.Mod | exp.IntDiv, column: ColumnOf) -> None:
    """``%``, ``mod()`` and ``div()`` have no float version in PostgreSQL: ``f % 2`` over a
    ``double precision`` (or ``real``) value fails while the statement is parsed, 42883
    ``operator does not exist: double precision % integer`` (was: computed in NUMERIC and
    answered)."""
    left, right = _type_name(n.this, column), _type_name(n.expression, column)
    if not {left, right} & {"double precision", "real"}:
        return
    names = f"{left or 'unknown'}, {right or 'unknown'}"
    if isinstance(n, exp.IntDiv):
        message = f"function div({names}) does not exist"
        hint = "No function matches the given name and argument types."
    else:
        message = f"operator does not exist: {left or 'unknown'} % {right or 'unknown'}"
        hint = "No operator matches the given name and argument types."
    raise UndefinedFunction(message, hint=hint + " You might need to add explicit type casts.")


def check_total(n: exp.Expr, column: ColumnOf) -> None:
    """Refuse ``n`` (one node of a row-level expression) when it could raise depending on data."""
    if isinstance(n, (*fn.COMPARISONS, *_TYPE_CHOICES, exp.Between, exp.In, exp.Nullif)):
        _check_public_conversion(n, column)
    if isinstance(n, _ARITHMETIC):
        if isinstance(n, (exp.Mod, exp.IntDiv)):
            _check_float_modulo(n, column)
        _check_arithmetic(n, column)
        if n.args.get("expression") is not None:
            check_time_arithmetic(n)
    if isinstance(n, exp.Literal):
        check_literal(n)
    elif isinstance(n, (exp.Like, exp.ILike)):
        _check_like(n)
    elif isinstance(n, exp.Escape) and not isinstance(n.this, (exp.Like, exp.ILike)):
        raise UnsupportedSql(
            f"{plain_sql(n)}: ESCAPE goes with LIKE or ILIKE in private queries",
            hint="e.g. col LIKE 'a!_%' ESCAPE '!'",
        )
    elif isinstance(n, exp.Substring):
        _check_substring(n)
    elif isinstance(n, (exp.TimestampTrunc, exp.DateTrunc)):
        check_trunc(n, column)
    elif isinstance(n, exp.Extract):
        check_extract(n, column)
    elif isinstance(n, (exp.Round, exp.Trunc)):
        _check_round(n)
    elif isinstance(n, exp.Interval):
        check_interval(n)
    elif isinstance(n, exp.WidthBucket):
        check_width_bucket(n, column)
    elif isinstance(n, exp.UnixToTime):
        check_unix_to_time(n)
    elif isinstance(n, (exp.StrToTime, exp.StrToDate)):
        if not isinstance(n.this, _BOUND):  # a parameter: checked once bound (a literal)
            check_str_to_time(n)
    elif isinstance(n, exp.TimeToStr):
        check_to_char(n, column)


# where PostgreSQL gives values one common type (a date beside a timestamp becomes a timestamp)
_TYPE_CHOICES = (exp.Case, exp.Coalesce, exp.Greatest, exp.Least)


def _converted(n: exp.Expr) -> list[exp.Expr]:
    """The operands of ``n`` PostgreSQL brings to one type (rows of values: position by
    position, flattened)."""
    if isinstance(n, exp.Between):
        values = [n.this, n.args["low"], n.args["high"]]
    elif isinstance(n, exp.In):
        values = [n.this, *n.expressions]
    elif isinstance(n, exp.Case):
        values = [i.args["true"] for i in n.args.get("ifs") or []]
        values += [n.args["default"]] if n.args.get("default") is not None else []
        if isinstance(n.this, exp.Expr):  # CASE x WHEN v: x = v for each WHEN
            values += [n.this, *(i.this for i in n.args.get("ifs") or [])]
    elif isinstance(n, (exp.Coalesce, exp.Greatest, exp.Least)):
        values = [n.this, *n.expressions]
    else:
        values = [x for x in (n.this, n.args.get("expression")) if isinstance(x, exp.Expr)]
    out: list[exp.Expr] = []
    for v in values:
        while isinstance(v, exp.Paren):
            v = v.this
        out.extend(v.expressions if isinstance(v, exp.Tuple) else [v])
    return out


def _check_public_conversion(n: exp.Expr, column: ColumnOf) -> None:
    """Refuse a public table's column that PostgreSQL would convert where the conversion can
    fail on some of its values (review24): beside a float (``r.n = 1.5::float8``, a NUMERIC
    beyond 1.8e308 fails: PostgreSQL has no NUMERIC-float comparison, it converts), or in a
    common-type choice beside a date/time value (``COALESCE(r.d, now())``: a date past 294276
    AD fails as a timestamp). The policy gives no type for a public table's columns, so dpsql
    can't bound the value first as it does a private column's
    (:mod:`dpsql.sql.rewrite.float_safe`, ``total_dates``). The public table's rows are
    public, but PostgreSQL evaluates such a condition in a join or an IN / EXISTS subquery
    only when a private row reaches it: whether the statement failed told whether some private
    row passed the rest of the filter (answered on one database, 22003 on its neighbour with one
    more person). ``x IN (SELECT r.c ...)`` of a float ``x`` converts the subquery's column the
    same way."""
    from dpsql.sql.rewrite.float_safe import maybe_float  # (the rewrite's reading of floats)

    def public(v: exp.Expr) -> bool:
        return isinstance(v, exp.Column) and column(v) is PUBLIC_COLUMN

    values = _converted(n)
    query = n.args.get("query") if isinstance(n, exp.In) else None
    shown = next((v for v in values if public(v)), None)
    others = [v for v in values if not public(v)]
    if query is not None and maybe_float(n.this, column):
        shown, others = n.this, [n.this]
    if shown is None:
        return
    timely = isinstance(n, _TYPE_CHOICES) and any(
        value_kind(v) == "time" or temporal_type(v, column) is not None for v in others
    )
    if not (timely or any(maybe_float(v, column) for v in others)):
        return
    what = "a date or time value" if timely else "a floating-point value"
    raise UnsupportedSql(
        f"{plain_sql(n)}: a public table's column beside {what} is not supported in private "
        "queries: PostgreSQL converts it, which fails for some of its values, and evaluates "
        "it only when a private row reaches it, so whether the statement failed would depend "
        "on the private rows",
        hint="compare the public column with a plain constant (r.n > 1.5, not 1.5::float8), "
        "or filter the public table with constants alone",
    )


def _texty(node: exp.Expr) -> bool:
    """Does ``node`` contain a text value that a numeric cast could fail on?"""
    for x in node.walk():
        if isinstance(x, exp.Literal) and x.is_string:
            return True
        if isinstance(x, exp.Cast) and x.to.this in fn.TEXT_TYPES:
            return True
        if isinstance(x, (exp.Lower, exp.Upper, exp.Concat, exp.DPipe, exp.Substring, exp.Trim)):
            return True
        if isinstance(x, exp.TimeToStr):
            return True
    return False


def check_cast(n: exp.Cast, column: ColumnOf) -> None:
    """Casts allowed over private rows: those that succeed for every value of their input."""
    to = n.to.this
    src = n.this
    sql = cast_sql(n)
    fails = UnsupportedSql(
        f"the cast {sql} can fail depending on the data and is not allowed",
        hint="compare as text, cast numeric columns only, or cast constants only",
    )
    if to in fn.TEXT_TYPES:
        return  # every value has a text form (varchar(n) truncates silently on explicit casts)
    if to in (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ):
        if isinstance(src, _BOUND):
            # a parameter is a constant: bound before anything reads a row, as a literal the
            # bound statement's analysis checks again (year range; parsed when planned)
            return
        if isinstance(src, exp.Literal) and src.is_string:
            check_year(str(src.this), sql)
            return  # parsed when the query is planned: fails (or not) whatever the data
        if temporal_type(src, column) is not None:
            # between date/timestamp types: a date or time a timestamp can't hold (a date column
            # past 294276 AD or near 4714 BC) is moved to +-infinity by the rewrite
            # (total_dates.within_timestamps), constants stay within years 1..9999 +- the bounded
            # intervals
            return
        raise fails
    numeric_target = (
        to in fn.INTEGER_TYPES or to in fn.NUMERIC_TYPES or to == exp.DataType.Type.FLOAT
    )
    if numeric_target or to == exp.DataType.Type.BOOLEAN:
        if isinstance(src, exp.Literal) and src.is_string:
            _check_numeric_text(src, to, sql)
            return
        families: tuple[str, ...] = (
            ("integer", "boolean") if to == exp.DataType.Type.BOOLEAN else ("integer", "numeric")
        )
        if to in fn.INTEGER_TYPES:
            families = ("integer", "numeric", "boolean")
        bad = [
            c
            for c in src.find_all(exp.Column)
            if column(c).family not in families and not _inside_numeric_function(c, src)
        ]
        if bad or _texty(src):
            raise fails
        if to == exp.DataType.Type.BOOLEAN and not isinstance(src, exp.Column):
            raise fails
        _check_typmod(n)
        return
    # newcomer27 #5: '1 mon'::interval; the form that is answered is the typed constant
    interval = (
        ", and for an interval the constant INTERVAL '1 month' (not '1 month'::interval)"
        if to == exp.DataType.Type.INTERVAL
        else ""
    )
    raise UnsupportedSql(
        f"casts to {type_sql(n.to)} are not allowed in private queries",
        hint="casts to numeric, integer, double precision, boolean, text, date and timestamp are "
        f"allowed{interval}",
    )


def _inside_numeric_function(node: exp.Expr, top: exp.Expr) -> bool:
    """True when ``node`` only feeds a function whose result is a number (extract, length)."""
    p = node.parent
    while p is not None and p is not top.parent:
        if isinstance(p, (exp.Extract, exp.Length)):
            return True
        p = p.parent
    return False


def _check_numeric_text(src: exp.Literal, to: exp.DType, sql: str) -> None:
    text = str(src.this).strip()
    ok = text.lower() in ("true", "false", "t", "f") if to == exp.DataType.Type.BOOLEAN else True
    if to != exp.DataType.Type.BOOLEAN:
        try:
            ok = not Decimal(text).is_snan() and len(text) <= MAX_LITERAL_CHARS
        except InvalidOperation:
            ok = False
    if not ok:
        raise InvalidParameter(f"invalid input for {sql}", hint="cast a valid constant")


def _check_typmod(n: exp.Cast) -> None:
    params = n.to.expressions
    if not params:
        return
    vals = [int_literal(p.this) for p in params]
    if n.to.this != exp.DataType.Type.DECIMAL or any(v is None for v in vals) or len(vals) > 2:
        raise UnsupportedSql(f"the type {type_sql(n.to)} is not supported here")
    p = vals[0] or 0
    s = vals[1] if len(vals) > 1 else 0
    if not (1 <= p <= 1000 and 0 <= (s or 0) <= p):
        raise UnsupportedSql(f"the type {type_sql(n.to)} is not supported here")

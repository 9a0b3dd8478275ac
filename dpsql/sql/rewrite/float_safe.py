"""NUMERIC values that meet a float kept where PostgreSQL's conversion to it can't overflow.

PostgreSQL compares a NUMERIC with a ``real`` or ``double precision`` value in ``double
precision`` (``amount * 1e305 > 1.5::float8``, ``BETWEEN``, ``NULLIF``, ``IS DISTINCT FROM``, a
simple ``CASE amount WHEN 1.5::float8``; ``sign()``, like ``abs()``, is a float of a float),
and gives ``CASE``, ``COALESCE``, ``GREATEST``, ``LEAST`` and an ``IN`` list the common type of
their values, ``real`` for a NUMERIC beside a ``real``: the NUMERIC is converted, and a value
beyond the float's range (1.8e308, 3.4e38) fails ("value out of range"), for that row only.
Row-level arithmetic is NUMERIC once made total (:mod:`dpsql.sql.rewrite.make_total`: up to
10^2000), so ``WHERE amount * 1e303 > 1.5::float8`` failed exactly when some row's amount was
above 179,769: a constant factor moves the threshold anywhere, and a binary search read one
person's value to any precision, one error at a time (charged, but the error itself is an exact
bit). Here such a NUMERIC operand (rewritten arithmetic, a cast to NUMERIC, a ``numeric``
column) of a comparison or a common-type choice that has a float operand is clamped into the
float's range first and rounded to the decimals it holds (strict: NULL stays NULL): +-1e300 and
300 decimals where the comparison is done in ``double precision``, +-1e38 and 37 decimals where
the common type may be ``real`` (as a cast to them is made total). Values within those ranges are
unchanged; the operation is PostgreSQL's own.

>>> import sqlglot
>>> safe = lambda s: float_safe(sqlglot.parse_one(s, read="postgres"), None).sql("postgres")
>>> safe("CAST(x AS DECIMAL) > CAST(1.5 AS DOUBLE PRECISION)")
'ROUND(NUMERIC_SMALLER(NUMERIC_LARGER(CAST(x AS DECIMAL), -1e300), 1e300), 300) > CAST(1.5 AS DOUBLE PRECISION)'
>>> safe("CAST(x AS DECIMAL) > 1.5")
'CAST(x AS DECIMAL) > 1.5'
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql.functions import COMPARISONS
from dpsql.sql.rewrite.literals import clamp_strict
from dpsql.sql.sensitivity import Columns, lookup

_FLOATS = {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT}
_FLOAT_COLUMNS = {"real", "float", "float4", "float8", "double", "double precision"}
_FLOAT_FUNCTIONS = {
    "random",
    "pi",
    "float8",
    "float4",
    "date_part",
    "float8larger",
    "float8smaller",
}
_OPERATORS = (*COMPARISONS, exp.Between, exp.Nullif)
_COMMON = (exp.Coalesce, exp.Greatest, exp.Least, exp.In, exp.Case)
_ARITHMETIC = (exp.Abs, exp.Neg, exp.Round, exp.Ceil, exp.Floor, exp.Trunc, exp.Sign, exp.Add, exp.Sub,
               exp.Mul, exp.Div, exp.Mod)  # fmt: skip
# as a cast to double precision / real is made total (dpsql.sql.rewrite.make_total.FLOAT_LIMITS):
# |x| <= 10^e, rounded to d decimals (a NUMERIC below the float's smallest fails too: 1e-400)
_DOUBLE = (300, 300)
_REAL = (38, 37)


def _strip(x: exp.Expr) -> exp.Expr:
    while isinstance(x, exp.Paren):
        x = x.this
    return x


def _values(n: exp.Expr) -> list[exp.Expr]:
    """The operands of ``n`` whose values PostgreSQL brings to one type."""
    if isinstance(n, exp.Between):
        return [n.this, n.args["low"], n.args["high"]]
    if isinstance(n, exp.In):
        return [n.this, *n.expressions] if n.expressions else []
    if isinstance(n, exp.Case):
        out = [i.args["true"] for i in n.args.get("ifs") or []]
        return out + ([n.args["default"]] if n.args.get("default") is not None else [])
    if isinstance(n, (exp.Coalesce, exp.Greatest, exp.Least)):
        return [n.this, *n.expressions]
    return [x for x in (n.this, n.args.get("expression")) if isinstance(x, exp.Expr)]


def maybe_float(x: exp.Expr, columns: Columns | None) -> bool:
    """``x`` may be ``real`` or ``double precision`` (a float column, a cast to one, a float
    function, or a choice among values one of which may be)."""
    x = _strip(x)
    if isinstance(x, (exp.Literal, exp.Null)):
        return False
    if isinstance(x, exp.Cast):
        return x.to.this in _FLOATS
    if isinstance(x, exp.Column):
        col = lookup(columns, x) if columns is not None else None
        return col is None or col.type.strip().lower() in _FLOAT_COLUMNS
    if isinstance(x, exp.Extract):
        return x.meta.get("dpsql_called") == "date_part"  # date_part is double precision
    if isinstance(x, exp.Anonymous):
        return str(x.name).lower() in _FLOAT_FUNCTIONS
    if isinstance(x, (*_COMMON, exp.Nullif)) and not isinstance(x, exp.In):
        return any(maybe_float(v, columns) for v in _values(x))
    if isinstance(x, _ARITHMETIC):
        return any(maybe_float(v, columns) for v in x.iter_expressions())
    return False


def _numeric(x: exp.Expr, columns: Columns | None) -> bool:
    """``x`` is a NUMERIC that may lie beyond a float's range: rewritten arithmetic, a cast to
    NUMERIC, a ``numeric`` column, or a choice among them (not an integer, not a float, not a
    literal: a constant beyond the range fails whatever the data, before any row is read)."""
    x = _strip(x)
    if isinstance(x, exp.Cast):
        return bool(x.to.this == exp.DataType.Type.DECIMAL)
    if isinstance(x, exp.Column):
        col = lookup(columns, x) if columns is not None else None
        return col is not None and col.type.strip().lower() in ("numeric", "decimal")
    if isinstance(x, exp.Anonymous):
        return str(x.name).lower() in ("numeric_smaller", "numeric_larger", "div", "trunc")
    if isinstance(x, (*_COMMON, exp.Nullif)) and not isinstance(x, exp.In):
        return not maybe_float(x, columns) and any(_numeric(v, columns) for v in _values(x))
    if isinstance(x, _ARITHMETIC):
        return not maybe_float(x, columns) and any(
            _numeric(v, columns) for v in x.iter_expressions()
        )
    return False


def float_safe(n: exp.Expr, columns: Columns | None) -> exp.Expr:
    """``n`` (in place) with each NUMERIC operand clamped into the range of the float it is
    converted to, when ``n`` compares it with (or chooses a common type with) a float. Rows of
    values (``(a, b) = (c, d)``, ``(a, b) IN ((c, d), ...)``) are compared position by position;
    ``x IN (SELECT ...)`` reads a column of unknown type: ``x`` is clamped as for a float."""
    if isinstance(n, exp.Case) and isinstance(n.this, exp.Expr):
        # CASE x WHEN v THEN ...: x = v for each WHEN, in double precision when one is a float
        # (CASE amount * 1e307 WHEN 1.5::float8 failed for amount > 18: review21)
        whens = [i.this for i in n.args.get("ifs") or [] if isinstance(i.this, exp.Expr)]
        _safe_values([n.this, *whens], _DOUBLE, columns)
    if not isinstance(n, (*_OPERATORS, *_COMMON)):
        return n
    if isinstance(n, exp.In) and n.args.get("query") is not None:
        if _numeric(n.this, columns):
            _clamp(n.this, _DOUBLE)
        return n
    values = _values(n)
    rows = [_strip(v) for v in values]
    if len(rows) > 1 and all(isinstance(r, exp.Tuple) for r in rows):
        width = len(rows[0].expressions)
        if all(len(r.expressions) == width for r in rows):
            for i in range(width):
                _safe_values([r.expressions[i] for r in rows], _DOUBLE, columns)
        return n
    _safe_values(values, _DOUBLE if isinstance(n, _OPERATORS) else _REAL, columns)
    return n


def _safe_values(values: list[exp.Expr], limit: tuple[int, int], columns: Columns | None) -> None:
    """Clamp the NUMERIC ones of ``values`` (brought to one type) when one may be a float."""
    if any(maybe_float(v, columns) for v in values):
        for v in values:
            if _numeric(v, columns):
                _clamp(v, limit)


def _clamp(v: exp.Expr, limit: tuple[int, int]) -> None:
    """Replace NUMERIC ``v`` by itself clamped into ±10^e, rounded to d decimals."""
    e, decimals = limit
    inner = _strip(v)
    typed = (
        v.copy()
        if isinstance(inner, (exp.Cast, exp.Anonymous))  # NUMERIC already (_numeric)
        else exp.Cast(this=v.copy(), to=exp.DataType.build("numeric"))
    )
    hi = exp.Literal.number(f"1e{e}")
    r = exp.Round(
        this=clamp_strict(typed, exp.Neg(this=hi), hi.copy()),
        decimals=exp.Literal.number(decimals),
    )
    r.type = exp.DataType.build("numeric")  # (the generator need not annotate it)
    v.replace(r)

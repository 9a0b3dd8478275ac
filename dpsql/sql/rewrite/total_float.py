"""Double precision arithmetic over private rows, computed in float8 as PostgreSQL computes it, and
total (:mod:`dpsql.sql.rewrite.make_total`).

``f + 0.1`` over a ``double precision`` column is float8 arithmetic in PostgreSQL
(``-2.4499999999999997`` for -2.55); computed in NUMERIC it was ``-2.45``. Float8 ``+ - * /``
raise for some values only: ``value out of range: overflow`` (a finite result past 1.8e308),
``underflow`` (a product or quotient of nonzero values that rounds to 0), ``division by zero``.
Each operand is made *safe* so that none can happen for any row:

* a float8 operand ``x`` read from a row (or computed) is snapped, ``(x + 2^-450) - 2^-450``:
  the same ``x`` when ``|x| >= 2^-396`` (2^-450 is below half its last bit), else a multiple of
  2^-503 (0 when ``|x| < 2^-504``), then clamped into [-1e150, 1e150] (``float8larger``/
  ``float8smaller``, strict: NULL stays NULL). Every safe value is 0 or of magnitude in
  [2^-503, 1e150] (2^-503 > 9.5e-152): a sum is below 2e150, a product in [9e-303, 1e300], a
  quotient in [9.5e-302, 1.1e301], all finite and normal (DBL_MIN is 2.2e-308, DBL_MAX
  1.8e308). Nothing is computed that could raise;
* a float8 column (also ``-x``, ``abs(x)`` of one) keeps ±Infinity, NaN and ±0 (``CASE WHEN x
  IN ('Infinity', '-Infinity', 'NaN', '0') THEN x ELSE safe(x) END``): float8 arithmetic on
  them never raises (``inf - inf`` is NaN, ``1 / inf`` 0: PostgreSQL's checks exempt infinite
  operands, and zero ones from underflow). A computed operand (the result of an inner
  operation) is made safe in one reference to it (a CASE would copy it, and nested arithmetic
  would double at each level), so an infinite one is clamped to ±1e150 and a negative zero
  reads 0;
* an integer operand is left as it is (PostgreSQL converts it exactly enough, no error: its
  magnitude is 0 or in [1, 9.3e18]); a plain number literal too when it is 0 or of magnitude in
  [1e-150, 1e150]; any other NUMERIC operand is clamped into [-1e150, 1e150] and rounded to 150
  decimals in NUMERIC, then cast (so its conversion can't overflow or underflow either);
* a divisor is ``NULLIF(divisor, 0)`` (division by zero gives NULL, as everywhere in dpsql).

So a value differs from PostgreSQL's only where a float8 operand is of magnitude above 1e150 or
below 2^-396 (about 1.6e-119), where an operand is infinite or NaN inside nested arithmetic, or
where a NUMERIC operand has more than 150 decimals: rows where PostgreSQL itself may fail.
``real`` (float4) arithmetic, ``%`` and ``div`` are computed in NUMERIC as before.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.rewrite.literals import clamp_strict
from dpsql.sql.sensitivity import Columns, lookup
from dpsql.sql.temporal import value_kind as kind

FLOAT8_NAMES = frozenset({"float8", "double", "double precision", "float"})
_DOUBLE = exp.DataType.build("double")
_LIMIT = "1e150"
_SNAP = "3.4395525670743494e-136"  # 2^-450, exactly (float8in reads it to 2^-450)
_SPECIAL = ("Infinity", "-Infinity", "NaN", "0")  # kept as they are (0 keeps its sign)


def _float8_column(col: Column | None) -> bool:
    return col is not None and col.type.lower() in FLOAT8_NAMES


def is_float8(node: exp.Expr, columns: Columns | None) -> bool:
    """True when PostgreSQL types ``node`` as ``double precision`` (False when unsure: the
    NUMERIC path stays total, only less faithful)."""
    while isinstance(node, (exp.Paren, exp.Neg, exp.Abs)):
        node = node.this
    if isinstance(node, exp.Column):
        return columns is not None and _float8_column(lookup(columns, node))
    if isinstance(node, exp.Cast):
        return bool(node.to.this == exp.DataType.Type.DOUBLE)
    if isinstance(node, (exp.Floor, exp.Ceil, exp.Sign)):
        return is_float8(node.this, columns)
    if isinstance(node, exp.Round):
        return node.args.get("decimals") is None and is_float8(node.this, columns)
    if isinstance(node, exp.Extract):
        return bool(node.meta.get("dpsql_called") == "date_part")  # dpsql.sql.faithful
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        if "time" in (kind(node.this), kind(node.expression)):
            return False
        return is_float8(node.this, columns) or is_float8(node.expression, columns)
    return False


def _lit(text: str) -> exp.Expr:
    return exp.Cast(this=exp.Literal.string(text), to=_DOUBLE.copy())


def _squash(x: exp.Expr) -> exp.Expr:
    """``x`` (float8) snapped and clamped: 0 or of magnitude in [2^-503, 1e150], one reference."""
    snapped = exp.Sub(
        this=exp.Paren(this=exp.Add(this=exp.Paren(this=x), expression=_lit(_SNAP))),
        expression=_lit(_SNAP),
    )
    larger = exp.Anonymous(this="float8larger", expressions=[snapped, _lit("-" + _LIMIT)])
    return exp.Anonymous(this="float8smaller", expressions=[larger, _lit(_LIMIT)])


def _column_leaf(x: exp.Expr) -> exp.Expr:
    """A float8 column (or its ``-x``, ``abs(x)``): ±Infinity, NaN and ±0 kept as they are (no
    float8 operation raises for them), any other value made safe."""
    special = exp.In(this=x.copy(), expressions=[exp.Literal.string(s) for s in _SPECIAL])
    return exp.Case(ifs=[exp.If(this=special, true=x.copy())], default=_squash(x))


def _from_numeric(x: exp.Expr) -> exp.Expr:
    """A NUMERIC operand as a safe float8: clamped into ±1e150, rounded to 150 decimals."""
    num = x if _is_numeric(x) else exp.Cast(this=x, to=exp.DataType.build("numeric"))
    big = exp.Literal.number(_LIMIT)
    clamped = clamp_strict(num, exp.Neg(this=big), big.copy())
    rounded = exp.Round(this=clamped, decimals=exp.Literal.number(150))
    return exp.Cast(this=rounded, to=_DOUBLE.copy())


def _is_numeric(x: exp.Expr) -> bool:
    return isinstance(x, exp.Cast) and x.to.this == exp.DataType.Type.DECIMAL


def _safe_literal(x: exp.Expr) -> bool:
    while isinstance(x, (exp.Neg, exp.Paren)):
        x = x.this
    if not isinstance(x, exp.Literal) or x.is_string:
        return False
    try:
        v = abs(float(str(x.this)))
    except ValueError:
        return False
    return v == 0 or 1e-150 <= v <= 1e150


def _plain(x: exp.Expr) -> bool:
    while isinstance(x, (exp.Neg, exp.Paren)):
        x = x.this
    return isinstance(x, exp.Literal) and not x.is_string


def safe_operand(x: exp.Expr, was_float: bool, was_int: bool, was_column: bool) -> exp.Expr:
    """Operand ``x`` (already made total) of a float8 operation, made safe (module docstring).
    The flags describe the operand as written: float8, integer, a float8 column."""
    if _plain(x):
        return x if _safe_literal(x) else _from_numeric(x)
    if was_int:
        return x
    if was_float:
        return _column_leaf(x) if was_column else _squash(x)
    return _from_numeric(x)


def float_operation(
    n: exp.Expr, flags: tuple[tuple[bool, bool, bool], tuple[bool, bool, bool]]
) -> exp.Expr:
    """``n`` (``+ - * /``, PostgreSQL's float8 arithmetic) with safe operands and a guarded
    divisor; ``flags``: (float8, integer, float8 column) of each operand as written."""
    left = safe_operand(n.this, *flags[0])
    right = safe_operand(n.expression, *flags[1])
    if isinstance(n, exp.Div):
        right = exp.Nullif(this=right, expression=exp.Literal.number(0))
    n.set("this", left)
    n.set("expression", right)
    return n

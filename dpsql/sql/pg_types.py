"""PostgreSQL's integer typing of the row-level expressions dpsql rewrites.

``/`` between two integers truncates toward zero in PostgreSQL (``7 / 2`` is 3), between
anything else it divides exactly (``7.0 / 2`` is 3.5). dpsql computes every operation over a row
in NUMERIC (:mod:`dpsql.sql.rewrite.make_total`) and clamps integer columns as NUMERIC
(:mod:`dpsql.sql.rewrite.clamp_values`), so the rewritten SQL keeps PostgreSQL's quotient only
if it is told which operands PostgreSQL types as integers: :func:`is_integer` reads the user's
expression, before any rewrite, with PostgreSQL's own rules (its type resolution for
``UNION``, ``CASE``, ``COALESCE``, ``GREATEST``, ``LEAST``, ``NULLIF`` and for operators):

* an integer column, a number literal without a point or exponent (below 2^63), a cast to an
  integer type, ``width_bucket(...)`` and ``length(...)`` are integers;
* ``-x``, ``abs(x)`` and ``x + - * / % y`` are integers when their operands are;
* ``COALESCE``, ``GREATEST``, ``LEAST``, ``NULLIF`` and ``CASE`` are integers when every argument
  (every result of a CASE) is an integer, a NULL or an untyped quoted constant such as ``'2'``
  (PostgreSQL types it as the other arguments: ``quantity / '2'`` truncates), and one is an
  integer; one numeric or float argument makes the whole numeric or float.

The same reading gives the value range of the aggregates' arguments
(:func:`dpsql.sql.sensitivity.value_range`): the range of an integer quotient is the range of
the integers PostgreSQL computes (``quantity / 3`` over [1, 10] is [0, 3], not [1/3, 10/3]).

>>> import sqlglot
>>> from dpsql.policy.tables import Column
>>> cols = {"q": Column(type="integer", bounds=[1, 10]), "x": Column(type="numeric")}
>>> [is_integer(sqlglot.parse_one(s, read="postgres"), cols) for s in
...  ("COALESCE(q, 0) / 2", "LEAST(q, 3)", "CASE WHEN x > 1 THEN q ELSE 0 END", "q / '2'",
...   "COALESCE(q, 0.5)", "NULLIF(q, x)", "width_bucket(x, 0, 5, 5)", "q::numeric / 2")]
[True, True, True, True, False, False, True, False]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.faithful import CALLED
from dpsql.sql.functions import INTEGER_TYPES

Columns = Mapping[str, Column] | Callable[[exp.Column], Column | None]


def lookup(columns: Columns, node: exp.Column) -> Column | None:
    """The policy column of a reference: by name in a mapping, or through a resolver (joins)."""
    if callable(columns):
        return columns(node)
    return columns.get(node.name)


def untyped_number(node: exp.Expr) -> Fraction | None:
    """The value of a quoted constant that PostgreSQL reads as a number beside one (``'2'`` in
    ``quantity / '2'``: its type is unknown until the other operand gives it one), else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not (isinstance(node, exp.Literal) and node.is_string):
        return None
    try:
        return Fraction(Decimal(str(node.this).strip()))
    except (InvalidOperation, ValueError):
        return None


def _untyped_integer(node: exp.Expr) -> bool:
    v = untyped_number(node)
    return v is not None and v.denominator == 1 and "." not in str(node.this)


def _untyped(node: exp.Expr) -> bool:
    """A NULL or a quoted constant: typed by the other arguments in PostgreSQL."""
    while isinstance(node, exp.Paren):
        node = node.this
    return isinstance(node, exp.Null) or (isinstance(node, exp.Literal) and node.is_string)


def _all_integer(parts: list[exp.Expr], columns: Columns | None) -> bool:
    """PostgreSQL's common type of ``parts`` (CASE, COALESCE, an operator's two sides) is an
    integer type: every typed part is an integer, every quoted one reads as an integer."""
    typed = [p for p in parts if not _untyped(p)]
    if not typed or not all(is_integer(p, columns) for p in typed):
        return False
    quoted = [p for p in parts if _untyped(p) and not isinstance(p.unnest(), exp.Null)]
    return all(_untyped_integer(p) for p in quoted)


def is_integer(node: exp.Expr, columns: Columns | None) -> bool:
    """True when PostgreSQL types ``node`` as an integer (so ``/`` truncates): see the module
    docstring. An expression read otherwise (a function it does not list) is not an integer."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal):
        return not node.is_string and str(node.this).isdigit() and int(node.this) < 2**63
    if isinstance(node, exp.Column):
        col = lookup(columns, node) if columns is not None else None
        return col is not None and col.family == "integer"
    if isinstance(node, exp.Cast):
        return node.to.this in INTEGER_TYPES
    if isinstance(node, (exp.Neg, exp.Abs)):
        return is_integer(node.this, columns)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
        return _all_integer([node.this, node.expression], columns)
    if isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):
        return _all_integer([node.this, *node.expressions], columns)
    if isinstance(node, exp.Nullif):  # NULLIF(1, 2.2) is numeric: the = operator's common type
        return _all_integer([node.this, node.expression], columns)
    if isinstance(node, exp.Case):
        results = [i.args["true"] for i in node.args.get("ifs") or []]
        default = node.args.get("default")
        return _all_integer([*results, *([default] if default is not None else [])], columns)
    if isinstance(node, exp.If):
        false = node.args.get("false")
        return _all_integer([node.args["true"], *([false] if false is not None else [])], columns)
    if isinstance(node, exp.Anonymous):  # our own DIV(a, b) of integers (TRUNC: older forms)
        return str(node.name).lower() in ("trunc", "div")
    return isinstance(node, (exp.Length, exp.WidthBucket))


_CAST_BITS = {
    exp.DataType.Type.TINYINT: 16,
    exp.DataType.Type.SMALLINT: 16,
    exp.DataType.Type.INT: 32,
    exp.DataType.Type.BIGINT: 64,
}


def integer_bits(node: exp.Expr, columns: Columns | None) -> int | None:
    """The width of the integer type PostgreSQL gives ``node`` (16, 32 or 64: smallint,
    integer, bigint), None when it is no integer (:func:`is_integer`): what SUM, MIN and MAX
    of it return (SUM of a smallint or integer is bigint, of a bigint numeric). A column's width
    is its declared type's; a number literal is an integer below 2^31, else a bigint; an
    operator, COALESCE, GREATEST, LEAST, NULLIF and CASE take their typed parts' widest (their
    common type); width_bucket and length are integers.

    >>> import sqlglot
    >>> from dpsql.policy.tables import Column
    >>> cols = {"q": Column(type="integer", bounds=[1, 10]), "b": Column(type="bigint")}
    >>> [integer_bits(sqlglot.parse_one(s, read="postgres"), cols) for s in
    ...  ("q / 3", "q::int8 / 2", "COALESCE(q, b)", "q::smallint", "q / 2.0", "3000000000 * q")]
    [32, 64, 64, 16, None, 64]
    """
    if not is_integer(node, columns):
        return None
    return _bits(node, columns)


def _bits(node: exp.Expr, columns: Columns | None) -> int:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal):
        return 32 if not node.is_string and int(node.this) < 2**31 else 64
    if isinstance(node, exp.Column):
        col = lookup(columns, node) if columns is not None else None
        return (col.integer_bits or 32) if col is not None else 32
    if isinstance(node, exp.Cast):
        return _CAST_BITS.get(node.to.this, 64)
    if isinstance(node, (exp.Neg, exp.Abs)):
        return _bits(node.this, columns)
    parts: list[exp.Expr] = []
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Nullif)):
        parts = [node.this, node.expression]
    elif isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):
        parts = [node.this, *node.expressions]
    elif isinstance(node, exp.Case):
        parts = [i.args["true"] for i in node.args.get("ifs") or []]
        parts += [node.args["default"]] if node.args.get("default") is not None else []
    elif isinstance(node, exp.If):
        parts = [node.args["true"], *([node.args["false"]] if node.args.get("false") else [])]
    elif isinstance(node, (exp.Length, exp.WidthBucket)):
        return 32
    else:  # our own DIV / TRUNC forms
        return 64
    typed = [_bits(p, columns) for p in parts if not _untyped(p)]
    return max(typed, default=32)


_FLOAT_COLUMNS = {"real": 32, "float4": 32, "float": 64, "float8": 64, "double": 64}
_FLOAT_CASTS = {exp.DataType.Type.FLOAT: 32, exp.DataType.Type.DOUBLE: 64}


def float_bits(node: exp.Expr, columns: Columns | None) -> int | None:
    """The width of the floating-point type PostgreSQL gives ``node`` (32: real, 64: double
    precision), None when it is no float or not read here: a real or double column, a cast to
    one, -x and abs(x) of one, an operator with a float part (real with real stays real, real
    with anything else is double precision, as real * integer is), COALESCE / GREATEST / LEAST /
    NULLIF / CASE (their common type: double precision if one part is, else real if one is). SUM, MIN and MAX of a real are real; of a
    double, double precision (PostgreSQL 15's pg_typeof).

    >>> import sqlglot
    >>> from dpsql.policy.tables import Column
    >>> cols = {"r": Column(type="real", bounds=[0, 1]), "q": Column(type="integer")}
    >>> [float_bits(sqlglot.parse_one(s, read="postgres"), cols) for s in
    ...  ("r", "q::float8", "q::real", "r * 2", "r + r", "-r", "q / 2", "COALESCE(r, 0)")]
    [32, 64, 32, 64, 32, 32, None, 32]
    """
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        col = lookup(columns, node) if columns is not None else None
        return _FLOAT_COLUMNS.get(col.type.lower().split(" ")[0]) if col is not None else None
    if isinstance(node, exp.Cast):
        return _FLOAT_CASTS.get(node.to.this)
    if isinstance(node, (exp.Neg, exp.Abs)):
        return float_bits(node.this, columns)
    if isinstance(node, exp.Extract):  # date_part is double precision, EXTRACT numeric
        return 64 if node.meta.get(CALLED) == "date_part" else None
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        sides = [float_bits(p, columns) for p in (node.this, node.expression)]
        if not any(sides):
            return None
        return 32 if all(b == 32 for b in sides) else 64
    parts: list[exp.Expr] = []
    if isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):
        parts = [node.this, *node.expressions]
    elif isinstance(node, exp.Nullif):
        parts = [node.this]
    elif isinstance(node, exp.Case):
        parts = [i.args["true"] for i in node.args.get("ifs") or []]
        parts += [node.args["default"]] if node.args.get("default") is not None else []
    # the common type: double precision is the numbers' preferred type, real the next
    return max((b for p in parts if (b := float_bits(p, columns))), default=None)

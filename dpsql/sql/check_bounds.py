"""Whether a table's validated CHECK constraints prove a column's values lie in its declared bounds.

When they do, clamping the column into ``[lo, hi]`` changes no value, and the rewrite emits
``CAST(col AS NUMERIC)`` instead of ``NUMERIC_SMALLER(NUMERIC_LARGER(CAST(col AS NUMERIC),
lo), hi)`` (:func:`dpsql.sql.rewrite.clamp_values.clamp_values`): the same value on every row,
two NUMERIC comparisons a row cheaper. The catalog is read by :mod:`dpsql.execute.checked_bounds`
(which relations, which constraints, the column's type); this module only decides, from those
texts, and is pure.

The proof, for one relation (each relation a query reads must prove it on its own rows: an
inheritance child's, a partition's):

* A row passes a CHECK when its expression is TRUE or NULL. An ``AND`` is FALSE as soon as one
  operand is FALSE (``FALSE AND NULL`` is FALSE), so every conjunct of a passing CHECK is TRUE or
  NULL; a comparison of the column with a constant is NULL only when the column is NULL. So for
  a non-NULL value, every conjunct ``col OP constant`` of every validated CHECK holds. Anything
  else (``OR``, ``IN``, functions, other columns) is skipped: it proves nothing, and skipping a
  conjunct of an ``AND`` never makes the rest wrong. NULL passes a CHECK, and the clamp keeps
  NULL as NULL: the emitted value is NULL either way (``COUNT(col)``, ``SUM`` unchanged).
* The comparison must compare real values exactly: the constant's casts are exact (an integer
  into an integer type, any number into NUMERIC without a type modifier, a number a float type
  holds exactly into it), and the column is bare or widened exactly (an integer into NUMERIC, a
  wider integer type, or float8 when it is int2/int4; real into float8). ``(k)::integer <= 3``
  on a NUMERIC column rounds, ``x <= (0.1)::double precision`` compares with the double nearest
  0.1: neither proves anything.
* Both bounds are needed. NaN is greater than every number in PostgreSQL (float and NUMERIC), so
  ``x >= 0`` alone admits NaN and ``+Infinity``; ``x <= 10`` rejects both, ``x >= 0`` rejects
  ``-Infinity``: with both, the value is a finite number in [lo, hi].
* The rewrite's value is ``CAST(col AS NUMERIC)``: exact for integers and NUMERIC; a float8
  becomes its 15-significant-digit decimal (a real: 6 digits), which is monotone in the value,
  so a bound with at most that many significant digits stays a bound of the cast value.

The proven range must lie inside the declared ``[lo, hi]``; the rewrite skips only a clamp into
exactly the declared range (not a narrower ``clamp: auto`` choice).
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import sqlglot
from sqlglot import exp

from dpsql.sql.analysis import Analysis

Type = exp.DataType.Type

INTEGER_TYPES = {"int2": 16, "int4": 32, "int8": 64}
FLOAT_DIGITS = {"float8": 15, "float4": 6}  # significant digits of their cast to NUMERIC
PROVABLE_TYPES = frozenset({*INTEGER_TYPES, "numeric", *FLOAT_DIGITS})

# sqlglot's type of a cast target -> the PostgreSQL type it names
_CAST_TYPES = {
    Type.SMALLINT: "int2",
    Type.INT: "int4",
    Type.BIGINT: "int8",
    Type.DECIMAL: "numeric",
    Type.FLOAT: "float4",
    Type.DOUBLE: "float8",
}
# exact widenings of a column's value that a comparison may show: (from, to)
_WIDENINGS = frozenset(
    {
        ("int2", "int4"),
        ("int2", "int8"),
        ("int4", "int8"),
        ("int2", "numeric"),
        ("int4", "numeric"),
        ("int8", "numeric"),
        ("int2", "float8"),
        ("int4", "float8"),
        ("int2", "float4"),
        ("float4", "float8"),
    }
)
_CHECK = re.compile(r"^CHECK \((?P<expr>.*)\)(?P<noinherit> NO INHERIT)?$", re.DOTALL)

Range = tuple[Fraction | None, Fraction | None]


def candidates(a: Analysis) -> tuple[str, ...]:
    """The columns of ``a``'s table whose values the rewrite clamps into their declared bounds:
    bounded, not temporal, read by a measure; () for a query the proof does not cover (a join,
    grouping sets, a per-unit derived table)."""
    if a.joins or len(a.sources) > 1 or a.grouping_sets or a.one_row_per_unit:
        return ()
    out: dict[str, None] = {}
    for m in a.measures:
        if m.arg is None:
            continue
        for c in m.arg.find_all(exp.Column):
            if c.table and c.table != a.alias:
                continue
            col = a.private.columns.get(c.name)
            if col is not None and col.bounds is not None and not col.temporal:
                out.setdefault(c.name, None)
    return tuple(sorted(out))


def proven(
    columns: Sequence[str],
    declared: Mapping[str, tuple[Fraction, Fraction]],
    types: Mapping[str, str],
    relations: Sequence[tuple[str, Sequence[str]]],
) -> tuple[str, ...]:
    """The ``columns`` whose values the catalog proves lie in their ``declared`` bounds.

    ``types``: each column's type (``pg_type.typname``) in the queried table; ``relations``:
    every relation the query reads (the table and its inheritance descendants), each as its
    ``relkind`` and the ``pg_get_constraintdef`` texts of its validated CHECK constraints. A
    partitioned table (``p``) holds no rows of its own; any relation but a plain table
    (``r``) or a partitioned one (a foreign table, whose constraints are not enforced) proves
    nothing. No relations (the table is gone): nothing is proven."""
    if not relations or any(kind not in ("r", "p") for kind, _ in relations):
        return ()
    out = []
    for c in columns:
        t = types.get(c)
        if t not in PROVABLE_TYPES or c not in declared:
            continue
        lo, hi = declared[c]
        if all(
            _inside(column_range(defs, c, t), lo, hi, t) for kind, defs in relations if kind == "r"
        ):
            out.append(c)
    return tuple(out)


def _inside(r: Range, lo: Fraction, hi: Fraction, typ: str) -> bool:
    low, high = r
    if low is None or high is None or low < lo or high > hi:
        return False
    digits = FLOAT_DIGITS.get(typ)
    return digits is None or (_digits(low) <= digits and _digits(high) <= digits)


def _digits(x: Fraction) -> int:
    """Significant decimal digits of ``x`` (a large number for one with no short decimal).

    >>> [_digits(Fraction(v)) for v in ("0", "500000", "10.5", "-0.001", "1/3")]
    [1, 1, 3, 1, 1000]
    """
    for k in range(400):
        m = x * 10**k
        if m.denominator == 1:
            return len(str(abs(m.numerator)).rstrip("0")) or 1
    return 1000


def column_range(defs: Sequence[str], column: str, typ: str) -> Range:
    """The tightest [low, high] that the CHECK constraints ``defs`` prove for the non-NULL values
    of ``column`` (of PostgreSQL type ``typ``); None for a side they do not bound."""
    low: Fraction | None = None
    high: Fraction | None = None
    for d in defs:
        for op, value in _bounds(d, column, typ):
            if op in (">=", ">", "=") and (low is None or value > low):
                low = value
            if op in ("<=", "<", "=") and (high is None or value < high):
                high = value
    return low, high


@functools.lru_cache(maxsize=4096)
def _bounds(definition: str, column: str, typ: str) -> tuple[tuple[str, Fraction], ...]:
    """The conjuncts ``column OP constant`` of one CHECK definition, as (OP, constant) with the
    column on the left; () when the definition is not a plain CHECK."""
    m = _CHECK.match(definition.strip())
    if m is None:
        return ()
    try:
        tree = sqlglot.parse_one(m.group("expr"), read="postgres")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return ()
    out = []
    for part in _conjuncts(tree):
        got = _comparison(part, column, typ)
        if got is not None:
            out.append(got)
    return tuple(out)


def _unparen(e: exp.Expr) -> exp.Expr:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _conjuncts(e: exp.Expr) -> list[exp.Expr]:
    e = _unparen(e)
    if isinstance(e, exp.And):
        return [*_conjuncts(e.this), *_conjuncts(e.expression)]
    return [e]


_OPS: dict[type[exp.Expr], tuple[str, str]] = {
    exp.GTE: (">=", "<="),
    exp.GT: (">", "<"),
    exp.LTE: ("<=", ">="),
    exp.LT: ("<", ">"),
    exp.EQ: ("=", "="),
}


def _comparison(e: exp.Expr, column: str, typ: str) -> tuple[str, Fraction] | None:
    ops = _OPS.get(type(e))
    if ops is None:
        return None
    left, right = _unparen(e.this), _unparen(e.expression)
    if _is_column(left, column, typ):
        value, op = _constant(right), ops[0]
    elif _is_column(right, column, typ):
        value, op = _constant(left), ops[1]
    else:
        return None
    return None if value is None else (op, value)


def _is_column(e: exp.Expr, column: str, typ: str) -> bool:
    """``e`` is ``column`` itself, or widened exactly (:data:`_WIDENINGS`, possibly twice)."""
    e = _unparen(e)
    if isinstance(e, exp.Column):
        return not e.table and e.name == column
    if isinstance(e, exp.Cast) and not e.to.expressions:
        to = _CAST_TYPES.get(e.to.this)
        inner = _unparen(e.this)
        if to is None:
            return False
        if isinstance(inner, exp.Column):
            return (typ, to) in _WIDENINGS and _is_column(inner, column, typ)
        if isinstance(inner, exp.Cast) and not inner.to.expressions:
            mid = _CAST_TYPES.get(inner.to.this)
            return mid is not None and (mid, to) in _WIDENINGS and _is_column(inner, column, typ)
    return False


def _constant(e: exp.Expr) -> Fraction | None:
    """The exact value of a numeric constant with exact casts only (None otherwise)."""
    e = _unparen(e)
    if isinstance(e, exp.Neg):
        v = _constant(e.this)
        return None if v is None else -v
    if isinstance(e, exp.Literal):
        return _number(str(e.this))
    if isinstance(e, exp.Cast) and not e.to.expressions:
        to = _CAST_TYPES.get(e.to.this)
        v = _constant(e.this)
        if to is None or v is None:
            return None
        if to in INTEGER_TYPES:
            bits = INTEGER_TYPES[to]
            ok = v.denominator == 1 and -(2 ** (bits - 1)) <= v < 2 ** (bits - 1)
            return v if ok else None
        if to == "float8":
            return v if _float_exact(v, "d") else None
        if to == "float4":
            return v if _float_exact(v, "f") else None
        return v  # numeric, no type modifier: exact
    return None


def _number(text: str) -> Fraction | None:
    text = text.strip()
    try:
        d = Decimal(text)
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    return Fraction(d)


def _float_exact(v: Fraction, fmt: str) -> bool:
    try:
        f = struct.unpack(fmt, struct.pack(fmt, float(v)))[0]
    except (OverflowError, struct.error):
        return False
    return Fraction(f) == v

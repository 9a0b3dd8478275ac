"""Numeric bins as GROUP BY keys: the arithmetic of a derived key over a bounded number column, as
PostgreSQL computes and prints it (:mod:`dpsql.sql.derived_keys`).

Metabase's numeric binning of ``cost`` (bounds [0, 5000]) groups by
``((floor(((cost - 0.0) / 500.0)) * 500.0) + 0.0)``: the bins 0.0, 500.0, ..., 5000.0 follow from
the bounds, as ``date_trunc``'s months follow from a date's (newcomer22 #32: was partition
selection, the sparse upper bins silently dropped). Read here:

* a bounded ``numeric`` or integer column, plus, minus, times or divided by a number literal, when
  the result is ``numeric`` (an integer column with a decimal literal, or a numeric column): a
  range whose ends move with the literal. A division's ends must be exact quotients with at most
  :data:`MAX_DIGITS` significant digits: PostgreSQL rounds a quotient to at least 16 of them, so
  then every value between the ends rounds to a quotient between them too (rounding keeps order)
  and ``floor`` of it lies between ``floor`` of the ends;
* a whole-number key (``floor`` of such a range: ``numeric`` of scale 0) plus, minus or times a
  number literal: ``numeric`` whose scale is PostgreSQL's (the larger of the two for ``+``/``-``,
  their sum for ``*``), printed so (``1000.0``).

Not read (left to partition selection, as before): ``double precision`` anywhere (a float column,
a cast to one, ``floor`` of an integer, ``date_part``), an integer divided by an integer (integer
division), a quotient PostgreSQL may round. Values outside the column's bounds fall outside the
bins and are left out upstream, as for ``ROUND(cost, -3)`` (the key domain's filter).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Literal

from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.key_literals import literal_text
from dpsql.sql.key_values import Domain, NumRange, TooMany, ceil_int, floor_int, sorted_values

MAX_DIGITS = 15
NumType = Literal["int", "numeric"]
_FLOAT_TYPES = {"real", "float", "float4", "float8", "double", "double precision"}
_INTS = {exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT}


def number_literal(node: exp.Expr) -> tuple[Fraction, int, NumType] | None:
    """A number literal's value, scale (digits after the point) and type (``1``: int,
    ``500.0``: numeric of scale 1); None for anything else."""
    got = literal_text(node)
    if got is None:
        return _exponent_literal(node)
    if got[0] != "number" or got[1] is None:
        return None
    text = got[1]
    scale = len(text.split(".")[1]) if "." in text else 0
    return Fraction(Decimal(text)), scale, "numeric" if "." in text else "int"


_EXPONENT = re.compile(r"(\d+(?:\.(\d*))?|\.(\d+))[eE]([+-]?\d{1,3})")


def _exponent_literal(node: exp.Expr) -> tuple[Fraction, int, NumType] | None:
    """A literal with an exponent (Grafana prints an interval of 30 days as ``2.592e+06``):
    ``numeric``, of PostgreSQL's scale (the mantissa's decimals less the exponent, at least 0).

    >>> _exponent_literal(exp.Literal.number("2.592e+06"))
    (Fraction(2592000, 1), 0, 'numeric')
    >>> _exponent_literal(exp.Neg(this=exp.Literal.number("1.5e-3")))
    (Fraction(-3, 2000), 4, 'numeric')
    """
    neg = isinstance(node, exp.Neg)
    lit = node.this if neg else node
    if not isinstance(lit, exp.Literal) or lit.is_string:
        return None
    m = _EXPONENT.fullmatch(str(lit.this))
    if m is None:
        return None
    decimals = len(m.group(2) or m.group(3) or "")
    value = Fraction(Decimal(str(lit.this)))
    return (-value if neg else value), max(0, decimals - int(m.group(4))), "numeric"


def num_type(node: exp.Expr, column: Callable[[exp.Column], Column | None]) -> NumType | None:
    """PostgreSQL's type of a number expression when it is ``integer`` or ``numeric`` for
    certain; None for ``double precision`` or anything not modelled."""
    while isinstance(node, (exp.Paren, exp.Neg)):
        node = node.this
    if isinstance(node, exp.Column):
        col = column(node)
        if col is None or col.identifier:
            return None
        if col.family == "integer":
            return "int"
        return "numeric" if col.family == "numeric" and col.type not in _FLOAT_TYPES else None
    lit = number_literal(node)
    if lit is not None:
        return lit[2]
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        a, b = num_type(node.this, column), num_type(node.expression, column)
        if a is None or b is None:
            return None
        return "int" if a == b == "int" else "numeric"
    if isinstance(node, (exp.Floor, exp.Ceil)) and not node.args.get("decimals"):
        # floor(numeric) is numeric; floor(integer) resolves to floor(double precision)
        return "numeric" if num_type(node.this, column) == "numeric" else None
    if isinstance(node, exp.Extract) and node.meta.get("dpsql_called") != "date_part":
        return "numeric"  # EXTRACT is numeric since PostgreSQL 14 (date_part double precision)
    if isinstance(node, exp.Cast) and not node.to.expressions:
        if node.to.this in _INTS:
            return "int"
        return "numeric" if node.to.this == exp.DataType.Type.DECIMAL else None
    return None


def bounded_range(node: exp.Expr, column: Callable[[exp.Column], Column | None]) -> NumRange | None:
    """A bounded integer or numeric column's range (an integer column's whole numbers)."""
    while isinstance(node, exp.Paren):
        node = node.this
    col = column(node) if isinstance(node, exp.Column) else None
    if col is None or col.bounds is None or col.identifier or col.keys is not None:
        return None
    if col.family == "integer":
        return NumRange(Fraction(ceil_int(col.lo)), Fraction(floor_int(col.hi)), False, node.name)
    if col.family == "numeric" and col.type not in _FLOAT_TYPES:
        return NumRange(col.lo, col.hi, False, node.name)
    return None


def range_arith(op: type[exp.Expr], r: NumRange, c: Fraction, on_left: bool) -> NumRange | None:
    """``r op c`` (``c op r`` unless ``on_left``) over the range, for a numeric result."""
    if op is exp.Add:
        ends = (r.lo + c, r.hi + c)
    elif op is exp.Sub:
        ends = (r.lo - c, r.hi - c) if on_left else (c - r.hi, c - r.lo)
    elif op is exp.Mul:
        ends = (r.lo * c, r.hi * c)
    elif op is exp.Div and on_left and c != 0:
        ends = (r.lo / c, r.hi / c)
        if not all(_exact(q) for q in ends):
            return None
    else:
        return None
    return NumRange(min(ends), max(ends), False, r.name)


def _exact(q: Fraction) -> bool:
    """``q`` is a decimal of at most :data:`MAX_DIGITS` significant digits (PostgreSQL's
    numeric division gives it exactly)."""
    d = q.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return False
    with localcontext() as ctx:
        ctx.prec = 60
        value = Decimal(q.numerator) / Decimal(q.denominator)
    return len(value.normalize().as_tuple().digits) <= MAX_DIGITS


def domain_arith(op: type[exp.Expr], d: Domain, c: Fraction, scale: int) -> Domain | None:
    """A whole-number ``numeric`` key ``d`` (scale 0, or ``num`` with its scale) plus, minus
    (key first) or times a number literal of ``scale``: ``numeric`` of PostgreSQL's scale."""
    if d.kind not in ("int", "num") or op not in (exp.Add, exp.Sub, exp.Mul):
        return None
    vals = [v if isinstance(v, Fraction) else Fraction(int(v)) for v in d.values]  # type: ignore[call-overload]
    if op is exp.Add:
        out, s = {v + c for v in vals}, max(d.scale, scale)
    elif op is exp.Sub:
        out, s = {v - c for v in vals}, max(d.scale, scale)
    else:
        out, s = {v * c for v in vals}, d.scale + scale
    return Domain("num", sorted_values(out), d.null, scale=s)


BARE_INTEGERS_MAX = 1_000
"""A bare bounded integer column in GROUP BY (``quantity``, bounds [1, 10]) releases every whole
number of its bounds, each with noise, when they are at most this many (a BI tool's bar per
quantity, none left out by partition selection); with more (``income``-like ranges) its groups
are selected from the data, as before, and the notice says why."""


def bare_integers(col: Column, name: str) -> bool:
    """Whether GROUP BY ``name`` (a bare integer column, declared ``col``) takes its keys from
    its bounds: an integer column with both bounds, no keys, not an identifier.

    Raises:
        TooMany: more than :data:`BARE_INTEGERS_MAX` whole numbers (the words say so).
    """
    if col.family != "integer" or col.bounds is None or col.keys is not None:
        return False
    if col.keys_from or col.identifier:
        return False
    n = floor_int(col.hi) - ceil_int(col.lo) + 1
    if n > BARE_INTEGERS_MAX:
        raise TooMany(
            f"the bounds of {name} allow {n:,} whole numbers, above the limit of "
            f"{BARE_INTEGERS_MAX:,} for a column grouped by as it is"
        )
    return True

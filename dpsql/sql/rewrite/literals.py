"""Exact SQL literals for rational numbers."""

from __future__ import annotations

from decimal import Context, Decimal
from fractions import Fraction

from sqlglot import exp

from dpsql.sql.nodes import cast

_CTX = Context(prec=80)


def number(value: Fraction | int) -> exp.Expr:
    """A numeric literal equal to ``value`` (exact for the dyadic fractions bounds produce).

    >>> number(Fraction(5, 2)).sql()
    '2.5'
    """
    text = number_text(value)
    lit = exp.Literal.number(text.lstrip("-"))
    return exp.Neg(this=lit) if text.startswith("-") else lit


def number_text(value: Fraction | int) -> str:
    """``value`` as exact decimal text (as :func:`number` writes it).

    >>> number_text(Fraction(-3, 4))
    '-0.75'
    """
    f = Fraction(value)
    d = _CTX.divide(Decimal(f.numerator), Decimal(f.denominator))
    return format(d.normalize(_CTX), "f")


def numeric(value: Fraction | int) -> exp.Expr:
    """``CAST(<value> AS NUMERIC)``, so arithmetic stays exact and typed."""
    n = number(value)
    return cast(exp.Paren(this=n) if isinstance(n, exp.Neg) else n, "numeric")


def clamp_strict(node: exp.Expr, lo: exp.Expr, hi: exp.Expr) -> exp.Expr:
    """``node`` clamped into [lo, hi] in NUMERIC, NULL staying NULL.

    ``LEAST``/``GREATEST`` ignore NULL arguments (``GREATEST(NULL, 0)`` is 0), which would turn a
    missing value into a bound; ``numeric_larger``/``numeric_smaller`` (the functions behind
    max/min of numeric) are strict: NULL in, NULL out. NaN compares above every number, so it
    becomes ``hi``, as with ``LEAST(GREATEST(...))``. ``node`` must be typed NUMERIC.

    >>> clamp_strict(exp.column("x"), number(0), number(9)).sql("postgres")
    'NUMERIC_SMALLER(NUMERIC_LARGER(x, 0), 9)'
    """
    larger = exp.Anonymous(this="numeric_larger", expressions=[node, lo])
    return exp.Anonymous(this="numeric_smaller", expressions=[larger, hi])

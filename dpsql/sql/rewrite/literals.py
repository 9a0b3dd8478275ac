"""Exact SQL literals for rational numbers."""

from __future__ import annotations

from decimal import Context, Decimal
from fractions import Fraction

from sqlglot import exp

_CTX = Context(prec=80)


def number(value: Fraction | int) -> exp.Expression:
    """A numeric literal equal to ``value`` (exact for the dyadic fractions bounds produce).

    >>> number(Fraction(5, 2)).sql()
    '2.5'
    """
    f = Fraction(value)
    d = _CTX.divide(Decimal(f.numerator), Decimal(f.denominator))
    text = format(d.normalize(_CTX), "f")
    lit = exp.Literal.number(text.lstrip("-"))
    return exp.Neg(this=lit) if text.startswith("-") else lit


def numeric(value: Fraction | int) -> exp.Expression:
    """``CAST(<value> AS NUMERIC)``, so arithmetic stays exact and typed."""
    n = number(value)
    return exp.cast(exp.Paren(this=n) if isinstance(n, exp.Neg) else n, "numeric")

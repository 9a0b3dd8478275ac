"""Showing exact budget amounts: what is spent or needed rounded up, what remains rounded down,
to 4 significant digits (newcomer25 #12: "epsilon 0.00489375 left" read as noise). A refusal
never reads as a lie: the amount left shown is at most the true one, the amount needed at least.

>>> fmt_up(Fraction(1, 3)), fmt_down(Fraction(1, 3)), fmt_up(Fraction(1, 10**6)), fmt_up(0)
('0.3334', '0.3333', '0.000001', '0')
>>> fmt_down(Fraction(489375, 10**8)), fmt_up(Fraction(170952, 10**6)), fmt_down(100)
('0.004893', '0.171', '100')
>>> fmt_down(Fraction(1, 10**12))
'1e-12'
>>> dec_up(Fraction(2, 3))
Decimal('0.666666666667')
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

_PLACES = Decimal(1).scaleb(-12)
_ONE = Decimal(1)


def _fmt(x: Fraction | int, rounding: str) -> str:
    x = Fraction(x)
    if x == 0:
        return "0"
    ctx = decimal.Context(prec=4, rounding=rounding)
    d = ctx.divide(Decimal(x.numerator), Decimal(x.denominator)).normalize(ctx)
    if -7 < d.adjusted() < 7:
        return f"{d:f}"
    return f"{d:e}".replace("e-0", "e-").replace("e+0", "e+")


def fmt_up(x: Fraction | int) -> str:
    """Four significant digits, rounded up (spent, needed)."""
    return _fmt(x, decimal.ROUND_CEILING)


def fmt_down(x: Fraction | int) -> str:
    """Four significant digits, rounded down (remaining, limits)."""
    return _fmt(x, decimal.ROUND_FLOOR)


def _dec(x: Fraction | int, rounding: str) -> Decimal:
    x = Fraction(x)
    ctx = decimal.Context(prec=60, rounding=rounding)
    d = ctx.divide(Decimal(x.numerator), Decimal(x.denominator))
    d = d.quantize(_PLACES, rounding=rounding, context=ctx).normalize(ctx)
    # normalize() writes 1000 as 1E+3: a whole number keeps its digits, as PostgreSQL prints it
    return d.quantize(_ONE, context=ctx) if d == d.to_integral_value() else d


def dec_up(x: Fraction | int) -> Decimal:
    """A numeric value with 12 decimal places, rounded up."""
    return _dec(x, decimal.ROUND_CEILING)


def dec_up_converted(x: Fraction | int) -> Decimal:
    """An epsilon converted from a Gaussian release's zCDP rho, rounded up at 9 decimal places:
    the conversions' own rounding (parts in 10^12) is not shown as digits of the cost (an
    epsilon-1 AIM release read 0.999999999997 in dpsql.history); never below the cost.

    >>> str(dec_up_converted(Fraction(999999999997, 10**12))), str(dec_up_converted(Fraction(1, 3)))
    ('1', '0.333333334')
    """
    return dec_up(Fraction(math.ceil(Fraction(x) * 10**9), 10**9))


def dec_down(x: Fraction | int) -> Decimal:
    """A numeric value with 12 decimal places, rounded down."""
    return _dec(x, decimal.ROUND_FLOOR)

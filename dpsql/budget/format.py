"""Showing exact budget amounts: what is spent or needed rounded up, what remains rounded down,
to 4 significant digits (newcomer25 #12: "epsilon 0.00489375 left" read as noise). A refusal
never reads as a lie: the amount left shown is at most the true one, the amount needed at least.

>>> fmt_up(Fraction(1, 3)), fmt_down(Fraction(1, 3)), fmt_up(Fraction(1, 10**6)), fmt_up(0)
('0.3334', '0.3333', '0.000001', '0')
>>> fmt_down(Fraction(489375, 10**8)), fmt_up(Fraction(170952, 10**6)), fmt_down(100)
('0.004893', '0.171', '100')
>>> fmt_down(Fraction(1, 10**12)), fmt_down(Fraction(7258, 10**10)), fmt_down(Fraction(1, 10**13))
('0.000000000001', '0.0000007258', '1e-13')

Fixed decimals down to 1e-12 (newcomer26 #8: SHOW printed "0.000067" beside "7.258e-7"; the
ledger keeps 12 decimal places, so below that a number is e-notation, never a run of zeros).
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
    if -13 < d.adjusted() < 7:
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


def fmt_up_beside(x: Fraction | int, other: str) -> str:
    """``x`` rounded up (:func:`fmt_up`), with at least as many decimal places as ``other``, an
    amount shown beside it (newcomer26 #8: "spent so far: epsilon 100" beside "epsilon 7.258e-7
    left" of a limit of 100: spent rounded up to 4 digits hid what was left). Never below x.

    >>> fmt_up_beside(Fraction(999999992742, 10**10), "0.0000007258")
    '99.9999992742'
    >>> fmt_up_beside(Fraction(990403, 10**4), "0.9597"), fmt_up_beside(Fraction(1, 3), "7")
    ('99.0403', '0.3334')
    """
    base = fmt_up(x)
    if "e" in other or "e" in base:
        return base
    places = len(other.partition(".")[2])
    if places <= len(base.partition(".")[2]):
        return base
    ctx = decimal.Context(prec=60, rounding=decimal.ROUND_CEILING)
    x = Fraction(x)
    d = ctx.divide(Decimal(x.numerator), Decimal(x.denominator))
    d = d.quantize(Decimal(1).scaleb(-places), rounding=decimal.ROUND_CEILING, context=ctx)
    text = f"{d:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


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

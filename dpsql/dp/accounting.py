"""Privacy costs and their conversions, in exact arithmetic rounded against the analyst.

A release costs pure epsilon (Laplace, partition-selection counts), delta (partition selection's
chance of releasing a key owned by one unit) and/or rho (zero-concentrated DP for Gaussian noise,
Bun & Steinke 2016). rho converts to (epsilon, delta) by
``epsilon = rho + 2 sqrt(rho ln(1/delta))`` (their Proposition 1.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

# Rational approximations of irrational values are rounded in the conservative direction.
_DENOM = 10**12


def _ceil_frac(x: float) -> Fraction:
    return Fraction(math.ceil(x * _DENOM), _DENOM)


def _floor_frac(x: float) -> Fraction:
    return Fraction(math.floor(x * _DENOM), _DENOM)


@dataclass(frozen=True)
class Cost:
    """What one release spends: pure epsilon, delta, and zCDP rho (added, not converted)."""

    epsilon: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, self.rho + other.rho)

    def as_approx_dp(self, delta_for_rho: Fraction) -> tuple[Fraction, Fraction]:
        """(epsilon, delta) of this cost, spending ``delta_for_rho`` to convert the rho part."""
        eps = self.epsilon
        delta = self.delta
        if self.rho > 0:
            eps += rho_to_epsilon(self.rho, delta_for_rho)
            delta += delta_for_rho
        return eps, delta


def rho_to_epsilon(rho: Fraction, delta: Fraction) -> Fraction:
    """epsilon with rho-zCDP => (epsilon, delta)-DP, rounded up.

    >>> float(rho_to_epsilon(Fraction(1, 2), Fraction(1, 10**6)))  # doctest: +ELLIPSIS
    5.756...
    """
    if rho <= 0:
        return Fraction(0)
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1) to convert zCDP")
    return _ceil_frac(float(rho) + 2 * math.sqrt(float(rho) * math.log(1 / float(delta))) + 1e-12)


def epsilon_to_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest rho whose conversion at ``delta`` stays within ``epsilon``, rounded down.

    Solves rho + 2 sqrt(rho L) = epsilon with L = ln(1/delta): sqrt(rho) = sqrt(L + eps) - sqrt(L).
    """
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    L = math.log(1 / float(delta))
    r = (math.sqrt(L + float(epsilon)) - math.sqrt(L)) ** 2
    out = _floor_frac(r * (1 - 1e-9))
    while out > 0 and rho_to_epsilon(out, delta) > epsilon:
        out = out * Fraction(999_999, 1_000_000)
    return out

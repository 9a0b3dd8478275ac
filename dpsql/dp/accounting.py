"""Privacy costs, their composition and conversions, in exact arithmetic rounded against the analyst.

A release costs pure epsilon (Laplace, partition-selection counts), delta (partition selection's
chance of releasing a key owned by one unit) and/or rho (zero-concentrated DP for Gaussian noise).

Composition (Bun & Steinke 2016, "Concentrated Differential Privacy: Simplifications, Extensions,
and Lower Bounds"): an epsilon-DP mechanism is (xi = epsilon, rho = 0)-zCDP (Definition 1.1 with
xi; Renyi divergences never exceed the max divergence, Lemma 8.3); a rho-zCDP one is (0, rho)-zCDP;
an (epsilon, delta)-DP one is delta-approximately (epsilon, 0)-zCDP (Section 8, cf. Proposition
1.13). Composition with costs fixed in advance adds xi, rho and delta (Lemma 2.3, Lemma 8.2), so
a sequence of releases costs the componentwise sum ``Cost(sum epsilon, sum delta, sum rho)``; for
any delta' in (0, 1) such a total is (epsilon + rho + 2 sqrt(rho ln(1/delta')), delta + delta')-DP
(Lemma 3.5 / Proposition 1.3): many Gaussian releases cost about sqrt(k) rather than k times one.
One release on its own is stated that way (:meth:`Cost.as_approx_dp`, the per-query maximum).

Adaptivity: analysts choose each release and its cost after seeing earlier answers. Checking the
realized totals against the budget with a conversion chosen afterwards is not a valid privacy filter
(an analyst mixing pure and Gaussian releases could exceed the budget's delta by a log factor), so
the ledger does not: each budget runs the filter of :mod:`dpsql.budget.filter`, a Renyi filter at
one order fixed when the budget is created (Feldman & Zrnic 2021, Theorem 3.1), using
:func:`renyi_divergence` per release and :func:`renyi_conversion` to reach (epsilon, delta).

Exactness: costs are :class:`fractions.Fraction`. The conversions involve logarithms and square roots;
they are evaluated with 50 significant digits (:mod:`decimal` ``ln`` and ``sqrt`` are correctly
rounded) and rounded to a grid of 1e-12 in the conservative direction: epsilons up, rhos down.

>>> total = Cost(rho=Fraction(1, 100)) + Cost(rho=Fraction(1, 100))
>>> total.rho
Fraction(1, 50)
>>> float(rho_to_epsilon(Fraction(1, 2), Fraction(1, 10**6)))  # doctest: +ELLIPSIS
5.756...
"""

from __future__ import annotations

import decimal
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

# Irrational values are rounded to this grid, in the conservative direction.
_DENOM = 10**12
# Running totals whose denominators grow beyond this are rounded up to it (spent never shrinks).
_MAX_DENOM = 10**30
_CTX = decimal.Context(prec=50, rounding=decimal.ROUND_HALF_EVEN)
# Covers the rounding error of a few correctly rounded 50-digit operations, with a wide margin.
_MARGIN = decimal.Decimal("1e-30")


def _ceil_grid(x: decimal.Decimal) -> Fraction:
    """The smallest multiple of 1/_DENOM that is >= x + _MARGIN."""
    n, d = _CTX.add(x, _MARGIN).as_integer_ratio()
    return Fraction(-((-n * _DENOM) // d), _DENOM)


def _floor_grid(x: decimal.Decimal) -> Fraction:
    """The largest multiple of 1/_DENOM that is <= x - _MARGIN (never below 0)."""
    n, d = _CTX.subtract(x, _MARGIN).as_integer_ratio()
    return max(Fraction(0), Fraction((n * _DENOM) // d, _DENOM))


def _dec(x: Fraction) -> decimal.Decimal:
    return _CTX.divide(decimal.Decimal(x.numerator), decimal.Decimal(x.denominator))


def _ln_inverse(delta: Fraction) -> decimal.Decimal:
    """ln(1/delta) = ln(q) - ln(p) for delta = p/q, from exact integers."""
    return _CTX.subtract(
        _CTX.ln(decimal.Decimal(delta.denominator)), _CTX.ln(decimal.Decimal(delta.numerator))
    )


def exact(value: Fraction | int | float | str) -> Fraction:
    """A value as a Fraction; a float is read as the shortest decimal that it round-trips to.

    A policy's ``epsilon: 0.1`` is parsed as the float 0.1000000000000000055...; the limit taken is
    what the administrator wrote, 1/10 (``delta: 1e-6`` likewise gives exactly 1/10**6).

    >>> exact(0.1)
    Fraction(1, 10)
    >>> exact("1/3")
    Fraction(1, 3)
    """
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {value}")
        return Fraction(repr(value))
    return Fraction(value)


def cap_denominator(x: Fraction) -> Fraction:
    """x itself, or when its denominator exceeds 1e30 the next multiple of 1e-30 above it."""
    if x.denominator <= _MAX_DENOM:
        return x
    return Fraction(-((-x.numerator * _MAX_DENOM) // x.denominator), _MAX_DENOM)


@dataclass(frozen=True)
class Cost:
    """What one release spends: pure epsilon, delta, and zCDP rho (added, never mixed).

    >>> Cost(epsilon=Fraction(1, 2)) + Cost(delta=Fraction(1, 10**6), rho=Fraction(1, 8))
    Cost(epsilon=Fraction(1, 2), delta=Fraction(1, 1000000), rho=Fraction(1, 8))
    """

    epsilon: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        for name in ("epsilon", "delta", "rho"):
            v = getattr(self, name)
            if not isinstance(v, Fraction):
                object.__setattr__(self, name, exact(v))
        if self.epsilon < 0 or self.rho < 0 or not 0 <= self.delta < 1:
            raise ValueError(f"invalid privacy cost {self}: need epsilon, rho >= 0, 0 <= delta < 1")

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, self.rho + other.rho)

    def __sub__(self, other: Cost) -> Cost:
        """Undo an earlier ``+`` (a refund). Never below zero."""
        return Cost(
            max(Fraction(0), self.epsilon - other.epsilon),
            max(Fraction(0), self.delta - other.delta),
            max(Fraction(0), self.rho - other.rho),
        )

    @property
    def is_free(self) -> bool:
        return self.epsilon == 0 and self.delta == 0 and self.rho == 0

    def rounded_up(self) -> Cost:
        """Bound the denominators of a running total (see :func:`cap_denominator`)."""
        return Cost(
            cap_denominator(self.epsilon), cap_denominator(self.delta), cap_denominator(self.rho)
        )

    def as_approx_dp(self, delta_for_rho: Fraction) -> tuple[Fraction, Fraction]:
        """(epsilon, delta) of this cost, spending ``delta_for_rho`` to convert the rho part.

        >>> Cost(epsilon=Fraction(1), rho=Fraction(0)).as_approx_dp(Fraction(1, 10**6))
        (Fraction(1, 1), Fraction(0, 1))
        """
        eps = self.epsilon
        delta = self.delta
        if self.rho > 0:
            eps += rho_to_epsilon(self.rho, delta_for_rho)
            delta += delta_for_rho
        return eps, delta


class PureEpsilon:
    """A mechanism that is epsilon-DP: it costs its ``epsilon`` and nothing else."""

    epsilon: Fraction

    @functools.cached_property
    def cost(self) -> Cost:
        """(Made once per mechanism: they are frozen, and a release's notices ask it again.)"""
        return Cost(epsilon=Fraction(self.epsilon))


ZERO = Cost()


def sequential(costs: Iterable[Cost]) -> Cost:
    """Adaptive sequential composition: the componentwise sum."""
    total = ZERO
    for c in costs:
        total = total + c
    return total


def parallel(costs: Iterable[Cost]) -> Cost:
    """Parallel composition over disjoint parts (each unit touches at most one): componentwise max.

    Each component bounds the same divergence of the one part a unit can change, so the maximum of
    each is a valid cost for the whole.

    >>> parallel([Cost(epsilon=Fraction(1)), Cost(epsilon=Fraction(1, 2), rho=Fraction(1, 4))])
    Cost(epsilon=Fraction(1, 1), delta=Fraction(0, 1), rho=Fraction(1, 4))
    """
    out = ZERO
    for c in costs:
        out = Cost(max(out.epsilon, c.epsilon), max(out.delta, c.delta), max(out.rho, c.rho))
    return out


def rho_to_epsilon(rho: Fraction, delta: Fraction) -> Fraction:
    """epsilon with rho-zCDP => (epsilon, delta)-DP: rho + 2 sqrt(rho ln(1/delta)), rounded up.

    >>> float(rho_to_epsilon(Fraction(1, 2), Fraction(1, 10**6)))  # doctest: +ELLIPSIS
    5.756...
    """
    rho, delta = Fraction(rho), Fraction(delta)
    if rho <= 0:
        return Fraction(0)
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1) to convert zCDP")
    r = _dec(rho)
    root = _CTX.sqrt(_CTX.multiply(r, _ln_inverse(delta)))
    return _ceil_grid(_CTX.add(r, _CTX.multiply(2, root)))


def epsilon_to_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest rho whose conversion at ``delta`` stays within ``epsilon``, rounded down.

    Solves rho + 2 sqrt(rho L) = epsilon with L = ln(1/delta): sqrt(rho) = sqrt(L + eps) - sqrt(L).

    >>> rho = epsilon_to_rho(Fraction(1), Fraction(1, 10**6))
    >>> rho_to_epsilon(rho, Fraction(1, 10**6)) <= 1
    True
    """
    epsilon, delta = Fraction(epsilon), Fraction(delta)
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    if epsilon <= 0:
        return Fraction(0)
    L = _ln_inverse(delta)
    s = _CTX.subtract(_CTX.sqrt(_CTX.add(L, _dec(epsilon))), _CTX.sqrt(L))
    out = _floor_grid(_CTX.multiply(s, s))
    step = Fraction(1, _DENOM)
    while out > 0 and rho_to_epsilon(out, delta) > epsilon:
        out = max(Fraction(0), out - step)
        step *= 2
    return out


def pure_to_rho(epsilon: Fraction) -> Fraction:
    """epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun & Steinke 2016, Proposition 1.4).

    >>> pure_to_rho(Fraction(1))
    Fraction(1, 2)
    """
    return Fraction(epsilon) ** 2 / 2


def gaussian_rho(sensitivity: Fraction, sigma: Fraction) -> Fraction:
    """rho of Gaussian noise of standard deviation ``sigma`` on L2 sensitivity: Δ² / (2 σ²).

    >>> gaussian_rho(Fraction(1), Fraction(1))
    Fraction(1, 2)
    """
    if sigma <= 0:
        raise ValueError("sigma must be > 0")
    return Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2)


def renyi_divergence(cost: Cost, order: Fraction) -> Fraction:
    """The Renyi divergence of order ``order`` that one release's pure and zCDP parts can reach.

    r(alpha) = min(epsilon, alpha epsilon^2 / 2) + alpha rho, exact. A pure epsilon-DP part has
    D_alpha <= D_inf <= epsilon and D_alpha <= alpha epsilon^2 / 2 (Bun & Steinke 2016, Proposition
    1.4, which holds pair by pair); a rho-zCDP part has D_alpha <= alpha rho (Definition 1.1); the
    two compose by addition (Mironov 2017, Proposition 1). An explicit delta is not part of it (see
    :mod:`dpsql.budget.filter`).

    >>> renyi_divergence(Cost(epsilon=Fraction(1, 10), rho=Fraction(1, 100)), Fraction(10))
    Fraction(3, 20)
    >>> renyi_divergence(Cost(epsilon=Fraction(1)), Fraction(10))
    Fraction(1, 1)
    """
    order = Fraction(order)
    if order <= 1:
        raise ValueError("a Renyi order must be > 1")
    eps = cost.epsilon
    return min(eps, order * eps * eps / 2) + order * cost.rho


def _ln(x: Fraction) -> decimal.Decimal:
    """ln(x) of a positive fraction, from exact integers."""
    return _CTX.subtract(
        _CTX.ln(decimal.Decimal(x.numerator)), _CTX.ln(decimal.Decimal(x.denominator))
    )


@functools.lru_cache(maxsize=256)
def renyi_conversion(order: Fraction, delta: Fraction) -> Fraction:
    """c with (alpha, tau)-RDP => (tau + c, delta)-DP, rounded up (never below 0).

    c = (ln(1/delta) + (alpha - 1) ln(1 - 1/alpha) - ln(alpha)) / (alpha - 1): Canonne, Kamath &
    Steinke 2020, Proposition 12 (the same bound as Balle et al. 2020, Theorem 21), tighter than
    Mironov's ln(1/delta) / (alpha - 1). Its proof bounds (1 - e^(eps - Z))_+ by a multiple of
    e^((alpha - 1) Z) pointwise in the privacy loss Z, which :mod:`dpsql.budget.filter` relies on.

    >>> float(renyi_conversion(Fraction(30), Fraction(1, 10**6)))  # doctest: +ELLIPSIS
    0.3252...
    """
    order, delta = Fraction(order), Fraction(delta)
    if order <= 1:
        raise ValueError("a Renyi order must be > 1")
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1) to convert RDP")
    am1 = order - 1
    num = _CTX.add(_ln_inverse(delta), _CTX.multiply(_dec(am1), _ln(am1)))
    num = _CTX.subtract(num, _CTX.multiply(_dec(order), _ln(order)))
    return max(Fraction(0), _ceil_grid(_CTX.divide(num, _dec(am1))))


def default_order(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The Renyi order that lets a budget (epsilon, delta) hold the most zCDP rho, 3 digits.

    Gaussian releases cost alpha * rho, so the budget holds rho up to (epsilon - c(alpha)) / alpha
    with c of :func:`renyi_conversion`. Near the optimum c ~ L / (alpha - 1), L = ln(1/delta),
    whose maximum alpha - 1 = (L + sqrt(L^2 + epsilon L)) / epsilon (close to 1 + sqrt(L / rho*),
    rho* the budget's zCDP equivalent) starts a golden-section search on ln(alpha - 1). Any order
    > 1 is valid (floats are fine here); it only decides how far the budget goes.

    >>> default_order(Fraction(1), Fraction(1, 10**6))
    Fraction(22, 1)
    """
    epsilon, delta = Fraction(epsilon), Fraction(delta)
    if epsilon <= 0 or not 0 < delta < 1:
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    big_l, eps = float(_ln_inverse(delta)), float(epsilon)

    def held(t: float) -> float:  # rho held at alpha = 1 + e^t
        x = math.exp(t)
        a = 1 + x
        c = (big_l + x * math.log(x / a) - math.log(a)) / x
        return (eps - c) / a

    lo = math.log((big_l + math.sqrt(big_l * big_l + eps * big_l)) / eps) - 4
    hi, g = lo + 8, (math.sqrt(5) - 1) / 2
    for _ in range(80):
        m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
        lo, hi = (lo, m2) if held(m1) >= held(m2) else (m1, hi)
    return 1 + Fraction(f"{math.exp((lo + hi) / 2):.3g}")

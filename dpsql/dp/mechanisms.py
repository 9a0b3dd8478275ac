"""Noise-adding mechanisms. Each states its privacy map; costs are exact fractions.

Neighbouring databases differ by all rows of one privacy unit. ``sensitivity`` is the largest
change of the released vector (L1 for Laplace, L2 for Gaussian) between neighbours, already
including any rounding to the output grid (see :func:`grid_for`).

Values are released on a grid of power-of-two resolution: the true value is rounded to the grid and
integer noise (in grid steps) is added, so the output is an exact binary float and no low-order bits
of a floating-point sampler can leak the true value (Mironov 2012).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.dp import rng
from dpsql.dp.accounting import Cost


def grid_for(scale: Fraction) -> Fraction:
    """A power-of-two grid about 1/1024 of the noise scale (1 for integer-sized scales >= 1024)."""
    if scale <= 0:
        return Fraction(1)
    k = math.floor(math.log2(float(scale))) - 10
    return Fraction(2) ** k if k < 0 else Fraction(1)


def _snap(values: np.ndarray, grid: Fraction) -> np.ndarray:
    return np.rint(np.asarray(values, dtype=np.float64) / float(grid)).astype(np.int64)


def _two_sided_tail(prob: float) -> float:
    return max(1e-300, 1.0 - prob)


@dataclass(frozen=True)
class Laplace:
    """Discrete Laplace noise: P(k·grid) ∝ exp(-|k|·grid / scale), scale = sensitivity / epsilon.

    Privacy map: a vector with L1 sensitivity Δ released this way is (Δ/scale)-DP = epsilon-DP.
    """

    sensitivity: Fraction
    epsilon: Fraction
    grid: Fraction = Fraction(1)
    name: str = "laplace"

    def __post_init__(self) -> None:
        if self.epsilon <= 0 or self.sensitivity < 0 or self.grid <= 0:
            raise ValueError("Laplace needs epsilon > 0, sensitivity >= 0, grid > 0")

    @property
    def scale(self) -> Fraction:
        return Fraction(self.sensitivity) / Fraction(self.epsilon)

    @property
    def cost(self) -> Cost:
        return Cost(epsilon=Fraction(self.epsilon))

    @property
    def std(self) -> float:
        return math.sqrt(2) * float(self.scale)

    def release(self, values: np.ndarray) -> np.ndarray:
        snapped = _snap(values, self.grid)
        if self.sensitivity == 0:
            return snapped.astype(np.float64) * float(self.grid)
        noise = rng.discrete_laplace(self.scale / self.grid, snapped.size).reshape(snapped.shape)
        return (snapped + noise).astype(np.float64) * float(self.grid)

    def half_width(self, confidence: float) -> float:
        """t with P(|noise| <= t) >= confidence (continuous bound, conservative for the grid)."""
        if self.sensitivity == 0:
            return 0.0
        return float(self.scale) * math.log(1 / _two_sided_tail(confidence)) + float(self.grid)


@dataclass(frozen=True)
class Gaussian:
    """Discrete Gaussian noise with sigma² = sensitivity² / (2 rho) (Canonne-Kamath-Steinke 2020).

    Privacy map: a vector with L2 sensitivity Δ is (Δ² / (2 sigma²))-zCDP = rho-zCDP.
    """

    sensitivity: Fraction
    rho: Fraction
    grid: Fraction = Fraction(1)
    name: str = "gaussian"

    def __post_init__(self) -> None:
        if self.rho <= 0 or self.sensitivity < 0 or self.grid <= 0:
            raise ValueError("Gaussian needs rho > 0, sensitivity >= 0, grid > 0")

    @property
    def sigma2(self) -> Fraction:
        return Fraction(self.sensitivity) ** 2 / (2 * Fraction(self.rho))

    @property
    def std(self) -> float:
        return math.sqrt(float(self.sigma2))

    @property
    def cost(self) -> Cost:
        return Cost(rho=Fraction(self.rho))

    def release(self, values: np.ndarray) -> np.ndarray:
        snapped = _snap(values, self.grid)
        if self.sensitivity == 0:
            return snapped.astype(np.float64) * float(self.grid)
        noise = rng.discrete_gaussian(self.sigma2 / self.grid**2, snapped.size)
        return (snapped + noise.reshape(snapped.shape)).astype(np.float64) * float(self.grid)

    def half_width(self, confidence: float) -> float:
        from statistics import NormalDist

        if self.sensitivity == 0:
            return 0.0
        z = NormalDist().inv_cdf(1 - _two_sided_tail(confidence) / 2)
        return z * self.std + float(self.grid)


Mechanism = Laplace | Gaussian

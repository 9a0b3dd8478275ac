"""Noise-adding mechanisms. Each states its privacy map; costs are exact fractions.

Neighbouring databases differ by all rows of one privacy unit (add or remove one unit).
``sensitivity`` is the largest change of the released vector (L1 for Laplace, L2 for Gaussian)
between neighbours, already including any rounding to the output grid (see :func:`grid_for`):
snapping a value to the grid moves it by at most grid/2, so a vector of d snapped coordinates can
move by up to d * grid more (L1) than the unsnapped one.

Values are released on a grid: the true value is rounded to the grid and integer noise (in grid
steps) from the exact samplers of :mod:`dpsql.dp.rng` is added, so the output is a deterministic
function of an integer and no low-order bits of a floating-point sampler can leak the true value
(Mironov 2012). With a power-of-two grid the output is moreover an exact binary float.

Noise parameters are rounded *up* (more noise, never less) to rationals with small numerators and
denominators (:func:`round_up`), which keeps the samplers on their fast int64 path; the privacy
map is stated for the requested parameter and holds a fortiori for the rounded one.

Confidence half-widths come from the discrete distributions themselves: exact tail sums for the
discrete Laplace (closed form) and for the discrete Gaussian up to 10**4 grid steps of sigma, the
bound P(|Z| > m) <= 2 Q(m / sigma) (see :func:`gaussian_tail_bound`) beyond; plus grid/2 for the
snapping of the true value.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import ClassVar

import numpy as np

from dpsql.dp import rng
from dpsql.dp.accounting import Cost, PureEpsilon

_ROUND_BITS = 20
_EXACT_GAUSS_SIGMA = 10_000


def floor_log2(x: Fraction) -> int:
    """floor(log2(x)) of a positive rational, as ``math.floor(math.log2(float(x)))`` when ``x``
    is a normal float, exact when it is not (1e-400 underflows to 0.0, 1e400 overflows: the
    value range of ``SUM(amount / 1e1000)`` or of a constant near NUMERIC's limit).

    >>> floor_log2(Fraction(3)), floor_log2(Fraction(1, 10**400)), floor_log2(Fraction(10**400))
    (1, -1329, 1328)
    """
    try:
        f = float(x)
    except OverflowError:
        f = math.inf
    if 0 < f < math.inf:
        return math.floor(math.log2(f))
    n, d = x.numerator, x.denominator
    k = n.bit_length() - d.bit_length()  # 2^(k-1) < n/d < 2^(k+1)
    return k if (n >= d << k if k >= 0 else n << -k >= d) else k - 1


def grid_for(scale: Fraction) -> Fraction:
    """A power-of-two grid about 1/1024 of the noise scale (1 for integer-sized scales >= 1024)."""
    if scale <= 0:
        return Fraction(1)
    k = floor_log2(Fraction(scale)) - 10
    return Fraction(2) ** k if k < 0 else Fraction(1)


def round_up(x: Fraction, bits: int = _ROUND_BITS) -> Fraction:
    """x when its denominator is at most 2**bits, else the next multiple of 2**-bits above x;
    the next integer when x >= 2**bits. Never below x.

    >>> round_up(Fraction(1, 3), 1)
    Fraction(1, 2)
    >>> round_up(Fraction(10**9 + 1, 3))
    Fraction(333333334, 1)
    """
    x = Fraction(x)
    if x >= 2**bits:
        return Fraction(math.ceil(x))
    if x.denominator <= 2**bits:
        return x
    return Fraction(math.ceil(x * 2**bits), 2**bits)


def rounded_sensitivity(
    sensitivity: Fraction, grid: Fraction, coordinates: int, norm: str = "l1"
) -> Fraction:
    """Sensitivity after snapping to the grid, when a unit can move ``coordinates`` outputs.

    Rounding moves each coordinate by at most grid/2, so two neighbours' snapped vectors differ
    per coordinate by at most their true difference plus one grid step: L1 grows by at most
    coordinates · grid, L2 by at most sqrt(coordinates) · grid (triangle inequality; the square
    root is bounded above by a rational). Values already on the grid (integer counts on grid 1)
    need no allowance.

    >>> rounded_sensitivity(Fraction(10), Fraction(1, 8), 2)
    Fraction(41, 4)
    """
    if coordinates < 0:
        raise ValueError("coordinates must be >= 0")
    if norm == "l1":
        return Fraction(sensitivity) + coordinates * Fraction(grid)
    if norm == "l2":
        root = Fraction(math.isqrt(coordinates * 4**_ROUND_BITS) + 1, 2**_ROUND_BITS)
        return Fraction(sensitivity) + root * Fraction(grid)
    raise ValueError("norm must be 'l1' or 'l2'")


def _snap(values: np.ndarray, grid: Fraction) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise ValueError("cannot release non-finite values")
    step = float(grid)
    if step == 0.0:
        # A grid below float64's range (a column's range near 1e-300): every value and every
        # release is 0 in float64, so the snapped steps are 0 too (they were 0 / 0 -> NaN cast
        # to int64's minimum, multiplied by 0 on the way out: the same 0, with warnings).
        return np.zeros(arr.shape, dtype=np.int64)
    return np.rint(arr / step).astype(np.int64)


def _check_confidence(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    return 1.0 - confidence


def laplace_tail(scale: Fraction, m: int) -> float:
    """P(|Z| > m) for P(k) ∝ exp(-|k|/scale): 2 r**(m+1) / (1 + r), r = exp(-1/scale)."""
    r = math.exp(-1 / float(scale))
    return 2 * math.exp(-(m + 1) / float(scale)) / (1 + r)


def laplace_half_steps(scale: Fraction, alpha: float) -> int:
    """Smallest integer m >= 0 with P(|Z| > m) <= alpha for the discrete Laplace (in steps)."""
    r = math.exp(-1 / float(scale))
    need = float(scale) * math.log(2 / (alpha * (1 + r)))  # m + 1 >= need
    m = max(0, math.ceil(need * (1 + 1e-12) + 1e-9) - 1)
    while laplace_tail(scale, m) > alpha * (1 - 1e-12):  # float slack: err on the wide side
        m += 1
    return m


def gaussian_tail_bound(sigma2: Fraction, m: int) -> float:
    """An upper bound on P(|Z| > m) for the discrete Gaussian, valid for every sigma.

    With f(k) = exp(-k²/(2 sigma²)), f decreases on k >= m, so sum_{k > m} f(k) <=
    integral_m^inf f = sigma sqrt(2 pi) Q(m/sigma); and by Poisson summation the normalizer
    sum_k f(k) = sigma sqrt(2 pi) sum_n exp(-2 pi² sigma² n²) >= sigma sqrt(2 pi).
    Hence P(|Z| > m) <= 2 Q(m / sigma).
    """
    return math.erfc(m / math.sqrt(2 * float(sigma2)))  # 2 Q(x) = erfc(x / sqrt 2)


def gaussian_half_steps(sigma2: Fraction, alpha: float) -> int:
    """Smallest m with P(|Z| > m) <= alpha (exact sums up to sigma = 10**4 steps, else the bound)."""
    sigma = math.sqrt(float(sigma2))
    if sigma <= _EXACT_GAUSS_SIGMA:
        ks = np.arange(0, int(40 * sigma) + 40, dtype=np.float64)
        f = np.exp(-(ks**2) / (2 * float(sigma2)))
        total = f[0] + 2 * f[1:].sum()
        above = np.cumsum(f[::-1])[::-1]  # above[j] = sum_{k >= j} f(k), no cancellation
        tails = 2 * np.append(above[1:], 0.0) / total  # tails[m] = P(|Z| > m)
        ok = np.flatnonzero(tails <= alpha * (1 - 1e-9))
        if ok.size:
            return int(ok[0])
    z = NormalDist().inv_cdf(1 - alpha / 2)
    m = math.ceil(z * sigma * (1 + 1e-12) + 1e-9)
    while gaussian_tail_bound(sigma2, m) > alpha * (1 - 1e-12):
        m += 1
    return m


class _OnGrid:
    """What Laplace and Gaussian share: the true values snapped to ``grid``, integer noise (in
    grid steps) from the mechanism's exact sampler added, and the half-width of the noise's
    exact tail plus grid/2 for the snapping. A mechanism supplies ``_noise`` and ``_tail_steps``.
    Its fields are frozen, so what is derived from them (scale, std, half-widths) is computed
    once per instance."""

    sensitivity: Fraction
    grid: Fraction
    budget_field: ClassVar[str]  # the name of the field the noise is calibrated to (epsilon, rho)

    def __post_init__(self) -> None:
        if getattr(self, self.budget_field) <= 0 or self.sensitivity < 0 or self.grid <= 0:
            raise ValueError(
                f"{type(self).__name__} needs {self.budget_field} > 0, sensitivity >= 0, grid > 0"
            )

    def _noise(self, n: int) -> np.ndarray:
        """``n`` integer noise draws, in grid steps."""
        raise NotImplementedError

    def _tail_steps(self, alpha: float) -> int:
        """The smallest m >= 0 with P(|noise| > m grid steps) <= alpha."""
        raise NotImplementedError

    def release(self, values: np.ndarray) -> np.ndarray:
        snapped = _snap(values, self.grid)
        if self.sensitivity == 0:
            return snapped.astype(np.float64) * float(self.grid)
        noise = self._noise(snapped.size).reshape(snapped.shape)
        return np.asarray((snapped + noise).astype(np.float64) * float(self.grid))

    def half_width(self, confidence: float) -> float:
        """t with P(|released - true| <= t) >= confidence: exact noise tail + grid/2 snapping.

        Kept on the instance per confidence (a statement asks its mechanisms for the same few
        levels dozens of times; :func:`_half_width`'s cache key hashes every Fraction field)."""
        memo: dict[float, float] | None = self.__dict__.get("_half_widths")
        if memo is None:
            memo = {}
            object.__setattr__(self, "_half_widths", memo)
        hw = memo.get(confidence)
        if hw is None:
            hw = memo[confidence] = _half_width(self, confidence)
        return hw


@dataclass(frozen=True)
class Laplace(_OnGrid, PureEpsilon):
    """Discrete Laplace noise: P(k·grid) ∝ exp(-|k|·grid / scale), scale = sensitivity / epsilon.

    Privacy map: neighbours (one privacy unit added or removed) whose released vectors differ by at
    most Δ = ``sensitivity`` in L1 norm get epsilon-DP with epsilon = Δ / scale; the scale actually
    sampled (``noise_scale`` grid steps) is rounded up, so the guarantee holds as stated.
    Accuracy: P(|noise| > m·grid) = 2 r**(m+1)/(1+r), r = exp(-grid/scale) (exact).
    """

    sensitivity: Fraction
    epsilon: Fraction
    grid: Fraction = Fraction(1)
    name: str = "laplace"
    budget_field: ClassVar[str] = "epsilon"

    @functools.cached_property
    def scale(self) -> Fraction:
        """sensitivity / epsilon, in value units (exact)."""
        return Fraction(self.sensitivity) / Fraction(self.epsilon)

    @functools.cached_property
    def noise_scale(self) -> Fraction:
        """The scale sampled, in grid steps: scale / grid rounded up."""
        return round_up(self.scale / Fraction(self.grid))

    @functools.cached_property
    def std(self) -> float:
        """Standard deviation of the noise in value units: sqrt(2 r)/(1 - r) grid steps."""
        if self.sensitivity == 0:
            return 0.0
        r = math.exp(-1 / float(self.noise_scale))
        return math.sqrt(2 * r) / (1 - r) * float(self.grid)

    def _noise(self, n: int) -> np.ndarray:
        return rng.discrete_laplace(self.noise_scale, n)

    def _tail_steps(self, alpha: float) -> int:
        return laplace_half_steps(self.noise_scale, alpha)


@dataclass(frozen=True)
class Gaussian(_OnGrid):
    """Discrete Gaussian noise with sigma² = sensitivity² / (2 rho) (Canonne-Kamath-Steinke 2020).

    Privacy map: neighbours (one privacy unit added or removed) whose released vectors differ by at
    most Δ = ``sensitivity`` in L2 norm get rho-zCDP with rho = Δ² / (2 sigma²) (CKS20 Theorem 4;
    the sampled sigma² is rounded up, so the guarantee holds as stated). Converted to approximate
    DP by :func:`dpsql.dp.accounting.rho_to_epsilon` (or, tighter for one release, CKS20 Theorem 7).
    """

    sensitivity: Fraction
    rho: Fraction
    grid: Fraction = Fraction(1)
    name: str = "gaussian"
    budget_field: ClassVar[str] = "rho"

    @functools.cached_property
    def sigma2(self) -> Fraction:
        """sensitivity² / (2 rho), in squared value units (exact)."""
        return Fraction(self.sensitivity) ** 2 / (2 * Fraction(self.rho))

    @functools.cached_property
    def noise_sigma2(self) -> Fraction:
        """The sigma² sampled, in squared grid steps: sigma2 / grid² rounded up."""
        return round_up(self.sigma2 / Fraction(self.grid) ** 2)

    @functools.cached_property
    def std(self) -> float:
        """sigma in value units (the discrete Gaussian's standard deviation is at most this)."""
        return math.sqrt(float(self.noise_sigma2)) * float(self.grid)

    @property
    def cost(self) -> Cost:
        return Cost(rho=Fraction(self.rho))

    def _noise(self, n: int) -> np.ndarray:
        return rng.discrete_gaussian(self.noise_sigma2, n)

    def _tail_steps(self, alpha: float) -> int:
        return gaussian_half_steps(self.noise_sigma2, alpha)


# Half-widths are exact tail computations in Fractions (~0.3 ms each); a GROUP BY releases the
# same mechanism for every group, so they are computed once per (mechanism, confidence).
@functools.lru_cache(maxsize=4096)
def _half_width(mech: _OnGrid, confidence: float) -> float:
    alpha = _check_confidence(confidence)
    if mech.sensitivity == 0:
        return float(mech.grid) / 2
    return (mech._tail_steps(alpha) + 0.5) * float(mech.grid)


Mechanism = Laplace | Gaussian


def split_confidence(confidence: float, parts: int) -> float:
    """Per-part confidence so that ``parts`` intervals hold together (union bound).

    >>> split_confidence(0.95, 2)
    0.975
    """
    alpha = _check_confidence(confidence)
    return 1.0 - alpha / parts


def ratio_bounds(
    num: float,
    num_half_width: float,
    den: float,
    den_half_width: float,
    clamp: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """An interval for a ratio (AVG = SUM / COUNT) from intervals of its noisy parts.

    If the true numerator lies in num ± num_half_width and the true denominator in
    den ± den_half_width (each at confidence 1 - alpha/2, see :func:`split_confidence`), the true
    ratio lies in the returned interval with confidence >= 1 - alpha: the extremes of a/b over the
    box are at its corners when the denominator interval is positive. Otherwise (the denominator
    may be <= 0) the interval is unbounded, or ``clamp`` (e.g. the declared column bounds, within
    which every average of clamped values lies) when given; the result is always within ``clamp``.

    >>> ratio_bounds(100.0, 10.0, 10.0, 1.0)
    (8.181818181818182, 12.222222222222221)
    """
    lo_d, hi_d = den - den_half_width, den + den_half_width
    if lo_d > 0:
        corners = [
            a / b for a in (num - num_half_width, num + num_half_width) for b in (lo_d, hi_d)
        ]
        lo, hi = min(corners), max(corners)
    else:
        lo, hi = -math.inf, math.inf
    if clamp is not None:
        lo, hi = max(lo, clamp[0]), min(hi, clamp[1])
        if lo > hi:
            lo, hi = clamp
    return lo, hi


def sum_reach(mech: Mechanism, n: int, beta: float) -> float:
    """t (value units) with P(S > t) <= ``beta`` for S the sum of ``n`` independent releases'
    errors (each its noise plus its snapping to the grid, at most grid/2): a one-sided bound
    for a total over groups. One release: the exact tail (the noise is symmetric, so its
    one-sided ``beta`` is the two-sided half-width at 1 - 2 ``beta``). Several: a Chernoff
    bound, P(S >= x) <= exp(-s x) M(s)^n for every s > 0 (M the noise's moment generating
    function; any s gives a valid bound, the least over a grid of s is taken): the discrete
    Laplace's M(s) = (1 - r)² / ((1 - r e^s)(1 - r e^-s)), r = exp(-1/scale), for s < 1/scale;
    the discrete Gaussian is sigma²-subgaussian (Canonne-Kamath-Steinke 2020, Corollary 9):
    x = sigma sqrt(2 n ln(1/beta))."""
    if n <= 0:
        return 0.0
    if n == 1:
        return mech.half_width(1 - 2 * beta)
    g = float(mech.grid)
    if mech.sensitivity == 0:
        return n * g / 2
    log_b = math.log(1 / beta)
    if isinstance(mech, Gaussian):
        steps = math.sqrt(2 * n * float(mech.noise_sigma2) * log_b)
    else:
        scale = float(mech.noise_scale)
        r = math.exp(-1 / scale)
        s = np.linspace(0.0, 1.0, 4001)[1:-1] / scale
        log_m = 2 * math.log1p(-r) - np.log1p(-r * np.exp(s)) - np.log1p(-r * np.exp(-s))
        steps = float(np.min((log_b + n * log_m) / s))
    return (steps + n / 2) * g

"""The ONLY source of randomness for privacy in dpsql.

Everything is integer arithmetic fed by the operating system's CSPRNG (``secrets``), so no
floating-point artefacts (Mironov 2012) can leak the true value through the noise's low bits.

First version: exact samplers in pure Python (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian
for Differential Privacy", Algorithms 1-3). Issue 5 vectorizes them.
"""

from __future__ import annotations

import math
import secrets
from fractions import Fraction

import numpy as np


def token_hex(nbytes: int = 16) -> str:
    """A random hex token (salts for contribution-bounding order)."""
    return secrets.token_hex(nbytes)


def _uniform_int(n: int) -> int:
    """Uniform on {0, ..., n-1}."""
    return secrets.randbelow(n)


def _bernoulli(p: Fraction) -> bool:
    """Exact Bernoulli(p) for rational p in [0, 1]."""
    return _uniform_int(p.denominator) < p.numerator


def _bernoulli_exp_le1(gamma: Fraction) -> bool:
    """Bernoulli(exp(-gamma)) for gamma in [0, 1] (CKS20 Algorithm 1)."""
    k = 1
    while _bernoulli(gamma / k):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(gamma: Fraction) -> bool:
    """Bernoulli(exp(-gamma)) for gamma >= 0."""
    while gamma > 1:
        if not _bernoulli_exp_le1(Fraction(1)):
            return False
        gamma -= 1
    return _bernoulli_exp_le1(gamma)


def _geometric_exp_slow(gamma: Fraction) -> int:
    k = 0
    while _bernoulli_exp(gamma):
        k += 1
    return k


def _geometric_exp_fast(x: Fraction) -> int:
    """Geometric with P(k) ∝ exp(-k x), x = s/t > 0 (CKS20 Algorithm 2's inner loop)."""
    s, t = x.numerator, x.denominator
    while True:
        u = _uniform_int(t)
        if _bernoulli_exp(Fraction(u, t)):
            break
    v = _geometric_exp_slow(Fraction(1))
    return (v * t + u) // s


def _discrete_laplace_one(scale: Fraction) -> int:
    """P(k) ∝ exp(-|k| / scale) (CKS20 Algorithm 2)."""
    inv = 1 / scale
    while True:
        mag = _geometric_exp_fast(inv)
        negative = _bernoulli(Fraction(1, 2))
        if negative and mag == 0:
            continue
        return -mag if negative else mag


def _discrete_gaussian_one(sigma2: Fraction) -> int:
    """P(k) ∝ exp(-k² / (2 sigma2)) (CKS20 Algorithm 3)."""
    t = math.isqrt(math.floor(sigma2)) + 1
    while True:
        y = _discrete_laplace_one(Fraction(t))
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if _bernoulli_exp(gamma):
            return y


def discrete_laplace(scale: Fraction, size: int) -> np.ndarray:
    """``size`` draws with P(k) ∝ exp(-|k| / scale), as int64."""
    if scale <= 0:
        raise ValueError("scale must be positive")
    s = Fraction(scale)
    return np.array([_discrete_laplace_one(s) for _ in range(size)], dtype=np.int64)


def discrete_gaussian(sigma2: Fraction, size: int) -> np.ndarray:
    """``size`` draws with P(k) ∝ exp(-k² / (2 sigma2)), as int64."""
    if sigma2 <= 0:
        raise ValueError("sigma2 must be positive")
    s = Fraction(sigma2)
    return np.array([_discrete_gaussian_one(s) for _ in range(size)], dtype=np.int64)

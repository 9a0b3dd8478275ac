"""Marginals of bounded cells, noisy measurements of them, and the exact exponential mechanism.

Shared by the synthesizers (:mod:`dpsql.release.mst`, :mod:`dpsql.release.aim`) and the domain
compression (:mod:`dpsql.release.compress`). Nothing here imports mbi/jax.

Input everywhere: the bounded cells of :mod:`dpsql.release.source` (``per_unit``: each privacy unit
keeps at most R rows), as ``idx`` (rows, k) bin indices and ``n`` their counts, so every marginal's
count vector moves by at most R in L1 and in L2 between neighbours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsql.dp import rng
from dpsql.dp.mechanisms import Gaussian
from dpsql.release.measurement import Measurement

if TYPE_CHECKING:
    from dpsql.release.compress import Compression

SCORE_GRID = 1024  # model marginals are rounded to 1/1024 so that scores are exact integers


@dataclass(frozen=True)
class SynthesisPlan:
    """What every synthesizer's plan starts with (fixed before any data is read): the domain
    (column names and sizes), the zCDP budget, and the public bound on a unit's rows."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    rho: Fraction
    rows_bound: int

    @property
    def d(self) -> int:
        """The number of columns."""
        return len(self.shape)


@dataclass(frozen=True)
class Synthesis:
    """What a synthesizer measured: everything later steps (fit, sample, write) may read.

    ``one_way`` are the noisy 1-way marginals over the original domain (they decide the
    compression and give the independent baseline); ``measurements`` are over the compressed
    domain (``compression.shape``) and are what the graphical model is fitted to; ``selected``
    are the cliques chosen privately (MST's tree edges, AIM's rounds), in order.
    """

    names: tuple[str, ...]
    shape: tuple[int, ...]
    one_way: tuple[Measurement, ...]
    compression: Compression
    measurements: tuple[Measurement, ...]
    selected: tuple[tuple[int, ...], ...]
    model: Any = None  # the fitted model when the synthesizer fits while it runs (AIM)
    spent: Fraction | None = None  # the rho actually spent (AIM: adaptive; at most the plan's)
    small: bool = False  # AIM's small-data regime: 1-way marginals only


def marginal(
    idx: np.ndarray, n: np.ndarray, shape: Sequence[int], clique: Sequence[int]
) -> np.ndarray:
    """The dense marginal over ``clique`` of sparse cells (idx: (rows, k) bin indices)."""
    dims = [shape[c] for c in clique]
    if not clique:
        return np.array([n.sum()], dtype=np.int64)
    flat = np.ravel_multi_index(tuple(idx[:, c] for c in clique), dims) if len(idx) else idx[:0, 0]
    return np.bincount(flat, weights=n, minlength=math.prod(dims)).astype(np.int64).reshape(dims)


def measure(g: Gaussian, exact: np.ndarray, clique: tuple[int, ...]) -> Measurement:
    """``exact`` (integer counts) plus discrete Gaussian noise of ``g`` (rho-zCDP for L2 <= Δ)."""
    noisy = g.release(exact.reshape(-1).astype(np.float64))
    return Measurement(clique, noisy, g.std, None, g.half_width(0.95))


def exponential_mechanism(scores: Sequence[int], epsilon: Fraction, sensitivity: int) -> int:
    """Index i chosen with probability ∝ exp(epsilon scores[i] / (2 sensitivity)), exactly.

    Rejection sampling: propose i uniformly, accept with
    Bernoulli(exp(-epsilon (max - s_i) / (2 sensitivity))); the accepted index has exactly the
    exponential mechanism's distribution. Privacy: for scores of sensitivity Δ (each moves by at
    most Δ between neighbours) this is epsilon-DP and epsilon²/8-zCDP (bounded range, Cesar &
    Rogers 2021).
    """
    eps = Fraction(epsilon)
    s = [int(x) for x in scores]
    top = max(s)
    m = len(s)
    den = 2 * sensitivity * eps.denominator
    while True:
        cand = rng.uniform_below(m, size=m)
        num = [(top - s[int(c)]) * eps.numerator for c in cand]
        heads = rng.bernoulli_exp_rational(num, den)
        hit = np.flatnonzero(heads)
        if hit.size:
            return int(cand[hit[0]])


def l1_score(true: np.ndarray, model: np.ndarray) -> int:
    """SCORE_GRID * ||true - model||_1 with the model rounded to 1/SCORE_GRID: an exact integer.

    ``model`` must not depend on ``true`` (only on released values); then the score moves by at
    most SCORE_GRID * ||dtrue||_1 between neighbours.
    """
    m = np.round(np.asarray(model, dtype=np.float64).reshape(-1) * SCORE_GRID).astype(np.int64)
    t = np.asarray(true, dtype=np.int64).reshape(-1) * SCORE_GRID
    return int(np.abs(m - t).sum())


def independent(one_way: Sequence[np.ndarray], total: float) -> np.ndarray:
    """The marginal implied by independence of the (clipped, normalized) noisy 1-way marginals."""
    out = np.array(float(total))
    for x in one_way:
        p = np.clip(np.asarray(x, dtype=np.float64), 0, None)
        p = p / p.sum() if p.sum() > 0 else np.full(p.shape, 1 / p.size)
        out = np.multiply.outer(out, p)
    return out

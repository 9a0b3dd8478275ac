"""Would the model beat the independent-marginals baseline? A DP answer, before publishing.

The baseline is what releasing only the 1-way marginals gives: independent columns, here the
fitted model's own 1-way marginals (so at the same epsilon, already paid for). On the bounded
cells x (over the compressed domain), with m_p the model's and b_p the baseline's marginal of
pair p (both functions of released values only), the statistic is

    G = sum over the P pairs of ( ||x_p - b_p||_1 - ||x_p - m_p||_1 ),

how many rows (summed over pairs) the model's 2-way marginals are closer to the data than the
baseline's. Per pair the two distances move by at most R each when a unit (at most R rows) comes
or goes, so G / P moves by at most 2 R: the discrete Gaussian with that L2 sensitivity (plus one
grid step for snapping) and rho_compare releases it (rho_compare-zCDP, charged with the release).

The model is published when the noisy G is positive; otherwise the owner's choice applies
(``--if-worse``): publish the baseline (default), stop before writing, or publish the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np

from dpsql.dp import rng
from dpsql.dp.mechanisms import Gaussian, grid_for, rounded_sensitivity
from dpsql.errors import ObjectNotInPrerequisiteState
from dpsql.release.marginals import SCORE_GRID, independent, l1_score, marginal

IF_WORSE = ("baseline", "stop", "publish")
DEFAULT_SHARE = Fraction(1, 20)
Marginals = Callable[[tuple[int, ...]], np.ndarray]


class ReleaseWithheld(ObjectNotInPrerequisiteState):
    """The model would not beat the baseline and the owner chose ``--if-worse stop`` (55000)."""


@dataclass(frozen=True)
class Comparison:
    """The released comparison: the noisy mean-per-pair L1 gap (rows; > 0: the model is closer)
    and its 0.95 half-width."""

    gap_rows: float
    half_width: float
    pairs: int

    @property
    def model_better(self) -> bool:
        return self.gap_rows > 0

    def as_json(self) -> dict[str, object]:
        return {
            "statistic": "mean over column pairs of ||x - baseline||_1 - ||x - model||_1 (rows)",
            "noisy_gap_rows": self.gap_rows,
            "half_width_0.95": self.half_width,
            "pairs": self.pairs,
            "model_better": self.model_better,
        }


def comparison_mechanism(rho: Fraction, rows_bound: int, d: int) -> Gaussian:
    """The Gaussian releasing G / P (rows, a multiple of 1/SCORE_GRID): L2 sensitivity 2 R, plus
    one grid step for snapping the value to the output grid (``rounded_sensitivity``)."""
    sens = Fraction(2 * rows_bound)
    grid = grid_for(sens / Fraction(math.sqrt(float(2 * rho))))
    return Gaussian(rounded_sensitivity(sens, grid, 1, "l2"), rho, grid)


def compare(
    mech: Gaussian,
    shape: tuple[int, ...],
    idx: np.ndarray,
    n: np.ndarray,
    get: Marginals,
) -> Comparison:
    """Release G for the model whose marginals ``get(clique)`` returns (flattened, released values
    only) against the cells ``idx``/``n`` over ``shape`` (compressed)."""
    d = len(shape)
    pairs = list(combinations(range(d), 2))
    total = 0
    one = [np.asarray(get((c,))) for c in range(d)]
    size = float(np.clip(one[0], 0, None).sum()) if d else 0.0
    for i, j in pairs:
        x = marginal(idx, n, shape, (i, j))
        base = independent([one[i], one[j]], size)
        total += l1_score(x, base) - l1_score(x, np.asarray(get((i, j))))
    mean = total / (SCORE_GRID * max(len(pairs), 1))  # rows per pair
    noisy = float(mech.release(np.array([mean]))[0])
    return Comparison(noisy, mech.half_width(0.95), len(pairs))


def decide(comparison: Comparison | None, if_worse: str) -> str:
    """What to publish: "model" or "baseline"; raises ReleaseWithheld for ``stop``."""
    if comparison is None or comparison.model_better or if_worse == "publish":
        return "model"
    if if_worse == "stop":
        raise ReleaseWithheld(
            "the synthetic model would not beat independent 1-way marginals at this epsilon "
            f"(DP comparison: {comparison.gap_rows:+.1f} ± {comparison.half_width:.1f} rows "
            "per column pair); nothing was written",
            detail="the budget of this release is spent (the comparison is part of it)",
            hint="publish a histogram of the 1-way marginals, release fewer or coarser columns, "
            "use a larger epsilon, or pass --if-worse baseline / publish",
        )
    return "baseline"


def baseline_rows(one_way: list[np.ndarray], rows: int) -> np.ndarray:
    """``rows`` rows with independent columns drawn from the (clipped) 1-way marginals given
    (released values), as indices over their domain: post-processing, from :mod:`dpsql.dp.rng`."""
    cols = []
    for p in one_way:
        w = np.floor(np.clip(np.asarray(p, dtype=np.float64), 0, None) * SCORE_GRID)
        w = w.astype(np.int64) if w.sum() > 0 else np.ones(len(p), dtype=np.int64)
        cum = np.cumsum(w)
        cols.append(np.searchsorted(cum, rng.uniform_below(int(cum[-1]), size=rows), "right"))
    return np.stack(cols, axis=1).astype(np.int64)


def rounded_rows(one_way: list[np.ndarray], rows: int) -> np.ndarray:
    """``rows`` rows with independent columns whose 1-way counts are the (clipped) marginals
    given, scaled to ``rows`` and rounded (floors, the remainder to the largest fractional parts,
    ties at random), each column in a random order: as Private-PGM's ``round`` sampling does for a
    model without edges. Its 2-way marginals differ from the product of the 1-way ones only by
    the random pairing (no multinomial noise on the 1-way counts, unlike :func:`baseline_rows`).
    Post-processing, from :mod:`dpsql.dp.rng`.

    >>> r = rounded_rows([np.array([3.0, 1.0]), np.array([-1.0, 2.0, 2.0])], 8)
    >>> np.bincount(r[:, 0]).tolist(), np.bincount(r[:, 1], minlength=3).tolist()
    ([6, 2], [0, 4, 4])
    """
    cols = []
    for p in one_way:
        w = np.clip(np.asarray(p, dtype=np.float64), 0, None)
        w = w if w.sum() > 0 else np.ones(len(w))
        share = w * (rows / w.sum())
        counts = np.floor(share).astype(np.int64)
        frac = share - counts
        tie = rng.uniform_below(2**30, size=len(w))
        order = np.lexsort((tie, -np.round(frac * 2**20)))
        counts[order[: rows - int(counts.sum())]] += 1
        col = np.repeat(np.arange(len(w)), counts)
        cols.append(col[np.argsort(rng.uniform_below(2**52, size=rows), kind="stable")])
    return np.stack(cols, axis=1).astype(np.int64)

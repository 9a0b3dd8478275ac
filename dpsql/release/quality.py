"""The owner-only quality report of a synthetic release: computed on the REAL data, never released.

For every column (1-way) and every pair of columns (2-way), the total-variation distance
TVD(p, q) = 1/2 sum |p - q| between the real data's normalized marginal and (a) the synthetic
data's, (b) the baseline of independent noisy 1-way marginals (what one gets by releasing only the
1-way marginals). Lower is better; synthetic below baseline on 2-way marginals means the released
correlations carry information.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from dpsql.release.marginals import marginal


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    """Total-variation distance of two count vectors, each normalized (empty -> uniform).

    >>> tvd(np.array([1, 1]), np.array([2, 0]))
    0.5
    """
    a = _normalized(p)
    b = _normalized(q)
    return float(0.5 * np.abs(a - b).sum())


def _normalized(x: np.ndarray) -> np.ndarray:
    v = np.clip(np.asarray(x, dtype=np.float64).reshape(-1), 0, None)
    s = v.sum()
    return v / s if s > 0 else np.full(v.shape, 1.0 / max(1, v.size))


@dataclass(frozen=True)
class QualityReport:
    """TVDs vs the real data: {column or "a,b": (synthetic, independent baseline)}."""

    one_way: dict[str, tuple[float, float]]
    two_way: dict[str, tuple[float, float]]

    @staticmethod
    def _mean(d: dict[str, tuple[float, float]], k: int) -> float:
        return float(np.mean([v[k] for v in d.values()])) if d else 0.0

    def summary(self) -> dict[str, float]:
        return {
            "mean_1way_tvd_synthetic": self._mean(self.one_way, 0),
            "mean_1way_tvd_baseline": self._mean(self.one_way, 1),
            "mean_2way_tvd_synthetic": self._mean(self.two_way, 0),
            "mean_2way_tvd_baseline": self._mean(self.two_way, 1),
        }

    def as_json(self) -> dict[str, object]:
        return {
            "warning": "computed on the real data: owner only, never release this report",
            "summary": self.summary(),
            "one_way": {k: {"synthetic": v[0], "baseline": v[1]} for k, v in self.one_way.items()},
            "two_way": {k: {"synthetic": v[0], "baseline": v[1]} for k, v in self.two_way.items()},
        }


def quality_report(
    names: Sequence[str],
    shape: Sequence[int],
    real_idx: np.ndarray,
    real_n: np.ndarray,
    synthetic: np.ndarray,
    one_way_noisy: Sequence[np.ndarray],
) -> QualityReport:
    """Compare synthetic rows (bin indices) and the independent baseline with the real cells."""
    ones = np.ones(len(synthetic), dtype=np.int64)
    one: dict[str, tuple[float, float]] = {}
    for c, name in enumerate(names):
        real = marginal(real_idx, real_n, shape, (c,))
        syn = marginal(synthetic, ones, shape, (c,))
        one[name] = (tvd(real, syn), tvd(real, one_way_noisy[c]))
    two: dict[str, tuple[float, float]] = {}
    for i, j in combinations(range(len(names)), 2):
        real = marginal(real_idx, real_n, shape, (i, j))
        syn = marginal(synthetic, ones, shape, (i, j))
        base = np.outer(_normalized(one_way_noisy[i]), _normalized(one_way_noisy[j]))
        two[f"{names[i]},{names[j]}"] = (tvd(real, syn), tvd(real, base))
    return QualityReport(one, two)

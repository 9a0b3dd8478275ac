"""DP partition selection for GROUP BY keys that are not declared public (Wilson et al. 2020).

Each privacy unit touches at most ``max_groups`` groups (k). The number of distinct units per group
gets discrete Laplace noise of scale b = k / epsilon (L1 sensitivity k; the sampled scale is
rounded up), and a group is released only when the noisy count reaches the threshold tau: the
smallest integer with

    P(Z >= tau - 1) = r**(tau - 1) / (1 + r) <= delta / k,     r = exp(-1 / b).

Privacy map, (epsilon, delta)-DP for neighbours differing in one unit: a group whose only
contributor is that unit has true count 1 and is released with probability
P(1 + Z >= tau) <= delta / k; the unit has at most k such groups, so some of them is released with
probability <= delta. On every other group the decisions are post-processing of epsilon-DP
(discrete Laplace, L1 sensitivity k) noisy counts. Whether a key appears is the only output here;
releasing the noisy counts too is covered by the same epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.dp.accounting import Cost
from dpsql.dp.mechanisms import Laplace


def _upper_tail(scale: Fraction, m: int) -> float:
    """P(Z >= m) for m >= 1 and P(k) ∝ exp(-|k|/scale): r**m / (1 + r)."""
    r = math.exp(-1 / float(scale))
    return math.exp(-m / float(scale)) / (1 + r)


@dataclass(frozen=True)
class PartitionSelection:
    """Noisy-threshold selection of groups; see the module docstring for the privacy map."""

    epsilon: Fraction
    delta: Fraction
    max_groups: int

    def __post_init__(self) -> None:
        if self.epsilon <= 0 or not 0 < self.delta < 1 or self.max_groups < 1:
            raise ValueError(
                "partition selection needs epsilon > 0, 0 < delta < 1, max_groups >= 1"
            )

    @property
    def mechanism(self) -> Laplace:
        return Laplace(Fraction(self.max_groups), Fraction(self.epsilon))

    @property
    def threshold(self) -> int:
        """The smallest tau with P(Z >= tau - 1) <= delta / max_groups (float slack widened)."""
        b = self.mechanism.noise_scale
        per_group = float(self.delta) / self.max_groups * (1 - 1e-9)
        r = math.exp(-1 / float(b))
        m = max(1, math.ceil(float(b) * math.log(1 / (per_group * (1 + r)))) - 1)
        while _upper_tail(b, m) > per_group:
            m += 1
        while m > 1 and _upper_tail(b, m - 1) <= per_group:
            m -= 1
        return m + 1

    @property
    def cost(self) -> Cost:
        return Cost(epsilon=Fraction(self.epsilon), delta=Fraction(self.delta))

    def keep(self, unit_counts: np.ndarray) -> np.ndarray:
        """Boolean mask of the groups to release (unit_counts: distinct units per group, >= 1)."""
        noisy = self.mechanism.release(np.asarray(unit_counts, dtype=np.float64))
        return np.asarray(noisy >= self.threshold)

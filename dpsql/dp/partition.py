"""DP partition selection for GROUP BY keys that are not declared public (Wilson et al. 2020).

Each privacy unit touches at most ``max_groups`` groups. The number of distinct units per group gets
discrete Laplace noise of scale b = max_groups / epsilon (L1 sensitivity max_groups), and a group is
released only when the noisy count reaches the threshold

    tau = 1 + ceil(b · ln(max_groups / delta)).

A group whose only contributor is the added unit has true count 1, so it is released with
probability P(Z >= tau - 1) <= exp(-(tau - 1)/b) <= delta / max_groups; over the unit's at most
max_groups groups that is <= delta. Groups present in both neighbours see epsilon-DP counts.
Privacy map: (epsilon, delta)-DP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.dp.accounting import Cost
from dpsql.dp.mechanisms import Laplace


@dataclass(frozen=True)
class PartitionSelection:
    epsilon: Fraction
    delta: Fraction
    max_groups: int

    def __post_init__(self) -> None:
        if self.epsilon <= 0 or not 0 < self.delta < 1 or self.max_groups < 1:
            raise ValueError("partition selection needs epsilon > 0, 0 < delta < 1")

    @property
    def mechanism(self) -> Laplace:
        return Laplace(Fraction(self.max_groups), Fraction(self.epsilon))

    @property
    def threshold(self) -> int:
        b = float(self.mechanism.scale)
        return 1 + math.ceil(b * math.log(self.max_groups / float(self.delta)) + 1e-9)

    @property
    def cost(self) -> Cost:
        return Cost(epsilon=Fraction(self.epsilon), delta=Fraction(self.delta))

    def keep(self, unit_counts: np.ndarray) -> np.ndarray:
        """Boolean mask of the groups to release."""
        noisy = self.mechanism.release(np.asarray(unit_counts, dtype=np.float64))
        return np.asarray(noisy >= self.threshold)

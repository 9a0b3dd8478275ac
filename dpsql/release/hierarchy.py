"""Range queries over an ordered column: a tree of noisy counts made consistent (Hay et al. 2010).

The column's n bins (leaves, in order) are padded with empty bins to B^h and grouped into a B-ary
tree: level 0 is the total, level h the leaves; each node counts the rows of its interval. Every
node is measured with noise; the released leaves are the least-squares (here: ordinary, the
nodes' variances being equal) estimate consistent with the whole tree, computed in two passes
(Hay, Rastogi, Miklau & Suciu, VLDB 2010, Theorem 3):

* bottom-up, for a node at height i (leaves: 1) with noisy count y and children z_c:
  z = (B^i - B^(i-1)) / (B^i - 1) y + (B^(i-1) - 1) / (B^i - 1) sum_c z_c;
* top-down, u_root = z_root, and for a child c of v: u_c = z_c + (u_v - sum_c' z_c') / B.

A range of bins is then the sum of its consistent leaves: built from O(B log_B n) nodes, its
error grows like log(n)^(3/2) instead of sqrt(width) (flat histogram).

Privacy: the counts are contribution-bounded per unit (at most R rows per unit in all,
``per_unit``), so each level's vector of counts moves by at most R in L1 and in L2. Pure epsilon:
discrete Laplace of scale (h + 1) R / epsilon on every node (epsilon / (h + 1) per level,
sequential composition), epsilon-DP. delta > 0: discrete Gaussian with rho / (h + 1) per level,
rho-zCDP. The consistency step and every range sum are post-processing.

On few bins a tree loses to the flat histogram (every level costs a share of the budget): the
plan compares, by the exact mean range variance (data-independent), every B in BRANCHINGS and
the flat histogram (the leaves alone, the whole budget), and takes the best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.dp.accounting import Cost, epsilon_to_rho, sequential
from dpsql.dp.mechanisms import Gaussian, Laplace, Mechanism

BRANCHINGS = (2, 4, 8, 16, 32)


@dataclass(frozen=True)
class TreePlan:
    """The tree over ``n`` leaves: branching B, height h (levels 0..h), one mechanism per level."""

    n: int
    branching: int
    height: int
    mechanism: Mechanism
    top: int = 0  # the first measured level: 0 the root; ``height`` a flat histogram

    @property
    def leaves(self) -> int:
        return int(self.branching**self.height)

    @property
    def levels(self) -> int:
        return self.height - self.top + 1

    @property
    def flat(self) -> bool:
        return self.top == self.height

    @property
    def cost(self) -> Cost:
        return sequential([self.mechanism.cost] * self.levels)


MAX_OPERATOR = 4_000_000  # leaves x nodes of the dense operator used for the exact error


def exact_size(plan: TreePlan) -> bool:
    """Whether the exact range error can be computed (dense leaves x nodes operator)."""
    nodes: int = sum(plan.branching**level for level in range(plan.top, plan.height + 1))
    return plan.leaves * nodes <= MAX_OPERATOR


def height_for(n: int, branching: int) -> int:
    h = 0
    while branching**h < n:
        h += 1
    return h


def plan_tree(
    n: int,
    epsilon: Fraction,
    delta: Fraction,
    rows_bound: int,
    branching: int | None = None,
    flat: bool = False,
) -> TreePlan:
    """The plan for ``n`` ordered bins; ``branching`` None: among the trees (every B of
    BRANCHINGS) and the flat histogram, the one with the smallest mean range variance
    (:func:`mean_range_variance`, data-independent); ``flat``: the bins alone, whole budget."""
    if branching is None:
        plans = [plan_tree(n, epsilon, delta, rows_bound, b) for b in BRANCHINGS]
        plans.append(plan_tree(n, epsilon, delta, rows_bound, 2, flat=True))
        small = [p for p in plans if exact_size(p)]
        if not small:  # too large to compare exactly: 16 (Qardaji, Yang & Li, VLDB 2013)
            return plan_tree(n, epsilon, delta, rows_bound, 16)
        return min(small, key=mean_range_variance)
    h = height_for(n, branching)
    top = h if flat else 0
    levels = h - top + 1
    r = Fraction(rows_bound)
    if delta == 0:
        mech: Mechanism = Laplace(sensitivity=r, epsilon=epsilon / levels)
    else:
        mech = Gaussian(sensitivity=r, rho=epsilon_to_rho(epsilon, delta) / levels)
    return TreePlan(n, branching, h, mech, top)


def tree_counts(plan: TreePlan, leaves: np.ndarray) -> list[np.ndarray]:
    """Exact counts of the measured levels (``top`` first; level 0 is the total), leaves padded
    with zeros."""
    x = np.zeros(plan.leaves, dtype=np.int64)
    x[: plan.n] = np.asarray(leaves, dtype=np.int64)
    levels = [x]
    for _ in range(plan.height - plan.top):
        levels.append(levels[-1].reshape(-1, plan.branching).sum(axis=1))
    return levels[::-1]


def measure_tree(plan: TreePlan, leaves: np.ndarray) -> list[np.ndarray]:
    """Noisy counts of every node (the only step reading the bounded counts)."""
    return [
        np.asarray(plan.mechanism.release(c.astype(np.float64)), dtype=np.float64)
        for c in tree_counts(plan, leaves)
    ]


def consistent_leaves(plan: TreePlan, noisy: list[np.ndarray]) -> np.ndarray:
    """The least-squares consistent leaves (Hay et al.'s two passes, each subtree under a
    measured top node on its own), the first n of them. ``noisy[k]`` is level top + k."""
    b, h = plan.branching, plan.levels - 1  # levels relative to the top
    z: list[np.ndarray] = [np.empty(0)] * (h + 1)
    z[h] = np.asarray(noisy[h], dtype=np.float64)
    for level in range(h - 1, -1, -1):
        i = h - level + 1
        up = z[level + 1].reshape(-1, b).sum(axis=1)
        z[level] = ((b**i - b ** (i - 1)) * noisy[level] + (b ** (i - 1) - 1) * up) / (b**i - 1)
    u = z[0]
    for level in range(1, h + 1):
        sums = z[level].reshape(-1, b).sum(axis=1)
        u = z[level] + np.repeat((u - sums) / b, b)
    return np.asarray(u[: plan.n])


def leaf_operator(plan: TreePlan) -> np.ndarray:
    """The matrix L (leaves x nodes) with consistent leaves = L y (the estimator is linear)."""
    sizes = [plan.branching**level for level in range(plan.top, plan.height + 1)]
    total = sum(sizes)
    cols = []
    for k in range(total):
        unit, start = [], 0
        for s in sizes:
            v = np.zeros(s)
            if start <= k < start + s:
                v[k - start] = 1.0
            unit.append(v)
            start += s
        cols.append(consistent_leaves(plan, unit))
    return np.stack(cols, axis=1)


def mean_range_variance(plan: TreePlan) -> float:
    """The variance of a range count from the consistent leaves, averaged over all n(n+1)/2
    ranges of bins. With P_k the k-th prefix sum of L's rows (P_0 = 0), the range (a, b] has
    variance var ||P_b - P_a||²; summed over a < b that is
    var (n sum_k ||P_k||² - ||sum_k P_k||²) over k = 0..n (exact, O(n x nodes))."""
    op = leaf_operator(plan)
    prefix = np.vstack([np.zeros(op.shape[1]), np.cumsum(op, axis=0)])
    n = plan.n
    total = (n + 1) * float((prefix * prefix).sum()) - float((prefix.sum(axis=0) ** 2).sum())
    return float(plan.mechanism.std) ** 2 * total / (n * (n + 1) / 2)


def flat_range_variance(n: int, mechanism: Mechanism) -> float:
    """The same average for a flat histogram (each bin measured once): var * mean width."""
    mean_width = sum((n - w + 1) * w for w in range(1, n + 1)) / (n * (n + 1) / 2)
    return float(mechanism.std) ** 2 * mean_width


def range_std(plan: TreePlan) -> float:
    """The root-mean-square error of a range count over all ranges (theory)."""
    return math.sqrt(mean_range_variance(plan))

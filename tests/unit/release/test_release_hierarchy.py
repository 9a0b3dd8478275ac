"""The hierarchical release for range queries (no database)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.release.hierarchy import (
    consistent_leaves,
    flat_range_variance,
    leaf_operator,
    mean_range_variance,
    measure_tree,
    plan_tree,
    tree_counts,
)

ALPHA = 1e-6


def _dense(plan):  # type: ignore[no-untyped-def]
    """The tree's measurement matrix (nodes x padded leaves), level 0 first."""
    b, h = plan.branching, plan.height
    return np.vstack([np.kron(np.eye(b**lv), np.ones((1, b ** (h - lv)))) for lv in range(h + 1)])


@pytest.mark.parametrize("n,b", [(9, 3), (16, 2), (10, 4), (1, 2)])
def test_two_passes_are_least_squares(n: int, b: int) -> None:
    plan = plan_tree(n, Fraction(1), Fraction(0), 1, b)
    gen = np.random.default_rng(n)  # test data, not noise
    y = [gen.normal(size=b**lv) * 10 for lv in range(plan.height + 1)]
    ols = np.linalg.lstsq(_dense(plan), np.concatenate(y), rcond=None)[0]
    assert consistent_leaves(plan, y) == pytest.approx(ols[:n], abs=1e-9)


def test_counts_and_consistency() -> None:
    plan = plan_tree(6, Fraction(1), Fraction(0), 1, 2)  # 8 leaves, 2 padded
    levels = tree_counts(plan, np.array([1, 2, 3, 4, 5, 6]))
    assert [lv.tolist() for lv in levels] == [
        [21],
        [10, 11],
        [3, 7, 11, 0],
        [1, 2, 3, 4, 5, 6, 0, 0],
    ]
    exact = [lv.astype(float) for lv in levels]
    assert consistent_leaves(plan, exact) == pytest.approx([1, 2, 3, 4, 5, 6])
    noisy = measure_tree(plan, np.array([1, 2, 3, 4, 5, 6]))
    assert [len(x) for x in noisy] == [1, 2, 4, 8]


def test_default_branching_and_the_gain_over_flat() -> None:
    """For 1,024 bins the exact mean range error picks B = 4 and beats the flat histogram."""
    plan = plan_tree(1024, Fraction(1), Fraction(0), 1)
    assert plan.branching == 4 and plan.height == 5
    flat = plan_tree(1, Fraction(1), Fraction(0), 1, 2).mechanism
    tree, flat_v = mean_range_variance(plan), flat_range_variance(1024, flat)
    assert math.sqrt(tree) < 0.7 * math.sqrt(flat_v)  # measured: 16.6 vs 25.1
    assert plan.cost.epsilon == 1  # 6 levels of epsilon / 6


def test_range_error_formula_matches_simulation() -> None:
    """Property: the mean squared error of a range count over all ranges is the formula's.
    300 releases of a 64-bin tree (B = 4): the mean per-release MSE is within z < 5.3 of the
    formula (CLT, false failure < 1e-7). Twin: the flat histogram's formula at the tree's per-node
    noise (no consistency gain) is far off."""
    plan = plan_tree(64, Fraction(1), Fraction(0), 1, 4)
    true = np.arange(64) * 3
    cum_true = np.concatenate([[0.0], np.cumsum(true)])
    mses = []
    for _ in range(300):
        est = np.concatenate([[0.0], np.cumsum(consistent_leaves(plan, measure_tree(plan, true)))])
        d = est - cum_true
        diff = d[None, :] - d[:, None]
        mses.append(float((np.triu(diff, 1) ** 2).sum() / (64 * 65 / 2)))
    m = np.array(mses)
    se = m.std(ddof=1) / math.sqrt(m.size)
    assert abs(m.mean() - mean_range_variance(plan)) / se < stats.norm.isf(ALPHA / 10)
    assert abs(m.mean() - flat_range_variance(64, plan.mechanism)) / se > 10
    assert leaf_operator(plan).shape == (64, 1 + 4 + 16 + 64)


def test_few_bins_are_released_flat() -> None:
    """On 100 bins no tree beats the flat histogram on the mean range error: the plan is flat
    (the leaves alone, the whole budget: epsilon-DP with one level)."""
    plan = plan_tree(100, Fraction(1), Fraction(0), 2)
    assert plan.flat and plan.levels == 1 and plan.cost.epsilon == 1
    flat = plan_tree(1, Fraction(1), Fraction(0), 2, 2).mechanism
    assert mean_range_variance(plan) == pytest.approx(flat_range_variance(100, flat))
    noisy = measure_tree(plan, np.arange(100))
    assert len(noisy) == 1 and consistent_leaves(plan, noisy).tolist() == noisy[0][:100].tolist()

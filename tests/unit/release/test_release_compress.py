"""Domain compression and AIM's budget bookkeeping (no database, no mbi)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpsql.dp.mechanisms import Gaussian
from dpsql.release.aim import RoundBudget, plan_aim, workload_weights
from dpsql.release.compress import (
    Compression,
    compress_cells,
    compress_measurement,
    expand_rows,
    plan_compression,
)
from dpsql.release.marginals import marginal, measure
from dpsql.release.measurement import Measurement

ALPHA = 1e-6


def test_rare_values_merge_by_noisy_count() -> None:
    m = Measurement((0,), np.array([50.0, 29.9, 30.0, -4.0, 7.0]), 10.0)
    comp = plan_compression([m])
    assert comp.maps[0].tolist() == [0, 2, 1, 2, 2]  # kept: 50 and 30 (>= 3 sigma)
    assert comp.shape == (3,)
    assert comp.merged(0).tolist() == [1, 3, 4]
    # one rare value alone is not merged (nothing to gain)
    one = plan_compression([Measurement((0,), np.array([50.0, 1.0, 40.0]), 10.0)])
    assert one.maps[0].tolist() == [0, 1, 2] and one.merged(0).size == 0


def test_compressed_cells_and_measurement() -> None:
    comp = Compression((np.array([0, 1, 1, 1]), np.array([0, 1])), (np.zeros(4), np.zeros(2)))
    idx = np.array([[0, 0], [1, 1], [2, 1], [3, 0]])
    n = np.array([5, 6, 7, 8])
    cidx, cn = compress_cells(comp, idx, n)
    dense = marginal(cidx, cn, comp.shape, (0, 1))
    assert dense.tolist() == [[5, 0], [8, 13]]
    assert cn.sum() == n.sum()
    m = compress_measurement(comp, Measurement((0,), np.array([50.0, 1.0, -2.0, 4.0]), 10.0))
    # the merged cell is (1 - 2 + 4) / sqrt(3), measured through weights 1/sqrt(3): std unchanged
    assert m.noisy == pytest.approx([50.0, 3 / np.sqrt(3)])
    assert m.weights is not None and m.weights == pytest.approx([1.0, 1 / np.sqrt(3)])
    assert m.std == 10.0


def test_compressed_measurement_noise_has_the_stated_std() -> None:
    """Property: a merged cell's value weights*(sum of k true counts) + noise has noise std sigma.
    Chi-square variance test over 20,000 draws (false failure ALPHA); a twin that forgets the
    1/sqrt(k) scaling (noise std sigma sqrt(k) = 2 sigma) is rejected."""
    g = Gaussian(Fraction(1), Fraction(1, 8))  # sigma = 2
    k, draws = 4, 20_000
    comp = Compression((np.array([0, 1, 1, 1, 1]),), (np.zeros(5),))
    res = []
    for _ in range(draws // 500):
        for row in g.release(np.zeros((500, 5))):
            cm = compress_measurement(comp, Measurement((0,), row, g.std))
            res.append(cm.noisy[1])
    res_a = np.asarray(res)
    stat = (draws - 1) * res_a.var(ddof=1) / g.std**2
    lo, hi = stats.chi2.ppf(ALPHA / 2, draws - 1), stats.chi2.ppf(1 - ALPHA / 2, draws - 1)
    assert lo <= stat <= hi, stat
    broken = res_a * np.sqrt(k)  # the merged sum without the scaling
    assert not lo <= (draws - 1) * broken.var(ddof=1) / g.std**2 <= hi


def test_expanded_values_follow_the_noisy_counts() -> None:
    """Property: a merged value expands to original value v with probability fill[v]/sum(fill).
    Chi-square over 30,000 rows (false failure ALPHA); uniform expansion (a twin) is rejected."""
    comp = plan_compression([Measurement((0,), np.array([90.0, 1.0, 3.0, 6.0, -2.0]), 10.0)])
    rows = np.zeros((30_000, 1), dtype=np.int64) + comp.maps[0][1]  # all the merged value
    out = expand_rows(comp, rows)[:, 0]
    counts = np.bincount(out, minlength=5)
    assert counts[0] == 0 and counts[4] == 0  # kept value never drawn; negative count never
    p = np.array([1.0, 3.0, 6.0]) / 10
    assert stats.chisquare(counts[1:4], p * len(out)).pvalue > ALPHA
    assert stats.chisquare(counts[1:4], np.full(3, len(out) / 3)).pvalue < ALPHA


def test_compression_lowers_noise_per_merged_cell_on_a_sparse_column() -> None:
    """A 16-value column with its mass on 3 values: compression keeps those 3 and merges the 13
    empty ones, so a 2-way marginal with it has 4 x k cells, not 16 x k. sigma² = 1/50: an empty
    value is kept only if its noise is >= 1 (P <= 13 exp(-25) < 1e-9)."""
    g = Gaussian(Fraction(1), Fraction(25))
    true = np.array([400, 300, 200] + [0] * 13)
    comp = plan_compression([measure(g, true, (0,))])
    assert comp.shape == (4,)
    assert comp.merged(0).tolist() == list(range(3, 16))


def test_aim_weights_and_plan() -> None:
    w = workload_weights(4)
    assert w[(0,)] == 3 and w[(0, 1)] == 6 and len(w) == 4 + 6
    plan = plan_aim(["a", "b", "c"], [3, 3, 3], Fraction(1), 2)
    assert plan.rounds == 12
    gs = plan.one_way()
    assert sum(g.rho for g in gs) == Fraction(1, 2)  # half the budget on the 1-way marginals
    assert gs[0].rho == gs[1].rho == gs[2].rho  # equal domains, equal shares
    rm, rs = plan.first_round()
    assert (rm + rs) * plan.rounds == Fraction(1, 2) and rm == 9 * rs
    assert all(g.sensitivity == 2 for g in gs)


def test_column_shares_follow_the_domain_sizes() -> None:
    """rho_c ∝ n_c^(2/3), summing to exactly the budget: a 16-value column gets 4^(2/3) ~ 2.52x
    a 4-value one's share, and 8^(2/3) = 4x a 2-value one's."""
    from dpsql.release.aim import column_shares

    w = column_shares((2, 16, 4, 8))
    assert sum(w) == 1
    assert abs(float(w[1] / w[2]) - 4 ** (2 / 3)) < 1e-3
    assert abs(float(w[1] / w[0]) - 4.0) < 1e-3
    plan = plan_aim(["a", "b"], [2, 16], Fraction(1, 3), 1)
    assert sum(g.rho for g in plan.one_way(Fraction(1, 5))) == Fraction(1, 5)
    small = plan.one_way(Fraction(1, 5))
    assert small[0].std > small[1].std  # the small column gets more noise
    assert plan.one_way()[0].rho == plan.one_way()[1].rho == Fraction(1, 12)  # AIM's start: even


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=400))
def test_aim_never_spends_more_than_rho(anneals: list[bool]) -> None:
    """Whatever the (data-dependent, released-values-only) annealing decisions, the rounds'
    costs sum to exactly rho when AIM stops, and never exceed it on the way."""
    plan = plan_aim(["a", "b", "c", "d"], [2] * 4, Fraction(3, 7), 1)
    b = RoundBudget(plan.rho, sum(g.rho for g in plan.one_way()), *plan.first_round())
    for anneal in anneals:
        last = b.next_round()
        assert b.used <= plan.rho and b.measure > 0 and b.select > 0
        if last:
            assert b.used == plan.rho
            return
        if anneal:
            b.measure, b.select = b.measure * 4, b.select * 4
    assert b.used <= plan.rho


def test_decide_and_baseline_rows() -> None:
    from dpsql.release.compare import Comparison, ReleaseWithheld, baseline_rows, decide

    better, worse = Comparison(12.0, 5.0, 3), Comparison(-3.0, 5.0, 3)
    assert decide(None, "stop") == "model" and decide(better, "stop") == "model"
    assert decide(worse, "baseline") == "baseline" and decide(worse, "publish") == "model"
    with pytest.raises(ReleaseWithheld, match="would not beat") as e:
        decide(worse, "stop")
    assert e.value.sqlstate == "55000"
    rows = baseline_rows([np.array([3.0, -1.0, 1.0]), np.array([0.0, 0.0])], 40_000)
    assert rows.shape == (40_000, 2)
    c0 = np.bincount(rows[:, 0], minlength=3)
    assert c0[1] == 0  # a negative count is never drawn
    # P(value 0) = 3/4: 40,000 draws within 6 standard deviations (false failure < 1e-8)
    assert abs(c0[0] / 40_000 - 0.75) < 6 * np.sqrt(0.75 * 0.25 / 40_000)
    assert set(np.unique(rows[:, 1])) <= {0, 1}  # all-zero marginal: uniform


def test_rounded_rows_keep_the_one_way_counts_and_pair_at_random() -> None:
    """The release's baseline rows: each column's counts are the clipped marginal scaled to the
    row count and rounded (deterministic up to ties), and columns are paired at random.
    Pairing: with 20,000 rows of two fair binary columns, the count of (0, 0) is hypergeometric
    with mean 5,000 and sd ~ 35.4; 6 sd is a false failure < 1e-8. A twin that does not shuffle
    (both columns sorted) puts all 10,000 rows in (0, 0) and is caught."""
    from dpsql.release.compare import rounded_rows

    rows = rounded_rows([np.array([3.0, -1.0, 1.0]), np.array([2.5, 2.5]), np.array([0.0])], 9)
    assert np.bincount(rows[:, 0], minlength=3).tolist() in ([7, 0, 2], [6, 0, 3])
    assert sorted(np.bincount(rows[:, 1], minlength=2).tolist()) == [4, 5]
    assert rows[:, 2].tolist() == [0] * 9  # an all-zero marginal: uniform over its values
    big = rounded_rows([np.array([1.0, 1.0]), np.array([1.0, 1.0])], 20_000)
    both0 = int(((big[:, 0] == 0) & (big[:, 1] == 0)).sum())
    assert abs(both0 - 5_000) < 6 * np.sqrt(20_000 * 0.25 * 0.5 * 0.5 / (1 - 1 / 20_000))
    twin = np.sort(big, axis=0)
    assert int(((twin[:, 0] == 0) & (twin[:, 1] == 0)).sum()) == 10_000


def test_small_data_rule_reads_the_noisy_total_only() -> None:
    """Small data iff N, the inverse-variance weighted mean of the noisy 1-way sums (unclipped:
    a negative noisy count counts), is below small_rule d sigma_full, sigma_full =
    R sqrt(d / (2 rho)): with d = 2, R = 1, rho = 1/200, sigma_full = sqrt(200) ~ 14.1."""
    from dpsql.release.aim import SMALL_DATA, small_data

    plan = plan_aim(["a", "b"], [2, 2], Fraction(1, 200), 1)
    t = SMALL_DATA * 2 * math.sqrt(200)
    row = lambda total, std=1.0: Measurement((0,), np.array([total + 50, -50.0]), std)  # noqa: E731
    assert small_data(plan, [row(t - 1), row(t - 1)])
    assert not small_data(plan, [row(t + 1), row(t + 1)])
    # weights 1/(n_c sigma_c²): a column 10x noisier counts 100x less
    assert not small_data(plan, [row(t + 10), row(0.0, 10.0)])  # ~ t + 7; unweighted t / 2
    assert small_data(plan, [row(t + 60), row(0.0, 1.0)])
    big = plan_aim(["a", "b"], [2, 2], Fraction(1, 200), 4)  # R = 4: 4x the noise
    assert small_data(big, [row(t + 1), row(t + 1)])

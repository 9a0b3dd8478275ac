"""Empirical privacy audits of the release mechanisms' new steps (no database, no mbi).

Property (as in ``test_audit_mechanisms.py``): the lower confidence bound on the realized epsilon
(level 1 - 1e-6 per test, events fixed in advance and observed on the mechanism's *output*) stays
at or below the claimed epsilon, so a correct mechanism fails with probability <= 1e-6. Each has a
deliberately broken twin on the same neighbours that the audit must flag:

* domain compression: whether a value is merged, on neighbours whose true count straddles the
  threshold; twin: compression decided by the true counts;
* AIM's selection: which marginal the exponential mechanism picks when a unit moves one
  candidate's score; twin: the contribution bound under-declared (R = 1 for units of 4 rows);
* AIM's measurement: a round's noisy marginal when a unit adds R rows to one cell; twin: the
  round mechanism with the bound under-declared;
* the comparison with the baseline: its noisy statistic when a unit moves it the most it can;
  twin: the bound under-declared;
* the hierarchy (range release): the consistent leaves' total when a unit adds R rows to a bin;
  twin: the bound under-declared.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpsql.dp.accounting import rho_to_epsilon
from dpsql.dp.mechanisms import Gaussian
from dpsql.release.aim import plan_aim, round_mechanism, select_marginal
from dpsql.release.compress import plan_compression
from dpsql.release.marginals import SCORE_GRID, measure
from dpsql.release.measurement import Measurement
from tests.dp_audit.auditing import epsilon_lower_bound

N = 100_000


def _bound(hits_d: int, hits_d2: int, n: int, delta: float = 0.0) -> float:
    return max(
        epsilon_lower_bound(hits_d, n, hits_d2, n, delta, alpha=5e-7),
        epsilon_lower_bound(hits_d2, n, hits_d, n, delta, alpha=5e-7),
    )


def _tight_delta(sigma2: float, shift: int, eps: float) -> float:
    """delta(eps) of the discrete Gaussian with sigma² for neighbours ``shift`` apart (exact sum)."""
    width = int(40 * math.sqrt(sigma2)) + 40
    ks = np.arange(-width, width + shift + 1)
    p0 = np.exp(-(ks.astype(float) ** 2) / (2 * sigma2))
    p1 = np.exp(-((ks - shift).astype(float) ** 2) / (2 * sigma2))
    return float(np.clip(p1 / p1.sum() - math.exp(eps) * p0 / p0.sum(), 0, None).sum())


# Compression. A 3-value column: value 0 has true count 2 on D and 3 on D' (one row more; R = 1),
# values 1 and 2 are empty. The 1-way measurement has sigma = 1 (rho = 1/2): value 0 is kept when
# its noisy count is >= 3 sigma = 3. Released: whether value 0 is merged. The guarantee is the
# measurement's: (1, delta(1)) with the discrete Gaussian's tight delta(1) ~ 0.38 for a shift of
# one sigma; P_D(kept) ~ 0.16 and P_D'(kept) ~ 0.5, so the bound reads below 0 (20,000 draws). Twin: the
# decision taken on the true counts keeps value 0 never on D and always on D': epsilon_lb > 7.
COMPRESS = Gaussian(Fraction(1), Fraction(1, 2))


def _kept(true0: int, n: int, broken: bool = False) -> int:
    hits = 0
    for noisy in COMPRESS.release(np.tile([float(true0), 0.0, 0.0], (n, 1))):
        seen = np.array([float(true0), 0.0, 0.0]) if broken else noisy
        comp = plan_compression([Measurement((0,), seen, COMPRESS.std)])
        hits += 0 not in comp.merged(0)
    return hits


def _compression_eps(n: int, broken: bool = False) -> float:
    delta = _tight_delta(float(COMPRESS.noise_sigma2), 1, 1.0)
    return _bound(_kept(2, n, broken), _kept(3, n, broken), n, delta)


def test_compression_epsilon_not_exceeded() -> None:
    assert _compression_eps(N // 5) <= 1.0


def test_compression_audit_flags_true_count_threshold() -> None:
    assert _compression_eps(N // 20, broken=True) > 1.0


# AIM's selection. Two 2-way candidates of 4 cells with weight 6 (d = 4), noise sigma 0 (no bias
# term): the model's estimate is all zeros, so a candidate's score is 6 * SCORE_GRID * its L1
# count. D: candidate A counts 10 rows, B 14. D': one unit adds R = 4 rows to A (14). epsilon =
# 1: P(A) moves from 1 / (1 + e^(epsilon * 4 / (2 * 4))) = 0.38 to 0.5; the bound reads < 0.5.
# Twin (rows_bound = 1 declared, units of 4 rows): scores are scaled 4x too much relative to the
# declared sensitivity, P(A) moves from 0.12 to 0.5: with 10,000 draws epsilon_lb ~ 1.25 > 1.
CANDS = [(0, 1), (2, 3)]
WEIGHTS = {(0, 1): 6, (2, 3): 6}
EST = {c: np.zeros(4) for c in CANDS}


def _picks_a(count_a: int, n: int, rows_bound: int) -> int:
    answers = {(0, 1): np.array([count_a, 0, 0, 0]), (2, 3): np.array([14, 0, 0, 0])}
    return sum(
        select_marginal(CANDS, answers, EST, WEIGHTS, 0.0, Fraction(1), rows_bound) == (0, 1)
        for _ in range(n)
    )


def _selection_eps(n: int, rows_bound: int) -> float:
    return _bound(_picks_a(10, n, rows_bound), _picks_a(14, n, rows_bound), n)


def test_aim_selection_epsilon_not_exceeded() -> None:
    assert _selection_eps(N // 10, 4) <= 1.0


def test_aim_selection_audit_flags_underdeclared_bound() -> None:
    assert _selection_eps(N // 10, 1) > 1.0


def test_selection_scores_are_weighted_and_bias_corrected() -> None:
    """The score the mechanism sees: w (SCORE_GRID ||x - m||_1 - round(SCORE_GRID sqrt(2/pi)
    sigma |c|)). With sigma so large that every bias dwarfs the errors, the smaller clique wins
    whp (its bias is smaller): P(2-way) <= exp(-(gap) epsilon / (2 Δ)) < 1e-9."""
    answers = {(0,): np.array([5, 5]), (0, 1): np.array([40, 0, 0, 0])}
    est = {(0,): np.zeros(2), (0, 1): np.zeros(4)}
    w = {(0,): 3, (0, 1): 6}
    picks = {
        select_marginal([(0,), (0, 1)], answers, est, w, 1e4, Fraction(1), 1) for _ in range(50)
    }
    assert picks == {(0,)}
    assert SCORE_GRID == 1024


# AIM's measurement. A round's marginal: the plan's round mechanism for rho_m, units of R = 4
# rows. D: a cell counts 0; D': one unit adds its 4 rows. Claim: rho_m-zCDP, so (1, delta(1))
# with the tight delta of the discrete Gaussian for a shift of R; event {noisy >= t} at the
# threshold that attains it. Twin: a plan declaring R = 1 (sigma 4x too small for the shift).
def _measure_eps(rows_bound: int, n: int) -> float:
    plan = plan_aim(["a", "b", "c", "d"], [2] * 4, Fraction(2), rows_bound)
    g = round_mechanism(plan, Fraction(1, 2))
    claimed = round_mechanism(plan_aim(["a"] * 4, [2] * 4, Fraction(2), 4), Fraction(1, 2))
    sigma2 = float(claimed.noise_sigma2)
    delta = _tight_delta(sigma2, 4, 1.0)
    t = 4  # the event {noisy >= 4}: likelihood ratio e^(shift (2k - shift) / (2 sigma²)) >= e
    hit_d = int((measure(g, np.zeros(n), (0,)).noisy >= t).sum())  # n independent cells
    hit_d2 = int((measure(g, np.full(n, 4), (0,)).noisy >= t).sum())
    return _bound(hit_d, hit_d2, n, delta)


def test_aim_measurement_epsilon_not_exceeded() -> None:
    assert _measure_eps(4, N) <= 1.0
    assert rho_to_epsilon(Fraction(1, 2), Fraction(1, 10**6)) > 1  # (1, delta(1)) is the tight one


def test_aim_measurement_audit_flags_underdeclared_bound() -> None:
    assert _measure_eps(1, N) > 1.0


# The comparison with the baseline. Two columns of 2 values (P = 1 pair). The model's marginals
# are fixed (released values): 1-way [10, 10] each (so the baseline has 5 rows in every cell) and
# 2-way [[10, 5], [5, 0]]. D: 10 rows in cell (0, 0); D': one unit adds R = 4 rows to cell (1, 1),
# where the baseline (5) gets 4 rows closer and the model (0) 4 rows further: G drops by 2 R = 8
# rows, the most a unit can move it. Claim: rho-zCDP, rho = 1/2, L2 sensitivity 2 R P (sigma ~ 8
# rows, the claimed sigma of the honest mechanism): (1, delta(1)) with the Gaussian's tight delta(1) ~ 0.13 for a one-sigma shift. Event:
# {noisy G <= G_D - 4}, fixed in advance: P_D ~ 0.31, P_D' ~ 0.69, the bound reads ~ 0.4 < 1.
# Twin: the bound under-declared (R = 1, sigma = 2 rows): P 0.023 vs 0.977, epsilon_lb ~ 3 > 1
# with 1,000 draws each.
_MODEL = {
    (0,): np.array([10.0, 10.0]),
    (1,): np.array([10.0, 10.0]),
    (0, 1): np.array([10.0, 5.0, 5.0, 0.0]),
}


def _comparison_eps(rows_bound: int, n: int) -> float:
    from dpsql.release.compare import compare, comparison_mechanism

    mech = comparison_mechanism(Fraction(1, 2), rows_bound, 2)
    honest = comparison_mechanism(Fraction(1, 2), 4, 2)
    idx_d, n_d = np.array([[0, 0]]), np.array([10])
    idx_d2, n_d2 = np.array([[0, 0], [1, 1]]), np.array([10, 4])
    # G on D: cells (0,0) 5 vs 0, (0,1) 5 vs 5, (1,0) 5 vs 5, (1,1) 5 vs 0: 20 - 10 = 10 rows
    threshold = 10 - 4
    hits_d = sum(compare(mech, (2, 2), idx_d, n_d, _MODEL.__getitem__).gap_rows <= threshold
                 for _ in range(n))  # fmt: skip
    hits_d2 = sum(compare(mech, (2, 2), idx_d2, n_d2, _MODEL.__getitem__).gap_rows <= threshold
                  for _ in range(n))  # fmt: skip
    sigma = honest.std  # rows
    return _bound(hits_d, hits_d2, n, _gaussian_delta(8 / sigma, 1.0))


def _gaussian_delta(shift_sigmas: float, eps: float) -> float:
    """delta(eps) of the Gaussian mechanism for a shift of ``shift_sigmas`` standard deviations
    (Balle & Wang 2018); the discrete Gaussian's is no larger (Canonne, Kamath & Steinke 2020)."""
    from scipy.stats import norm

    a, b = shift_sigmas / 2 - eps / shift_sigmas, -shift_sigmas / 2 - eps / shift_sigmas
    return float(norm.cdf(a) - math.exp(eps) * norm.cdf(b))


def test_comparison_epsilon_not_exceeded() -> None:
    assert _comparison_eps(4, 1_000) <= 1.0


def test_comparison_audit_flags_underdeclared_bound() -> None:
    assert _comparison_eps(1, 1_000) > 1.0


# The hierarchy (range release). 16 bins, B = 4 (3 levels), epsilon 1 (Laplace, 1/3 per level).
# D: 10 rows in bin 5; D': one unit adds R = 8 rows there. Released: the consistent leaves; event
# on the released total (their sum) >= 18, fixed in advance. Honest (scale 24 per node): P_D ~
# 0.37 vs P_D' = 0.5, the bound reads ~ 0.05. Twin: the bound under-declared (R = 1, scale 3):
# P_D ~ 0.02 vs 0.5, epsilon_lb ~ 2.4 with 2,000 draws (falling below 1 would take P_D's hit
# count 9 standard deviations above its mean: far below 1e-6).
def _hierarchy_eps(rows_bound: int, n: int) -> float:
    from dpsql.release.hierarchy import consistent_leaves, measure_tree, plan_tree

    plan = plan_tree(16, Fraction(1), Fraction(0), rows_bound, 4)
    d, d2 = np.zeros(16, dtype=np.int64), np.zeros(16, dtype=np.int64)
    d[5], d2[5] = 10, 18

    def hits(x: np.ndarray) -> int:
        return sum(consistent_leaves(plan, measure_tree(plan, x)).sum() >= 18 for _ in range(n))

    return _bound(hits(d), hits(d2), n)


def test_hierarchy_epsilon_not_exceeded() -> None:
    assert _hierarchy_eps(8, 2_000) <= 1.0


def test_hierarchy_audit_flags_underdeclared_bound() -> None:
    assert _hierarchy_eps(1, 2_000) > 1.0


# AIM's 1-way marginals in the small-data regime, each with its column's share of the budget
# (rho_c ∝ n_c^(2/3)). One unit of R = 1 row adds 1 to a cell of every column, so the claim is
# the sum: rho_1 = 1/2 in all (a plan with rho 1). D: the cells count 0; D': 1. Output audited:
# S = sum_c noisy_c / sigma_c² (the claimed sigmas; any fixed function of the outputs is
# post-processing), whose shift is sqrt(2 rho_1) = 1 of its standard deviations, so the claim
# is (1, delta(1)) with the Gaussian's tight delta(1) ~ 0.13; the event is chosen from a selection
# sample of the outputs (``auditing.choose_event``). Twin: every column measured with the whole
# 1-way budget (the split forgotten: rho 3/2 in all, a shift of 1.73 sd): epsilon_lb ~ 2.0 (honest ~ 0.89).
def _one_way_eps(n: int, broken: bool = False) -> float:
    from tests.dp_audit.auditing import choose_event

    plan = plan_aim(["sex", "educ", "race"], [2, 16, 9], Fraction(1), 1)
    honest = plan.one_way(Fraction(1, 2))  # the small-data regime's split of 1/2
    assert sum(g.rho for g in honest) == Fraction(1, 2) and len({g.rho for g in honest}) == 3
    gs = tuple(Gaussian(Fraction(1), Fraction(1, 2)) for _ in honest) if broken else honest
    inv = [1.0 / float(g.noise_sigma2) for g in honest]

    def outputs(count: int, draws: int) -> np.ndarray:
        cells = np.full(draws, float(count))
        return np.sum([w * measure(g, cells, (c,)).noisy for c, (g, w) in enumerate(zip(gs, inv, strict=True))],
                      axis=0)  # fmt: skip

    delta = _gaussian_delta(1.0, 1.0)
    event = choose_event(outputs(0, n // 5), outputs(1, n // 5), delta, n_measure=n)
    return event.epsilon_lower_bound(outputs(0, n), outputs(1, n), delta)


def test_aim_one_way_shares_epsilon_not_exceeded() -> None:
    assert _one_way_eps(N) <= 1.0


def test_aim_one_way_audit_flags_a_forgotten_split() -> None:
    assert _one_way_eps(N // 5, broken=True) > 1.0


# AIM's small-data rule: whether the model measures pairs, decided from the noisy 1-way sums.
# d = 2 columns of 2 values, R = 1, plan rho 1 (the 1-way marginals get 1/2 in all); the
# threshold T = small_rule d sigma_full; D has ceil(T) - 1 rows, D' one more (all in value 0 of
# each column), so the true count straddles T. Released: the regime. Claim: the 1-way
# measurements' (1, delta(1)) (a post-processing of them). Honest: P(small) ~ 1/2 on both sides.
# Twin: the rule applied to the true counts (small on D, never on D'): epsilon_lb ~ 4.8 > 1
def _small_rule_eps(n: int, broken: bool = False) -> float:
    from dpsql.release.aim import small_data
    from tests.dp_audit.auditing import choose_event

    plan = plan_aim(["a", "b"], [2, 2], Fraction(1), 1)
    sigma_full = math.sqrt(plan.d / (2 * float(plan.rho)))
    below = math.ceil(plan.small_rule * plan.d * sigma_full) - 1
    gs = plan.one_way()

    def outputs(rows: int, draws: int) -> np.ndarray:
        exact = np.array([float(rows), 0.0])
        noisy = [g.release(np.tile(exact, draws)).reshape(draws, 2) for g in gs]
        if broken:
            noisy = [np.tile(exact, (draws, 1)) for _ in gs]
        return np.array([
            float(small_data(plan, [Measurement((c,), y[i], g.std) for c, (g, y) in enumerate(zip(gs, noisy, strict=True))]))
            for i in range(draws)
        ])  # fmt: skip

    delta = _gaussian_delta(1.0, 1.0)
    event = choose_event(outputs(below, n // 5), outputs(below + 1, n // 5), delta, n_measure=n)
    return event.epsilon_lower_bound(outputs(below, n), outputs(below + 1, n), delta)


def test_aim_small_data_rule_epsilon_not_exceeded() -> None:
    assert _small_rule_eps(20_000) <= 1.0


def test_aim_small_data_audit_flags_the_true_count() -> None:
    assert _small_rule_eps(2_000, broken=True) > 1.0

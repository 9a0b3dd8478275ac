"""Mechanism objects: privacy maps checked exactly where they can be enumerated, confidence
half-widths checked against exact tails and by coverage, partition thresholds, quantiles and mode.

Statistical checks are one-sided binomial tests at alpha = 1e-6.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.dp.mechanisms import (
    Gaussian,
    Laplace,
    gaussian_half_steps,
    gaussian_tail_bound,
    grid_for,
    laplace_half_steps,
    laplace_tail,
    round_up,
)
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import Mode, Quantile, round_down
from tests.dp_audit.auditing import permute_and_flip_probabilities

ALPHA = 1e-6


@pytest.mark.parametrize(
    "x", [Fraction(1, 3), Fraction(10**12 + 7, 10**12), Fraction(2**30, 3), Fraction(5)]
)
def test_round_up_and_down(x: Fraction) -> None:
    up, down = round_up(x), round_down(x)
    assert down <= x <= up
    assert up.denominator <= 2**20 and down.denominator <= 2**20
    assert up - x <= Fraction(1, 2**20) * max(1, x) and x - down <= Fraction(1, 2**20)


def test_laplace_parameters_and_grid() -> None:
    m = Laplace(Fraction(10), Fraction(1, 3), grid_for(Fraction(30)))
    assert m.scale == 30 and m.cost.epsilon == Fraction(1, 3)
    assert m.noise_scale >= m.scale / m.grid
    out = m.release(np.array([1.0, 2.5, -7.25]))
    assert np.all(np.mod(out / float(m.grid), 1) == 0)  # on the grid
    assert Laplace(Fraction(0), Fraction(1)).release(np.array([2.4]))[0] == 2.0
    with pytest.raises(ValueError):
        m.release(np.array([np.nan]))
    with pytest.raises(ValueError):
        Laplace(Fraction(1), Fraction(0))


def test_gaussian_rounds_sigma_up() -> None:
    g = Gaussian(Fraction(1), Fraction(1, 3) * Fraction(10**12 - 1, 10**12))
    assert g.noise_sigma2 >= g.sigma2 and g.noise_sigma2.denominator <= 2**20
    assert g.cost.rho == g.rho


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(1), Fraction(37, 3), Fraction(2000)])
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-3])
def test_laplace_half_steps_is_the_exact_minimum(scale: Fraction, alpha: float) -> None:
    m = laplace_half_steps(scale, alpha)
    assert laplace_tail(scale, m) <= alpha
    if m > 0:
        assert laplace_tail(scale, m - 1) > alpha * (1 - 1e-9)


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(50), Fraction(10**6)])
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-3])
def test_gaussian_half_steps_is_the_exact_minimum(sigma2: Fraction, alpha: float) -> None:
    s2 = float(sigma2)
    width = int(50 * math.sqrt(s2)) + 50
    ks = np.arange(-width, width + 1)
    pmf = np.exp(-(ks.astype(float) ** 2) / (2 * s2))
    pmf /= pmf.sum()

    def tail(m: int) -> float:
        return float(pmf[np.abs(ks) > m].sum())

    m = gaussian_half_steps(sigma2, alpha)
    assert tail(m) <= alpha
    if m > 0:
        assert tail(m - 1) > alpha * (1 - 1e-6)
    assert tail(m) <= gaussian_tail_bound(sigma2, m) + 1e-12


def test_gaussian_half_steps_bound_branch_is_valid() -> None:
    """Above 10**4 steps of sigma the bound 2 Q(m/sigma) is used; it is at least the exact tail."""
    sigma2 = Fraction(4 * 10**8)
    m = gaussian_half_steps(sigma2, 0.05)
    assert m >= 1.959963 * 2 * 10**4 and gaussian_tail_bound(sigma2, m) <= 0.05


@pytest.mark.parametrize(
    "mech",
    [
        Laplace(Fraction(1), Fraction(1, 2)),
        Laplace(Fraction(5), Fraction(1), grid_for(Fraction(5))),
        Gaussian(Fraction(1), Fraction(1, 8)),
        Gaussian(Fraction(3), Fraction(1, 2), Fraction(1, 64)),
    ],
    ids=["lap-count", "lap-sum", "gauss-count", "gauss-sum"],
)
def test_intervals_cover(mech: Laplace | Gaussian) -> None:
    """P(|released - true| <= half_width) >= confidence, true values off the grid."""
    n, conf = 100_000, 0.9
    true = np.full(n, 3.3)
    inside = int((np.abs(mech.release(true) - true) <= mech.half_width(conf)).sum())
    assert stats.binomtest(inside, n, conf, alternative="less").pvalue > ALPHA
    # the same check on intervals a third as wide (a broken half-width) must reject: they cover
    # ~54% (Laplace) or ~42% (Gaussian) of 1e5 draws, hundreds of standard deviations below 90%
    narrow = int((np.abs(mech.release(true) - true) <= float(mech.half_width(conf)) / 3).sum())
    assert stats.binomtest(narrow, n, conf, alternative="less").pvalue < ALPHA


def test_partition_threshold_is_minimal_and_sound() -> None:
    for eps, delta, k in [(1, 1e-6, 1), (Fraction(1, 2), 1e-9, 4), (3, 1e-5, 10)]:
        ps = PartitionSelection(Fraction(eps), Fraction(delta), k)
        b = float(ps.mechanism.noise_scale)
        r = math.exp(-1 / b)

        def upper(m: int, b: float = b, r: float = r) -> float:
            return math.exp(-m / b) / (1 + r)

        tau = ps.threshold
        assert upper(tau - 1) <= delta / k
        assert tau - 2 < 1 or upper(tau - 2) > delta / k * (1 - 1e-6)
        old = 1 + math.ceil(b * math.log(k / delta))  # the first version's (looser) rule
        assert tau <= old


def test_partition_keep() -> None:
    ps = PartitionSelection(Fraction(1), Fraction(1, 10**6), 1)
    kept = ps.keep(np.array([1] * 1000 + [10_000] * 1000))
    assert not kept[:1000].any() or kept[:1000].mean() < 0.01
    assert kept[1000:].all()


def _neighbours(counts: tuple[int, ...], r: int) -> list[tuple[int, ...]]:
    """Counts after adding 1..r rows anywhere (one unit's rows)."""
    out = []
    for added in itertools.product(range(r + 1), repeat=len(counts)):
        if 0 < sum(added) <= r:
            out.append(tuple(c + a for c, a in zip(counts, added, strict=True)))
    return out


def _quantile_probs(mech: Quantile, counts: tuple[int, ...]) -> np.ndarray:
    u = mech.scaled_utilities(np.array(counts))[0].astype(float) / mech.target.denominator
    coins = np.exp(float(mech.group_epsilon) * (u - u.max()) / (2 * mech.contribution_bound))
    return permute_and_flip_probabilities(coins)


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10), 1])
@pytest.mark.parametrize("r", [1, 2])
def test_quantile_privacy_by_enumeration(q: Fraction, r: int) -> None:
    """Exact output distributions on all small inputs: every neighbour pair within e^epsilon."""
    mech = Quantile(Fraction(q), Fraction(1), Fraction(0), Fraction(3), 3, contribution_bound=r)
    worst = 0.0
    for counts in itertools.product(range(4), repeat=3):
        p = _quantile_probs(mech, counts)
        for nb in _neighbours(counts, r):
            worst = max(worst, float(np.abs(np.log(_quantile_probs(mech, nb) / p)).max()))
    assert worst <= 1.0 + 1e-9


def test_mode_privacy_by_enumeration() -> None:
    mech = Mode(Fraction(1), contribution_bound=2)
    worst = 0.0
    for counts in itertools.product(range(4), repeat=3):
        for nb in _neighbours(counts, 2):
            ps = []
            for c in (counts, nb):
                u = np.array(c, dtype=float)
                gamma = float(mech.group_epsilon) * (u.max() - u) / (2 * mech.contribution_bound)
                ps.append(permute_and_flip_probabilities(np.exp(-gamma)))
            worst = max(worst, float(np.abs(np.log(ps[1] / ps[0])).max()))
    assert worst <= 1.0 + 1e-9


def test_quantile_sampling_matches_exact_distribution() -> None:
    """Chi-square of the vectorized sampler against the enumerated permute-and-flip law."""
    mech = Quantile(Fraction(1, 2), Fraction(2), Fraction(0), Fraction(4), 4, contribution_bound=1)
    counts = (1, 3, 0, 2)
    n = 100_000
    chosen = mech.choose(np.tile(np.array(counts), (n, 1)))
    observed = np.bincount(chosen, minlength=4)
    expected = _quantile_probs(mech, counts) * n
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_quantile_utilities() -> None:
    median = Quantile(Fraction(1, 2), Fraction(1), Fraction(0), Fraction(4), 4)
    # 5 rows: positions 0..4, target t = 2 (bucket 1 holds 1..3); utilities scaled by d = 2
    assert median.scaled_utilities(np.array([1, 3, 0, 1]))[0].tolist() == [-4, 0, -4, -4]
    assert median.midpoints().tolist() == [0.5, 1.5, 2.5, 3.5]


def test_quantile_accuracy_and_shapes() -> None:
    mech = Quantile(Fraction(1, 2), Fraction(1), Fraction(0), Fraction(100), 100)
    counts = np.zeros(100, dtype=np.int64)
    counts[45:56] = 100
    values = mech.release(np.tile(counts, (200, 1)))
    assert values.shape == (200,) and np.median(values) == pytest.approx(50.5, abs=1.0)
    assert isinstance(mech.release(counts), float)
    maximum = Quantile(Fraction(1), Fraction(1), Fraction(0), Fraction(100), 100)
    assert maximum.release(np.zeros(100, dtype=np.int64)) <= 100
    with pytest.raises(ValueError):
        mech.release(np.zeros(99, dtype=np.int64))


def test_mode_finds_clear_winner_and_splits_budget() -> None:
    mode = Mode(Fraction(1), contribution_bound=1, max_groups=4)
    assert mode.group_epsilon == Fraction(1, 4)
    # Permute-and-flip keeps the runner-up (gap 100) only with a coin of probability
    # exp(-epsilon_g * 100 / 2) = exp(-12.5) < 4e-6 per draw, so 11 losses in 100 draws (a false
    # failure) have probability below 1e-40; a uniform choice wins a quarter of the time and fails.
    picks = mode.release(np.tile(np.array([3, 500, 2, 400]), (100, 1)))
    assert (picks == 1).mean() > 0.9
    assert mode.release(np.array([0, 0, 10**15])) == 2  # huge counts take the exact slow path


def test_ratio_bounds_and_split_confidence() -> None:
    from dpsql.dp.mechanisms import ratio_bounds, split_confidence

    assert split_confidence(0.9, 2) == pytest.approx(0.95)
    lo, hi = ratio_bounds(100.0, 10.0, 10.0, 1.0)
    assert lo == pytest.approx(90 / 11) and hi == pytest.approx(110 / 9)
    assert ratio_bounds(5.0, 1.0, 0.5, 1.0) == (-math.inf, math.inf)
    assert ratio_bounds(5.0, 1.0, 0.5, 1.0, clamp=(0.0, 10.0)) == (0.0, 10.0)
    assert ratio_bounds(100.0, 1.0, 10.0, 0.1, clamp=(0.0, 5.0)) == (0.0, 5.0)


def test_rounded_sensitivity() -> None:
    from dpsql.dp.mechanisms import rounded_sensitivity

    assert rounded_sensitivity(Fraction(10), Fraction(1, 8), 2) == Fraction(41, 4)
    l2 = rounded_sensitivity(Fraction(3), Fraction(1, 4), 9, "l2")
    assert Fraction(3) + Fraction(3, 4) < l2 < Fraction(3) + Fraction(3, 4) + Fraction(1, 2**18)
    with pytest.raises(ValueError):
        rounded_sensitivity(Fraction(1), Fraction(1), 1, "linf")


def test_quantile_rank_error_bound_holds() -> None:
    """P(the chosen bucket's positions are farther than rank_error from the target) <= 1 - conf."""
    mech = Quantile(Fraction(1, 2), Fraction(1, 2), Fraction(0), Fraction(50), 50)
    counts = np.full(50, 4, dtype=np.int64)  # 200 rows, target position 99.5
    n, conf = 20_000, 0.9
    bound = mech.rank_error(conf)
    chosen = mech.choose(np.tile(counts, (n, 1)))
    lo_pos, hi_pos = chosen * 4, chosen * 4 + 3
    dist = np.maximum(0, np.maximum(lo_pos - 99.5, 99.5 - hi_pos))
    far = int((dist > bound).sum())
    assert stats.binomtest(far, n, 1 - conf, alternative="greater").pvalue > ALPHA
    assert Mode(Fraction(1)).count_error(0.95, 10) == pytest.approx(2 * math.log(200))


def test_integer_quantile_reports_integers() -> None:
    mech = Quantile(Fraction(1, 2), Fraction(1), Fraction(0), Fraction(100), 10, integer=True)
    assert mech.midpoints().tolist() == [4.0 + 10 * j for j in range(10)]
    with pytest.raises(ValueError):
        Quantile(Fraction(1, 2), Fraction(1), Fraction(0), Fraction(10), 4, integer=True)


def _bucket_values_by_fractions(q: Quantile) -> tuple[list[float], list[float], list[float]]:
    """The reported value and edges of each bucket by per-bucket Fraction arithmetic (the
    definition :func:`dpsql.dp.quantiles._bucket_values` computes in integers)."""
    lo, w, top = Fraction(q.lo), q.width, 1 if q.integer else 0
    if q.integer:
        mid = [float(lo + j * w + (w - 1) // 2) for j in range(q.buckets)]
    else:
        mid = [float(lo + (j + Fraction(1, 2)) * w) for j in range(q.buckets)]
    low = [float(lo + j * w) for j in range(q.buckets)]
    high = [float(lo + (j + 1) * w - top) for j in range(q.buckets)]
    return mid, low, high


def test_quantile_bucket_values_equal_the_fraction_arithmetic() -> None:
    """Midpoints and edges (computed once per bounds and bucket count, in integers over a common
    denominator) are bit for bit the floats of the exact rationals, over bounds of every size
    and denominator; the shared arrays are read-only. Deterministic (a seeded case list)."""
    gen = np.random.default_rng(18)
    dens = [1, 3, 7, 10, 1000, 2**20, 10**9, 12345]
    for _ in range(400):
        b = int(gen.choice([1, 2, 3, 7, 10, 64, 100, 1000]))
        if gen.random() < 0.3:
            lo = Fraction(int(gen.integers(-(10**12), 10**6)))
            hi = lo + b * int(gen.integers(1, 10 ** int(gen.integers(1, 9))))
            q = Quantile(Fraction(1, 2), Fraction(1), lo, hi, b, integer=True)
        else:
            lo = Fraction(int(gen.integers(-(10**9), 10**9)), int(gen.choice(dens)))
            hi = lo + Fraction(int(gen.integers(1, 10**12)), int(gen.choice(dens)))
            q = Quantile(Fraction(1, 2), Fraction(1), lo, hi, b)
        mid, low, high = _bucket_values_by_fractions(q)
        assert q.midpoints().tolist() == mid
        assert q.edges()[0].tolist() == low and q.edges()[1].tolist() == high
    with pytest.raises(ValueError):
        q.midpoints()[0] = 0.0  # shared by every release over the same bounds


def test_quantile_accepts_float_derived_fractions() -> None:
    mech = Quantile(Fraction(0.123456), Fraction(1, 3), Fraction(0), Fraction(10), 10)
    assert mech.target.denominator <= 2**16
    assert 0 <= mech.release(np.arange(10)) <= 10


def test_small_sigma_with_large_denominator_takes_the_exact_path() -> None:
    from dpsql.dp import rng

    sigma2 = Fraction(2**22 + 1, 2**23 + 3)  # 2ab >= 2**48: scalar path, same law
    draws = rng.discrete_gaussian(sigma2, 2000)
    assert set(np.unique(draws)) <= set(range(-6, 7))


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_grid_below_float_range_snaps_to_zero() -> None:
    """A grid under float64's smallest value (a column's range near 1e-300; red-team attempts
    291-292) snaps every value to 0 steps, without 0/0 cast to int64's minimum and its warnings."""
    from dpsql.dp.mechanisms import Laplace

    mech = Laplace(Fraction(1, 10**400), Fraction(1), grid=Fraction(1, 10**402))
    out = mech.release(np.array([0.0, 1e-300]))
    assert out.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(3), Fraction(7, 2)])
@pytest.mark.parametrize("n", [1, 2, 4, 16])
@pytest.mark.parametrize("beta", [0.1, 0.009, 1e-4])
def test_sum_reach_bounds_the_exact_tail(scale: Fraction, n: int, beta: float) -> None:
    """sum_reach(mech, n, beta): P(sum of n noises > t) <= beta, from the exact distribution
    of the sum (the discrete Laplace's pmf convolved n times), and it is not vacuous: at most
    twice the exact quantile plus the snapping (Chernoff is loose at small n, never wrong)."""
    from dpsql.dp.mechanisms import Laplace, sum_reach

    mech = Laplace(Fraction(1), 1 / scale)  # noise_scale = scale steps, grid 1
    k = np.arange(-400, 401)
    r = math.exp(-1 / float(mech.noise_scale))
    pmf = (1 - r) / (1 + r) * r ** np.abs(k)
    total = pmf
    for _ in range(n - 1):
        total = np.convolve(total, pmf)
    ks = np.arange(len(total)) - (len(total) - 1) // 2
    t = sum_reach(mech, n, beta)
    assert total[ks > t - n / 2].sum() <= beta  # the noise alone; snapping adds <= n / 2
    exact = float(ks[np.flatnonzero(np.cumsum(total) >= 1 - beta)[0]])
    assert t <= 2 * exact + n + 2, (t, exact)


def test_end_utilities_with_offsets_per_group_are_each_groups_own() -> None:
    """Quantile.end_utilities(counts, offsets) (quantile_ends: one selection over every group's
    row, each with its own offset) equals, row for row, each group's end_utilities at its own
    offset: the candidates and their exact utilities are the same, and permute-and-flip over
    a matrix flips each row's own coins and picks among each row's own heads (one uniform per
    row: quantiles.choose_among_heads), so every group's end has the same law as before."""
    g = np.random.default_rng(11)
    for _ in range(150):
        buckets, groups = int(g.integers(1, 30)), int(g.integers(1, 7))
        counts = g.integers(0, 40, (groups, buckets)) * (g.random((groups, buckets)) < 0.6)
        q = Fraction(int(g.integers(0, 101)), 100)
        r = int(g.integers(1, 30))
        for sign in (1, -1):
            end = Quantile(q, Fraction(1, 2), Fraction(0), Fraction(90), buckets,
                           contribution_bound=r, offset=sign * int(g.integers(1, 60)))  # fmt: skip
            offsets = sign * g.integers(1, 500, groups)
            rows = [
                replace(end, offset=int(k)).end_utilities(counts[i : i + 1])
                for i, k in enumerate(offsets)
            ]
            assert (end.end_utilities(counts, offsets) == np.vstack(rows)).all()
            same = np.full(groups, end.offset)
            assert (end.end_utilities(counts, same) == end.end_utilities(counts)).all()
    end = Quantile(Fraction(1, 2), Fraction(1), Fraction(0), Fraction(4), 4, offset=3)
    with pytest.raises(ValueError, match="sign"):
        end.end_utilities(np.ones((2, 4), dtype=np.int64), np.array([3, -3]))

"""Distribution tests for the exact samplers of dpsql.dp.rng.

Property: each sampler's output follows its stated probability mass function. Each test is a
chi-square goodness-of-fit test at alpha = 1e-6 (so a correct sampler fails one test with
probability 1e-6), on bins of at least ~50 expected draws. The same check on a deliberately broken
sampler (scale or sigma halved) must reject; with 2e5 draws its p-value is astronomically small,
so that test fails to catch the broken sampler with probability far below 1e-6.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.dp import rng

ALPHA = 1e-6
N = 200_000


def _chi_square_p(draws: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> float:
    """p-value of the draws against ``pmf`` on integer ``support`` (mass outside is one tail bin
    each side), with bins merged until each expects >= 50 draws."""
    lo_tail = hi_tail = max(0.0, 1.0 - float(pmf.sum())) / 2  # mass outside the window
    n = draws.size
    edges: list[int] = []  # bin i covers support values in [edges[i], edges[i+1])
    probs: list[float] = []
    acc = lo_tail
    start = int(support[0])
    for k, p in zip(support, pmf, strict=True):
        acc += p
        if acc * n >= 50:
            edges.append(start)
            probs.append(acc)
            start, acc = int(k) + 1, 0.0
    probs[-1] += acc + hi_tail
    edges.append(start)
    idx = np.searchsorted(np.array(edges[1:-1]), draws, side="right")
    observed = np.bincount(idx, minlength=len(probs))
    expected = np.array(probs) * n
    stat = float(((observed - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(stat, len(probs) - 1))


def laplace_pmf(scale: Fraction, support: np.ndarray) -> np.ndarray:
    r = math.exp(-1 / float(scale))
    return (1 - r) / (1 + r) * np.power(r, np.abs(support).astype(np.float64))


def gaussian_pmf(sigma2: Fraction, support: np.ndarray) -> np.ndarray:
    s2 = float(sigma2)
    width = int(40 * math.sqrt(s2)) + 10
    full = np.arange(-width, width + 1)
    z = np.exp(-(full.astype(np.float64) ** 2) / (2 * s2)).sum()
    return np.exp(-(support.astype(np.float64) ** 2) / (2 * s2)) / z


def _window(spread: float) -> np.ndarray:
    w = int(30 * spread) + 5
    return np.arange(-w, w + 1)


def laplace_p(draws: np.ndarray, scale: Fraction) -> float:
    support = _window(float(scale))
    return _chi_square_p(draws, support, laplace_pmf(scale, support))


def gaussian_p(draws: np.ndarray, sigma2: Fraction) -> float:
    support = _window(math.sqrt(float(sigma2)))
    return _chi_square_p(draws, support, gaussian_pmf(sigma2, support))


LAPLACE_SCALES = [Fraction(1, 2), Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(1000)]
GAUSS_SIGMA2 = [Fraction(1, 4), Fraction(3, 7), Fraction(1), Fraction(25, 2), Fraction(10_000)]


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_distribution(scale: Fraction) -> None:
    assert laplace_p(rng.discrete_laplace(scale, N), scale) > ALPHA


@pytest.mark.parametrize("sigma2", GAUSS_SIGMA2, ids=str)
def test_discrete_gaussian_distribution(sigma2: Fraction) -> None:
    assert gaussian_p(rng.discrete_gaussian(sigma2, N), sigma2) > ALPHA


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(7, 2), Fraction(1000)], ids=str)
def test_chi_square_catches_halved_laplace(scale: Fraction) -> None:
    assert laplace_p(rng.discrete_laplace(scale / 2, N), scale) < ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(1), Fraction(25, 2), Fraction(10_000)], ids=str)
def test_chi_square_catches_halved_gaussian(sigma2: Fraction) -> None:
    assert gaussian_p(rng.discrete_gaussian(sigma2 / 4, N), sigma2) < ALPHA


def test_slow_path_for_huge_parameters_is_the_same_law() -> None:
    """Parameters beyond the int64 fast path use the scalar algorithm (same distribution)."""
    scale = Fraction(2**50 + 1, 2**48)  # about 4, numerator too large for the fast path
    draws = rng.discrete_laplace(scale, 20_000)
    assert laplace_p(draws, scale) > ALPHA


M = 20_000  # scalar draws (about 4 us each)


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1), Fraction(37, 3), Fraction(1000)],
                         ids=str)  # fmt: skip
def test_few_draws_are_the_same_law(scale: Fraction) -> None:
    """Up to ``_SCALAR_MAX`` draws come from the scalar algorithm (Python integers): the same law
    (chi-square at alpha 1e-6 as above, over about M draws made 1, 2, ... _SCALAR_MAX at a
    time)."""
    sizes = [1 + i % rng._SCALAR_MAX for i in range(2 * M // (rng._SCALAR_MAX + 1))]
    draws = np.concatenate([rng.discrete_laplace(scale, k) for k in sizes])
    assert laplace_p(draws, scale) > ALPHA


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(37, 3), Fraction(1000)], ids=str)
def test_chi_square_catches_halved_scalar_laplace(scale: Fraction) -> None:
    """The broken twin of the scalar path (scale halved) is rejected (M draws: p-value far
    below 1e-6)."""
    bits = rng._Bits(rng._BITS_PER_DRAW * M)
    draws = np.array([rng._discrete_laplace_one(scale / 2, bits) for _ in range(M)])
    assert laplace_p(draws, scale) < ALPHA


def test_few_draws_take_the_scalar_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to ``_SCALAR_MAX`` draws never run a numpy batch; more do."""
    batches: list[int] = []
    real = rng._laplace_batch
    monkeypatch.setattr(rng, "_laplace_batch", lambda p, q, n: batches.append(n) or real(p, q, n))
    for k in range(rng._SCALAR_MAX + 1):
        assert rng.discrete_laplace(Fraction(7, 2), k).shape == (k,)
    assert batches == []
    more = rng._SCALAR_MAX + 1
    assert rng.discrete_laplace(Fraction(7, 2), more).shape == (more,)
    assert batches


def test_geometric_exp1_distribution() -> None:
    """P(V = v) = (1 - e^-1) e^-v."""
    support = np.arange(0, 60)
    pmf = (1 - math.exp(-1)) * np.exp(-support.astype(np.float64))
    assert _chi_square_p(rng._geometric_exp1(N), support, pmf) > ALPHA


def test_geometric_tie_continuation() -> None:
    """Words equal to a table threshold are finished with more bits: V | (w = T_1) is 0 or 1+.

    Given w = floor(e^-1 2^64), U < e^-1 has probability frac(e^-1 2^64), so both outcomes occur.
    """
    table = rng._exp_neg_table()
    assert table[0] == rng._exp_neg_floor(1, 128) >> 64
    assert abs(int(table[0]) / 2**64 - math.exp(-1)) < 1e-15
    assert table[-1] == 0 and table[-2] == 1
    outs = {min(rng._geometric_exp1_continue(int(table[0])), 1) for _ in range(200)}
    assert outs == {0, 1}
    assert rng._geometric_exp1_continue(0) >= 44


@pytest.mark.parametrize(
    "num,den", [(0, 1), (1, 3), (1, 1), (5, 2), (7, 1), (123456789, 98765432)], ids=str
)
def test_bernoulli_exp_frequency(num: int, den: int) -> None:
    """Exact two-sided binomial test of P(heads) = exp(-num/den)."""
    heads = int(rng.bernoulli_exp(np.full(N, num), den).sum())
    p = math.exp(-num / den)
    if p == 1.0:
        assert heads == N
        return
    assert stats.binomtest(heads, N, p).pvalue > ALPHA


@pytest.mark.parametrize("a,b", [(1, 3), (2, 255), (255, 256), (10**15, 3 * 10**15 + 1)])
def test_bernoulli_ratio_frequency(a: int, b: int) -> None:
    heads = int(rng.bernoulli_ratio(np.full(N, a), b).sum())
    assert stats.binomtest(heads, N, a / b).pvalue > ALPHA


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000, 2**40 + 3])
def test_uniform_below(n: int) -> None:
    draws = rng.uniform_below(n, N)
    assert draws.min() >= 0 and draws.max() < n
    if n <= 1000:
        observed = np.bincount(draws, minlength=n)
        if n > 1:
            assert stats.chisquare(observed).pvalue > ALPHA
    else:
        assert stats.kstest(draws / n, "uniform").pvalue > ALPHA


def test_uniform_below_elementwise() -> None:
    bounds = np.tile(np.array([1, 2, 5, 9]), N // 4)
    draws = rng.uniform_below(bounds)
    assert (draws < bounds).all() and (draws >= 0).all()
    fives = draws[bounds == 5]
    assert stats.chisquare(np.bincount(fives, minlength=5)).pvalue > ALPHA


def test_random_bits_fair() -> None:
    assert stats.binomtest(int(rng.random_bits(N).sum()), N, 0.5).pvalue > ALPHA


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        rng.discrete_laplace(Fraction(0), 3)
    with pytest.raises(ValueError):
        rng.discrete_gaussian(Fraction(-1), 3)
    with pytest.raises(ValueError):
        rng.bernoulli_ratio(np.array([3]), 2)


@pytest.mark.slow
@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(7, 2), Fraction(1000)], ids=str)
def test_discrete_laplace_distribution_large(scale: Fraction) -> None:
    """1e7 draws: finer bins reach further into the tails."""
    assert laplace_p(rng.discrete_laplace(scale, 10_000_000), scale) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(25, 2), Fraction(10_000)], ids=str)
def test_discrete_gaussian_distribution_large(sigma2: Fraction) -> None:
    assert gaussian_p(rng.discrete_gaussian(sigma2, 10_000_000), sigma2) > ALPHA


# Bernoulli(exp(-num/den)) for mixed elements in one call, as a selection draws them (one den per
# candidate row, integer parts from 0 to several): each class's heads must follow its exact law.
# The classes interleave so that an element answered with another element's den or integer part
# moves its class's frequency. Bonferroni over the classes: false failure <= 1e-6 in all.
_MIXED = [(0, 1), (1, 3), (2, 3), (4, 3), (7, 2), (1, 7919), (23_756, 7919), (5, 1)]
_PER_CLASS = 15_000


def _mixed_law_p(draw: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> float:
    """The smallest Bonferroni-corrected two-sided exact binomial p-value over the classes."""
    num = np.tile(np.array([n for n, _ in _MIXED], dtype=np.int64), _PER_CLASS)
    den = np.tile(np.array([d for _, d in _MIXED], dtype=np.int64), _PER_CLASS)
    heads = draw(num, den).reshape(_PER_CLASS, len(_MIXED)).sum(axis=0)
    worst = 1.0
    for (n, d), h in zip(_MIXED, heads, strict=True):
        p = math.exp(-n / d)
        worst = min(
            worst,
            1.0 if p == 1.0 and h == _PER_CLASS else stats.binomtest(int(h), _PER_CLASS, p).pvalue,
        )
    return min(1.0, worst * len(_MIXED))


def test_bernoulli_exp_mixed_elements_follow_their_law() -> None:
    """rng.bernoulli_exp (its integer part V >= q drawn first, Algorithm 1 for r/den only where
    the element is still alive: the product of two independent events in either order) and
    bernoulli_exp_rational (one den for all) give each element P(heads) = exp(-num/den)."""
    assert _mixed_law_p(rng.bernoulli_exp) > ALPHA
    same_den = [n * 2 for n in range(7)] + [9]
    heads = rng.bernoulli_exp_rational(same_den * 10_000, 5).reshape(10_000, -1).sum(axis=0)
    ps = [
        stats.binomtest(int(h), 10_000, math.exp(-n / 5)).pvalue
        for n, h in zip(same_den, heads, strict=True)
    ]
    assert min(ps) * len(same_den) > ALPHA


def _twin_strict(q: np.ndarray, r: np.ndarray, den: np.ndarray | int) -> np.ndarray:
    """Broken twin: V > q (probability exp(-(q + 1))) for the integer part."""
    alive = np.ones(q.shape, dtype=bool)
    sel = np.flatnonzero(q > 0)
    alive[sel] = rng._geometric_exp1(sel.size) > q[sel]
    live = np.flatnonzero(alive)
    dens = den[live] if isinstance(den, np.ndarray) and den.ndim else den
    alive[live] = rng._bernoulli_exp_le1(r[live], dens)
    return alive


def _twin_misaligned(q: np.ndarray, r: np.ndarray, den: np.ndarray | int) -> np.ndarray:
    """Broken twin: the survivors' fractional parts over the first dens, not their own."""
    alive = np.ones(q.shape, dtype=bool)
    sel = np.flatnonzero(q > 0)
    alive[sel] = rng._geometric_exp1(sel.size) >= q[sel]
    live = np.flatnonzero(alive)
    dens = den[: live.size] if isinstance(den, np.ndarray) and den.ndim else den
    alive[live] = rng._bernoulli_exp_le1(np.minimum(r[live], dens), dens)
    return alive


@pytest.mark.parametrize("twin", [_twin_strict, _twin_misaligned], ids=lambda f: f.__name__)
def test_mixed_law_catches_a_broken_reorder(
    twin: Callable[[np.ndarray, np.ndarray, np.ndarray | int], np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same test on a reorder with a bug rejects (p-values below 1e-20 in 20 runs measured;
    the shifted classes' frequencies move by > 0.03 on 15,000 draws: > 8 standard deviations)."""
    monkeypatch.setattr(rng, "_bernoulli_exp_parts", twin)
    assert _mixed_law_p(rng.bernoulli_exp) <= ALPHA


# U < exp(-q) read one byte at a time (rng._below_exp_neg): the integer part of every selection's
# coins. Two checks: (1) given the same U (the same 64 bits), the answer is V >= q of the
# geometric V that rng._geometric_exp1 computes from those bits (the old integer part), on words
# chosen next to each threshold so that every byte position decides some of them; (2) the law,
# exact two-sided binomial tests per q (Bonferroni over the q: false failure <= 1e-6), which two
# broken twins fail (their p-values underflow to 0 in 3 runs measured: at q = 6 the first twin
# expects ~160 heads of 25,000 where 62 are right, > 12 standard deviations).
_Q = [1, 2, 3, 4, 6, 9, 45, 60]
_PER_Q = 25_000


def _msb_bytes_of(words: np.ndarray, q: np.ndarray) -> Callable[[int], np.ndarray]:
    """A stand-in for rng._bytes serving U's bytes (U's first 64 bits: ``words``) in the order
    _below_exp_neg reads them: byte b (most significant first) of the elements still tied with
    their threshold after b bytes."""
    table = rng._exp_neg_bytes()
    raw = np.array([list(int(w).to_bytes(8, "big")) for w in words], dtype=np.uint8)
    row = np.minimum(q, rng._GEO_TABLE)
    state = {"todo": np.arange(words.size), "b": 0}

    def serve(count: int) -> np.ndarray:
        todo, b = state["todo"], state["b"]
        assert count == todo.size
        out = raw[todo, b]
        state["todo"], state["b"] = todo[out == table[row[todo], b]], b + 1
        return out

    return serve


def test_below_exp_neg_is_the_geometric_event_on_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    words_table = rng._exp_neg_table()
    q, words = [], []
    g = np.random.default_rng(7)
    for v in range(1, 50):
        t = int(words_table[min(v, rng._GEO_TABLE) - 1])
        near = [t + s * (1 << (8 * b)) for b in range(8) for s in (-1, 1)]
        near += [int(x) for x in g.integers(0, 2**63, 20)]
        for w in near:
            if 0 <= w < 2**64 and w != t:  # a tie is finished by fresh bits (tested above)
                q.append(v)
                words.append(w)
    qa, wa = np.array(q, dtype=np.int64), np.array(words, dtype=np.uint64)
    monkeypatch.setattr(rng, "_words", lambda count, wide: wa[:count].copy())
    old = rng._geometric_exp1(wa.size) >= qa
    monkeypatch.setattr(rng, "_bytes", _msb_bytes_of(wa, qa))
    new = rng._below_exp_neg(qa)
    assert (new == old).all()
    assert 0 < int(old.sum()) < old.size  # both outcomes occur


def _below_law_p(draw: Callable[[np.ndarray], np.ndarray]) -> float:
    """The smallest Bonferroni-corrected exact binomial p-value of P(heads) = exp(-q) over _Q."""
    q = np.tile(np.array(_Q, dtype=np.int64), _PER_Q)
    heads = draw(q).reshape(_PER_Q, len(_Q)).sum(axis=0)
    worst = min(
        stats.binomtest(int(h), _PER_Q, math.exp(-v)).pvalue for v, h in zip(_Q, heads, strict=True)
    )
    return min(1.0, len(_Q) * worst)


def test_below_exp_neg_follows_its_law() -> None:
    assert _below_law_p(rng._below_exp_neg) > ALPHA


def _twin_tie_heads(q: np.ndarray) -> np.ndarray:
    """Broken twin: a first byte equal to the threshold's counts as heads (u <= f)."""
    f = rng._exp_neg_bytes()[np.minimum(q, rng._GEO_TABLE), 0]
    return np.asarray(rng._bytes(q.size) <= f)


def _twin_low_byte_first(q: np.ndarray) -> np.ndarray:
    """Broken twin: the threshold's bytes compared least significant first."""
    table = rng._exp_neg_bytes()[:, ::-1]
    row = np.minimum(q, rng._GEO_TABLE)
    out = np.zeros(q.size, dtype=bool)
    todo = np.arange(q.size)
    for b in range(8):
        u = rng._bytes(todo.size)
        f = table[row[todo], b]
        out[todo] = u < f
        todo = todo[u == f]
    return out


@pytest.mark.parametrize("twin", [_twin_tie_heads, _twin_low_byte_first], ids=lambda f: f.__name__)
def test_below_exp_neg_law_catches_a_broken_twin(
    twin: Callable[[np.ndarray], np.ndarray],
) -> None:
    assert _below_law_p(twin) <= ALPHA

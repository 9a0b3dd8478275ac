"""The scalar samplers' bit source (``rng._Bits``: one os.urandom read per sampler call).

Properties, each at false failure <= 1e-6 (chi-square or exact tests at ALPHA = 1e-6), each shown
to catch a deliberately broken twin of the source:

* ``below(n)`` is uniform on {0, ..., n-1} (twin: the modulo-biased ``r % n``);
* the discrete Laplace drawn through it follows its law, and two draws of one call are
  independent: the pair (draw 2j, draw 2j+1) of each call, and the first draws of two calls, have
  the product law of the exact pmf (twins: a source that starts every draw of a call on the same
  bits; one that hands every call the same bytes);
* a forked worker does not draw its parent's noise (twin: a buffer filled before the fork and
  used by both processes).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.dp import rng

ALPHA = 1e-6
SCALE = Fraction(37, 3)  # t = 37: a bit length (6) with rejections, a non-integer scale
CALLS = 2_500  # calls of 8 draws (the scalar path's size): 20,000 draws, ~0.1 s


def _below_p(below: Callable[[int], int], n: int, draws: int) -> float:
    observed = np.bincount([below(n) for _ in range(draws)], minlength=n)
    return float(stats.chisquare(observed).pvalue)


@pytest.mark.parametrize("n", [2, 3, 37, 200])
def test_below_is_uniform(n: int) -> None:
    bits = rng._Bits(8)  # small: most draws go through a top-up
    assert _below_p(bits.below, n, 100 * n) > ALPHA


def test_below_edges() -> None:
    bits = rng._Bits(1)
    assert {bits.below(1) for _ in range(50)} == {0}  # no bit needed, none taken
    assert bits._bits == 8
    big = 2**200 + 1  # wider than the pool: topped up with enough bytes at once
    assert all(0 <= bits.below(big) < big for _ in range(50))


class _ModuloBits(rng._Bits):
    """Broken twin: ``r % n`` on the bit length of n - 1 (modulo bias)."""

    def below(self, n: int) -> int:
        k = (n - 1).bit_length()
        return rng._Bits.below(self, 1 << k) % n


def test_uniformity_catches_modulo_bias() -> None:
    assert _below_p(_ModuloBits(8).below, 37, 3_700) < ALPHA


def _edges(scale: Fraction) -> tuple[np.ndarray, np.ndarray]:
    """Bins of the discrete Laplace by the quartiles of its exact law, and their masses."""
    r = math.exp(-1 / float(scale))
    w = int(60 * float(scale)) + 5
    support = np.arange(-w, w + 1)
    pmf = (1 - r) / (1 + r) * np.power(r, np.abs(support).astype(np.float64))
    cdf = np.cumsum(pmf)
    cuts = support[np.searchsorted(cdf, [0.25, 0.5, 0.75])] + 1  # bin i: [cuts[i-1], cuts[i])
    masses = np.diff(np.concatenate([[0.0], cdf[np.searchsorted(support, cuts) - 1], [1.0]]))
    return cuts, masses


def _pairs_p(first: np.ndarray, second: np.ndarray, scale: Fraction) -> float:
    """Chi-square p-value of i.i.d. pairs against the product of the exact law's quartile bins
    (16 cells, each expecting ~1/16 of the pairs): the law and the independence at once."""
    cuts, masses = _edges(scale)
    cell = np.searchsorted(cuts, first, side="right") * 4 + np.searchsorted(
        cuts, second, side="right"
    )
    observed = np.bincount(cell, minlength=16)
    expected = np.outer(masses, masses).reshape(-1) * first.size
    return float(stats.chisquare(observed, expected).pvalue)


def _calls(bits: Callable[[int], rng._Bits]) -> np.ndarray:
    """CALLS calls of the scalar discrete Laplace (8 draws each), each with its own source."""
    out = np.empty((CALLS, 8), dtype=np.int64)
    for c in range(CALLS):
        source = bits(rng._BITS_PER_DRAW * 8)
        out[c] = [rng._discrete_laplace_one(SCALE, source) for _ in range(8)]
    return out


def _within_p(draws: np.ndarray) -> float:
    """Draws 2j and 2j+1 of each call (disjoint pairs: i.i.d. under the claim)."""
    return _pairs_p(draws[:, 0::2].reshape(-1), draws[:, 1::2].reshape(-1), SCALE)


def _across_p(draws: np.ndarray) -> float:
    """The first draws of calls 2c and 2c+1."""
    return _pairs_p(draws[0::2, 0], draws[1::2, 0], SCALE)


def test_draws_follow_the_law_and_are_independent() -> None:
    draws = _calls(rng._Bits)
    # Bonferroni over the two tests: false failure <= 2 * ALPHA / 2
    assert _within_p(draws) > ALPHA / 2
    assert _across_p(draws) > ALPHA / 2


class _RewindBits(rng._Bits):
    """Broken twin: every draw of a call starts again on the call's first bits (a byte reused
    across draws)."""

    def __init__(self, nbytes: int) -> None:
        super().__init__(nbytes)
        self._start = (self._pool, self._bits)

    def rewind(self) -> None:
        self._pool, self._bits = self._start


_FROZEN = os.urandom(rng._BITS_PER_DRAW * 8)


class _FrozenBits(rng._Bits):
    """Broken twin: every call reads the same bytes (a buffer never refreshed, or one shared by
    two processes)."""

    def __init__(self, nbytes: int) -> None:
        self._pool = int.from_bytes(_FROZEN, "little")
        self._bits = 8 * len(_FROZEN)


def test_pairs_catch_reused_bits() -> None:
    out = np.empty((CALLS, 8), dtype=np.int64)
    for c in range(CALLS):
        source = _RewindBits(rng._BITS_PER_DRAW * 8)
        for i in range(8):
            source.rewind()
            out[c, i] = rng._discrete_laplace_one(SCALE, source)
    assert _within_p(out) < ALPHA
    assert _across_p(_calls(_FrozenBits)) < ALPHA


def _forked_draws(draw: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``draw()`` in a forked child and, meanwhile, in this process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its draws, exit at once (no pytest teardown)
        try:
            os.write(write, draw().astype(np.int64).tobytes())
        finally:
            os._exit(0)
    os.close(write)
    mine = draw()
    with os.fdopen(read, "rb") as f:
        theirs = np.frombuffer(f.read(), dtype=np.int64)
    os.waitpid(pid, 0)
    return mine, theirs


def test_a_forked_worker_draws_its_own_noise() -> None:
    """16 draws of scale 1000 in each process: equal by chance with probability < 1e-40."""
    rng.discrete_laplace(Fraction(1000), 8)  # whatever a source could hold is filled before
    mine, theirs = _forked_draws(lambda: rng.discrete_laplace(Fraction(1000), 16))
    assert theirs.size == 16 and not np.array_equal(mine, theirs)
    mine, theirs = _forked_draws(lambda: rng.discrete_laplace(Fraction(1000), 4))
    assert theirs.size == 4 and not np.array_equal(mine, theirs)


def test_fork_check_catches_a_shared_buffer() -> None:
    shared = rng._Bits(rng._BITS_PER_DRAW * 16)  # filled before the fork, used by both

    def draw() -> np.ndarray:
        return np.array([rng._discrete_laplace_one(Fraction(1000), shared) for _ in range(16)])

    mine, theirs = _forked_draws(draw)
    assert np.array_equal(mine, theirs)

"""The exact samplers of :mod:`dpsql.dp.rng` in Python integers, one draw at a time (CKS20
Algorithms 1-3 as the vectorised ones): any size of parameters (the fallback for those too large
for int64 arithmetic) and no numpy call per step (a few discrete Laplace draws, ``rng._SCALAR_MAX``,
are several times faster this way than in a batch). Part of the one sampler module: only
:mod:`dpsql.dp.rng` calls it, and its uniform integers come from a :class:`_Bits` of bytes read
from ``os.urandom`` for one sampler call.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

# Scalar exact versions (pure Python, any size of parameters): the fallback for huge parameters,
# and the discrete Laplace for a few draws. They take their uniform integers from a _Bits: one
# os.urandom read for a whole call (not one per step, as secrets.randbelow does: ~16 reads of a
# few bytes per Laplace draw, most of the scalar path's time).

# Bytes a call's _Bits reads at first: _BITS_PER_DRAW per draw (a discrete Laplace draw of a
# statement's scale, 1e3 to 1e12, consumes ~50-200 bits on average), at most _BITS_READ_MAX (the
# pool is shifted at every step: a pool of a whole large call's bytes would make each step
# linear in the call's size); a short pool is topped up _BITS_REFILL bytes at a time.
_BITS_PER_DRAW = 32
_BITS_READ_MAX = 512
_BITS_REFILL = 64


class _Bits:
    """Uniform random bits from the OS CSPRNG, each consumed at most once, for ONE caller.

    A pool (a Python integer) of bits read from ``os.urandom``; :meth:`below` takes the bits it
    needs from the bottom and shifts them out, so no bit serves two draws; when the pool runs
    short, fresh bytes are appended above the bits left (they stay uniform and independent).

    An instance lives for one sampler call (a local variable, never module state): nothing is
    shared between threads, and a forked worker cannot inherit bits its parent will also use (a
    buffer shared by two processes would give both the same noise). The bits left over when the
    call returns are dropped, never read by anything else.
    """

    __slots__ = ("_pool", "_bits")

    def __init__(self, nbytes: int) -> None:
        nbytes = min(nbytes, _BITS_READ_MAX)
        self._pool = int.from_bytes(os.urandom(nbytes), "little")
        self._bits = 8 * nbytes

    def below(self, n: int) -> int:
        """A uniform integer on {0, ..., n-1} (n >= 1): rejection sampling on the bit length of
        n - 1, as ``secrets.randbelow`` (exact: no modulo bias; each try accepts with probability
        > 1/2)."""
        k = (n - 1).bit_length()
        mask = (1 << k) - 1
        while True:
            if self._bits < k:
                more = max(_BITS_REFILL, (k + 7) // 8)
                self._pool |= int.from_bytes(os.urandom(more), "little") << self._bits
                self._bits += 8 * more
            r = self._pool & mask
            self._pool >>= k
            self._bits -= k
            if r < n:
                return r


def _bernoulli(p: Fraction, bits: _Bits) -> bool:
    return bits.below(p.denominator) < p.numerator


def _bernoulli_exp_le1_one(gamma: Fraction, bits: _Bits) -> bool:
    k = 1
    while _bernoulli(gamma / k, bits):
        k += 1
    return k % 2 == 1


def bernoulli_exp_scalar(gamma: Fraction, bits: _Bits | None = None) -> bool:
    """Scalar exact Bernoulli(exp(-gamma)) for rational gamma >= 0 (pure Python, any size)."""
    if bits is None:
        bits = _Bits(_BITS_PER_DRAW)
    while gamma > 1:
        if not _bernoulli_exp_le1_one(Fraction(1), bits):
            return False
        gamma -= 1
    return _bernoulli_exp_le1_one(gamma, bits)


def _bernoulli_exp_le1_int(num: int, den: int, bits: _Bits) -> bool:
    """Bernoulli(exp(-num/den)) for integers 0 <= num <= den (CKS20 Algorithm 1, as
    :func:`_bernoulli_exp_le1_one`: A_k ~ Bernoulli(num / (den k)) until the first failure at K;
    K odd), in Python integers."""
    k = 1
    while bits.below(den * k) < num:
        k += 1
    return k % 2 == 1


def _discrete_laplace_one(scale: Fraction, bits: _Bits) -> int:
    """One draw of :func:`discrete_laplace` (CKS20 Algorithm 2, as :func:`_laplace_batch`), in
    Python integers: any size of parameters, and no numpy call per step (a few draws are
    several times faster than a batch)."""
    t, s = scale.numerator, scale.denominator
    while True:
        u = bits.below(t)
        if not _bernoulli_exp_le1_int(u, t, bits):
            continue
        v = 0  # P(V >= v) = exp(-v): count Bernoulli(exp(-1)) successes until the first failure
        while _bernoulli_exp_le1_int(1, 1, bits):
            v += 1
        y = (u + t * v) // s
        negative = bits.below(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def _discrete_gaussian_one(sigma2: Fraction, bits: _Bits) -> int:
    t = math.isqrt(math.floor(sigma2)) + 1
    while True:
        y = _discrete_laplace_one(Fraction(t), bits)
        if bernoulli_exp_scalar((abs(y) - sigma2 / t) ** 2 / (2 * sigma2), bits):
            return y

"""The ONLY source of randomness for privacy in dpsql.

Every draw is exact: integer arithmetic on bytes from the operating system's CSPRNG (``os.urandom``),
so no floating-point artefact (Mironov 2012) can leak the true value through the noise's low bits.
The samplers are those of Canonne, Kamath & Steinke 2020 ("The Discrete Gaussian for Differential
Privacy", Algorithms 1-3), vectorized with numpy: every loop of the paper is a rejection or
counting loop whose iterations are independent, so a whole batch runs each step at once and the
elements that must go on are carried to the next step.

Building blocks, each exact:

* :func:`bernoulli_ratio` draws Bernoulli(a/b) by comparing random bytes with the binary expansion
  of a/b one byte at a time (a tie, probability 1/256, moves on to the next byte of both);
* :func:`bernoulli_exp` draws Bernoulli(exp(-num/den)) (CKS20 Algorithm 1 plus the integer-part
  split);
* :func:`discrete_laplace` and :func:`discrete_gaussian` (CKS20 Algorithms 2 and 3; the Gaussian
  uses a Laplace proposal of scale sigma²/m with integer m ~ sigma, so that the acceptance exponent
  (|y| - m)² / (2 sigma²) has a small exact denominator).

Parameters whose numerators or denominators are too large for int64 arithmetic fall back to the
scalar pure-Python versions of the same algorithms (exact, slow for many draws); the mechanisms
round their parameters (conservatively) so that this does not happen in practice. A few discrete
Laplace draws (``_SCALAR_MAX``) take the scalar algorithm too: below a few dozen draws it is
faster than a batch's numpy calls. The scalar versions (:mod:`dpsql.dp.rng_scalar`, part of this
module, called only from here) take their uniform integers from a :class:`_Bits`, one
``os.urandom`` read per sampler call, each bit used once.
"""

from __future__ import annotations

import functools
import math
import os
import secrets
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from dpsql.dp.rng_scalar import _BITS_PER_DRAW as _BITS_PER_DRAW
from dpsql.dp.rng_scalar import _Bits as _Bits
from dpsql.dp.rng_scalar import _discrete_gaussian_one as _discrete_gaussian_one
from dpsql.dp.rng_scalar import _discrete_laplace_one as _discrete_laplace_one
from dpsql.dp.rng_scalar import bernoulli_exp_scalar as bernoulli_exp_scalar

_RATIO_MAX = 2**55  # bernoulli_ratio needs (a << 8) < 2**63 with a < b
_K_MAX = 128  # Algorithm 1 reaches k with probability 1/(k-1)!; 1/127! is about 1e-214
_LAPLACE_MAX = 2**47  # numerator and denominator bound of a fast discrete Laplace scale
_GAUSS_NUM_MAX = 2**47
_GAUSS_DEN_MAX = 2**24
_GEO_TABLE = 45  # floor(exp(-45) 2**64) == 0
# Up to this many discrete Laplace draws take the scalar algorithm (Python integers, ~4 us a draw
# on one os.urandom read per call) rather than a numpy batch (~115-140 us of numpy calls up to a
# few dozen draws): one per released statistic and noised bias measure of an ungrouped private
# statement, or per group of a GROUP BY of a few dozen declared keys (5 categories, 2 sexes, 12
# months x 2). Measured crossover: ~30 draws (scales 1e3 and 1.4e8).
_SCALAR_MAX = 24


def token_hex(nbytes: int = 16) -> str:
    """A random hex token (salts for contribution-bounding order)."""
    return secrets.token_hex(nbytes)


def _words(count: int, wide: bool) -> np.ndarray:
    """``count`` uniform unsigned integers of 64 (``wide``) or 32 bits, as uint64."""
    dtype = np.uint64 if wide else np.uint32
    raw = np.frombuffer(os.urandom(count * np.dtype(dtype).itemsize), dtype=dtype)
    return raw.astype(np.uint64)


def _bytes(count: int) -> np.ndarray:
    return np.frombuffer(os.urandom(count), dtype=np.uint8)


def random_bits(count: int) -> np.ndarray:
    """``count`` fair coins as a bool array."""
    packed = np.frombuffer(os.urandom((count + 7) // 8), dtype=np.uint8)
    return np.unpackbits(packed)[:count].astype(bool)


def uniform_below(n: np.ndarray | int, size: int | None = None) -> np.ndarray:
    """Uniform integers on {0, ..., n-1} (elementwise for an array ``n``; 1 <= n < 2**53).

    Rejection sampling on random words masked to the bit length of n - 1: exact, and each round
    accepts with probability > 1/2.
    """
    bound = np.asarray(n, dtype=np.int64)
    if size is not None:
        bound = np.broadcast_to(bound, (size,))
    bound = bound.reshape(-1)
    if not bound.size:
        return np.zeros(0, dtype=np.int64)
    if bound.min() < 1 or bound.max() >= 2**53:
        raise ValueError("uniform_below needs 1 <= n < 2**53")
    wide = int(bound.max()) > 2**32
    if bound.min() == bound.max():  # one bound for all: no per-element masks
        top = int(bound[0])
        mask = np.uint64((1 << (top - 1).bit_length()) - 1)
        out = np.empty(bound.size, dtype=np.int64)
        filled = 0
        while filled < bound.size:
            cand = (_words(bound.size - filled, wide) & mask).astype(np.int64)
            cand = cand[cand < top]
            out[filled : filled + cand.size] = cand
            filled += cand.size
        return out
    _, exps = np.frexp((bound - 1).astype(np.float64))  # bit length of n-1 (exact below 2**53)
    masks = (np.uint64(1) << exps.astype(np.uint64)) - np.uint64(1)
    out = np.empty(bound.size, dtype=np.int64)
    todo = np.arange(bound.size)
    while todo.size:
        cand = (_words(todo.size, wide) & masks[todo]).astype(np.int64)
        ok = cand < bound[todo]
        out[todo[ok]] = cand[ok]
        todo = todo[~ok]
    return out


def bernoulli_ratio(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """Exact Bernoulli(a/b) elementwise, for integers 0 <= a <= b, 1 <= b < 2**55.

    Compares a uniform byte u with f = floor(256 a / b): u < f is heads, u > f tails, and a tie
    (probability 1/256) continues with the next byte against the remainder 256 a - f b. Hence
    P(heads) = f/256 + (1/256)(256 a/b - f) = a/b exactly.
    """
    num = np.asarray(a, dtype=np.int64).reshape(-1)
    den = np.broadcast_to(np.asarray(b, dtype=np.int64), num.shape)
    if num.size and (num.min() < 0 or (num > den).any() or den.max() >= _RATIO_MAX):
        raise ValueError("bernoulli_ratio needs 0 <= a <= b < 2**55")
    f = (num << 8) // den
    u = _bytes(num.size)
    out = u < f
    todo = np.flatnonzero(u == f)
    num, den, f = num[todo], den[todo], f[todo]
    while todo.size:
        num = (num << 8) - f * den
        f = (num << 8) // den
        u = _bytes(todo.size)
        out[todo] = u < f
        tie = u == f
        todo, num, den, f = todo[tie], num[tie], den[tie], f[tie]
    return out


def _bernoulli_exp_le1(num: np.ndarray, den: np.ndarray | int) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for 0 <= num <= den < 2**48 (CKS20 Algorithm 1, vectorized).

    Draws A_k ~ Bernoulli(gamma/k) for k = 1, 2, ... until the first failure at K; K is odd with
    probability exp(-gamma). Every element still running shares the same k.
    """
    num = np.asarray(num, dtype=np.int64).reshape(-1)
    dens: np.ndarray = np.broadcast_to(np.asarray(den, dtype=np.int64), num.shape)
    heads = bernoulli_ratio(num, dens)
    out = ~heads  # K = 1: odd
    todo = np.flatnonzero(heads)
    num, dens = num[todo], dens[todo]
    k = 2
    while todo.size:
        if k >= _K_MAX:
            raise RuntimeError("Bernoulli-exp sampler ran past k = 128 (probability < 1e-200)")
        heads = bernoulli_ratio(num, dens * k)
        out[todo[~heads]] = k % 2 == 1
        todo, num, dens = todo[heads], num[heads], dens[heads]
        k += 1
    return out


def bernoulli_exp(num: np.ndarray, den: np.ndarray | int) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) elementwise, for integers num >= 0, 1 <= den < 2**48.

    exp(-num/den) = exp(-q) * exp(-r/den) with q, r = divmod(num, den): the product of two
    independent events, U < exp(-q) for a uniform U (:func:`_below_exp_neg`) and Algorithm 1
    for the fractional part.
    """
    num = np.asarray(num, dtype=np.int64).reshape(-1)
    den = np.broadcast_to(np.asarray(den, dtype=np.int64), num.shape).reshape(-1)
    if num.size and (num.min() < 0 or den.min() < 1 or den.max() >= 2**48):
        raise ValueError("bernoulli_exp needs num >= 0 and 1 <= den < 2**48")
    q, r = np.divmod(num, den)
    return _bernoulli_exp_parts(q, r, den)


def _bernoulli_exp_parts(q: np.ndarray, r: np.ndarray, den: np.ndarray | int) -> np.ndarray:
    """Bernoulli(exp(-(q + r/den))) for int64 q >= 0 and 0 <= r < den < 2**48.

    The two independent events in the cheaper order: the integer part first (U < exp(-q), most
    elements decided by one random byte: :func:`_below_exp_neg`), then Algorithm 1's loop only
    for the elements still alive. A selection's candidates far from the best one (thousands of
    buckets) mostly have q >> 1, so most never reach the loop; the product of the two events,
    hence the law, is unchanged."""
    alive = np.ones(q.shape, dtype=bool)
    sel = np.flatnonzero(q > 0)
    alive[sel] = _below_exp_neg(q[sel])  # P(U < exp(-q)) = exp(-q)
    live = np.flatnonzero(alive)
    dens = den[live] if isinstance(den, np.ndarray) and den.ndim else den
    alive[live] = _bernoulli_exp_le1(r[live], dens)
    return alive


def bernoulli_exp_rational(num: Sequence[int], den: int) -> np.ndarray:
    """Exact Bernoulli(exp(-num_i/den)) for arbitrary non-negative Python integers.

    Vectorized when den < 2**48 and the integer parts fit int64; element by element otherwise.
    """
    nums = [int(x) for x in num]
    if den < 1 or any(x < 0 for x in nums):
        raise ValueError("bernoulli_exp_rational needs num >= 0 and den >= 1")
    out = np.zeros(len(nums), dtype=bool)
    rest: list[int] = list(range(len(nums)))
    if den < 2**48:
        parts = [divmod(x, den) for x in nums]
        fast = np.array([qq < 2**62 for qq, _ in parts], dtype=bool)
        idx = np.flatnonzero(fast)
        q = np.array([parts[i][0] for i in idx], dtype=np.int64)
        r = np.array([parts[i][1] for i in idx], dtype=np.int64)
        out[idx] = _bernoulli_exp_parts(q, r, den)
        rest = np.flatnonzero(~fast).tolist()
    for i in rest:
        out[i] = bernoulli_exp_scalar(Fraction(nums[i], den))
    return out


@functools.cache
def _exp_neg_floor(v: int, bits: int) -> int:
    """floor(exp(-v) * 2**bits), certified: exp(v) is bracketed by its Taylor partial sum L and
    L + (tail bound), and the floors of 2**bits over both ends must agree (exp(-v) is irrational,
    so they do once enough terms are summed)."""
    n_terms = max(2 * v + 20, 40)
    while True:
        partial, term = Fraction(0), Fraction(1)
        for n in range(n_terms + 1):
            partial += term
            term = term * v / (n + 1)
        upper = partial + term / (1 - Fraction(v, n_terms + 2))
        lo = (2**bits * upper.denominator) // upper.numerator
        hi = (2**bits * partial.denominator) // partial.numerator
        if lo == hi:
            return int(lo)
        n_terms *= 2


@functools.cache
def _exp_neg_table() -> np.ndarray:
    """floor(exp(-v) 2**64) for v = 1 .. 45 (decreasing; the last is 0), as uint64."""
    return np.array([_exp_neg_floor(v, 64) for v in range(1, _GEO_TABLE + 1)], dtype=np.uint64)


def _geometric_exp1_continue(word: int) -> int:
    """V for a uniform U whose first 64 bits are ``word``, extending U with fresh bits as needed.

    V = #{v >= 1 : U < exp(-v)}; U < exp(-v) is decided by comparing the known bits of U with
    floor(exp(-v) 2**bits), drawing 64 more bits of U on a tie.
    """
    x, bits, v = word, 64, 1
    while True:
        while True:
            t = _exp_neg_floor(v, bits)
            if x != t:
                break
            x, bits = (x << 64) | secrets.randbits(64), bits + 64
        if x > t:
            return v - 1
        v += 1


def _below_exp_neg(q: np.ndarray) -> np.ndarray:
    """Exact Bernoulli(exp(-q)) elementwise for int64 q >= 1: U < exp(-q) for a uniform U each.

    The same event as ``V >= q`` for the geometric V of :func:`_geometric_exp1` on the same U
    (V = #{v >= 1 : U < exp(-v)} and exp(-v) decreases), read with fewer of U's bits: U's first
    64 bits w against T_q = floor(exp(-q) 2**64) (0 for q >= 45) one byte at a time, most
    significant first, as integers compare. A byte below T_q's byte is heads, above it tails,
    equal reads the next byte; a w equal to T_q in all 64 bits (probability 2**-64) is finished
    by :func:`_geometric_exp1_continue` on w, as :func:`_geometric_exp1` finishes it. So given
    U the answer is the old one's; only the number of bytes read differs: one for most elements
    with q >= 6 (T_q's first byte is 0: a tie with probability 1/256), against 8 for the word
    (a selection over 5 x 4,096 buckets drew 160 kB of ``os.urandom`` per choice)."""
    q = np.asarray(q, dtype=np.int64).reshape(-1)
    if q.size and q.min() < 1:
        raise ValueError("_below_exp_neg needs q >= 1")
    row = np.minimum(q, _GEO_TABLE)  # T_45 = 0 = T_q for q > 45
    table = _exp_neg_bytes()
    out = np.zeros(q.size, dtype=bool)
    todo = np.arange(q.size)
    for b in range(8):
        f = table[row, b] if b == 0 else table[row[todo], b]
        u = _bytes(todo.size)
        out[todo] = u < f
        todo = todo[u == f]
        if not todo.size:
            return out
    words = _exp_neg_table()
    for i in todo:  # w == T_q: U's later bits decide
        out[i] = _geometric_exp1_continue(int(words[row[i] - 1])) >= q[i]
    return out


@functools.cache
def _exp_neg_bytes() -> np.ndarray:
    """T_v = floor(exp(-v) 2**64) (:func:`_exp_neg_table`) as 8 bytes, most significant first,
    in row v = 1 .. 45 of a (46, 8) uint8 array (row 0 unused), read-only."""
    words = [0, *(int(w) for w in _exp_neg_table())]
    out = np.array([list(w.to_bytes(8, "big")) for w in words], dtype=np.uint8)
    out.setflags(write=False)
    return out


def _geometric_exp1(count: int) -> np.ndarray:
    """Exact draws with P(V >= v) = exp(-v), by inversion V = #{v >= 1 : U < exp(-v)}.

    U's first 64 bits w decide U < exp(-v) unless w == floor(exp(-v) 2**64) (probability at most
    45 / 2**64 per draw); those rare draws are finished exactly by :func:`_geometric_exp1_continue`.
    """
    table = _exp_neg_table()
    w = _words(count, True)
    ascending = table[::-1]
    at_or_below = np.searchsorted(ascending, w, side="right")  # thresholds <= w
    out = (_GEO_TABLE - at_or_below).astype(np.int64)  # thresholds > w
    tie = ascending[np.maximum(at_or_below - 1, 0)] == w
    for i in np.flatnonzero(tie):
        out[i] = _geometric_exp1_continue(int(w[i]))
    return out


def _laplace_batch(p: int, q: int, count: int) -> np.ndarray:
    """Accepted draws of CKS20 Algorithm 2 for scale p/q out of ``count`` proposals."""
    u = uniform_below(p, count)
    u = u[_bernoulli_exp_le1(u, p)]
    v = _geometric_exp1(u.size)
    if v.size and v.max() >= 2**15:  # probability exp(-32768)
        raise RuntimeError("discrete Laplace geometric part out of range")
    y = (u + p * v) // q
    negative = random_bits(y.size)
    keep = ~(negative & (y == 0))
    return np.asarray(np.where(negative, -y, y)[keep], dtype=np.int64)


def _fill(batch: Callable[[int], np.ndarray], size: int, acceptance: float) -> np.ndarray:
    """Run ``batch(count)`` until ``size`` i.i.d. accepted draws are collected.

    Draws are kept in the order produced; surplus accepted draws of the last batch are dropped,
    which does not change the distribution of the ones kept (they are i.i.d.).
    """
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        count = int(need / acceptance * 1.02) + 16
        got = batch(count)
        acceptance = max(0.05, got.size / count)
        got = got[:need]
        out[filled : filled + got.size] = got
        filled += got.size
    return out


def discrete_laplace(scale: Fraction, size: int) -> np.ndarray:
    """``size`` draws with P(k) ∝ exp(-|k| / scale) on the integers, as int64."""
    s = Fraction(scale)
    if s <= 0:
        raise ValueError("scale must be positive")
    p, q = s.numerator, s.denominator
    if size <= _SCALAR_MAX or p >= _LAPLACE_MAX or q >= _LAPLACE_MAX:
        bits = _Bits(_BITS_PER_DRAW * size)  # one read for the call's draws
        return np.array([_discrete_laplace_one(s, bits) for _ in range(size)], dtype=np.int64)
    return _fill(lambda n: _laplace_batch(p, q, n), size, 0.6)


def _gaussian_batch(a: int, b: int, count: int) -> np.ndarray:
    """Accepted draws of CKS20 Algorithm 3 for sigma² = a/b, from ``count`` Laplace proposals.

    With proposal scale t = sigma²/c, P(y) exp(-(|y| - c)²/(2 sigma²)) ∝
    exp(-(2 |y| c + (|y| - c)²)/(2 sigma²)) ∝ exp(-y²/(2 sigma²)) for any c > 0. We take c = m,
    the integer square root of sigma² (exponent (|y| - m)² b / (2a)), or c = sigma² when
    sigma² < 1 (t = 1; exponent (|y| b - a)² / (2ab)): small exact denominators either way.
    """
    if a >= b:
        m = math.isqrt(a // b)
        y = discrete_laplace(Fraction(a, b * m), count)
        d, mult, den = np.abs(y) - m, b, 2 * a
    else:
        y = discrete_laplace(Fraction(1), count)
        d, mult, den = np.abs(y) * b - a, 1, 2 * a * b
    fits = np.abs(d) < math.isqrt(2**62 // mult)
    accept = np.zeros(y.size, dtype=bool)
    idx = np.flatnonzero(fits)
    accept[idx] = bernoulli_exp(d[idx] * d[idx] * mult, den)
    for i in np.flatnonzero(~fits):  # beyond ~2**19 sigma: never in practice, exact anyway
        accept[i] = bernoulli_exp_scalar(Fraction(int(d[i]) ** 2 * mult, den))
    return y[accept]


def discrete_gaussian(sigma2: Fraction, size: int) -> np.ndarray:
    """``size`` draws with P(k) ∝ exp(-k² / (2 sigma2)) on the integers, as int64."""
    s = Fraction(sigma2)
    if s <= 0:
        raise ValueError("sigma2 must be positive")
    a, b = s.numerator, s.denominator
    if a >= _GAUSS_NUM_MAX or b >= _GAUSS_DEN_MAX or (a < b and 2 * a * b >= 2**48):
        bits = _Bits(_BITS_PER_DRAW * size)
        return np.array([_discrete_gaussian_one(s, bits) for _ in range(size)], dtype=np.int64)
    return _fill(lambda n: _gaussian_batch(a, b, n), size, 0.6)

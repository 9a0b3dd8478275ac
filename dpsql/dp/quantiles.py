"""Quantiles, extremes and the mode by the exponential mechanism, from bucketed counts.

The data never leave PostgreSQL row by row: the engine asks for the number of rows per bucket of a
fixed public grid over the declared bounds [lo, hi] (per group), after contribution bounding. Bucket
j (0-based, B buckets of width w = (hi - lo)/B) holds the values in [lo + j w, lo + (j+1) w), the last
bucket also hi; values are clamped to [lo, hi] first. In SQL (PostgreSQL's width_bucket is 1-based
and puts hi in bucket B+1)::

    LEAST(GREATEST(width_bucket(x, lo, hi, B), 1), B) - 1

Selection uses permute-and-flip (McKenna & Sheldon 2020): visit the candidates in a uniformly random
order and stop at the first r whose coin Bernoulli(exp(epsilon (u(r) - u*) / (2 Δu))) lands heads,
u* = max_r u(r). Its privacy equals the exponential mechanism's (McSherry & Talwar 2007: epsilon-DP
for a utility of sensitivity Δu) and it is never less accurate. The coins are independent of the
order, so we flip every coin once (exact Bernoulli-exp of :mod:`dpsql.dp.rng`, rational exponents,
no floating point) and return a uniformly random candidate among the heads: the first heads of a
uniform order is uniform over the set of heads. No Gumbel or floating-point sampling anywhere.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.dp import rng
from dpsql.dp.accounting import PureEpsilon

_EPS_BITS = 20  # per-group epsilon is rounded down to this many denominator bits
_GAMMA_CLIP = 64  # utilities are clipped so that no exponent exceeds this (see Quantile)


def round_down(x: Fraction, bits: int = _EPS_BITS) -> Fraction:
    """The largest y <= x with denominator at most 2**bits (a smaller epsilon is always safe)."""
    x = Fraction(x)
    if x.denominator <= 2**bits:
        return x
    return Fraction(math.floor(x * 2**bits), 2**bits)


def choose_among_heads(heads: np.ndarray) -> np.ndarray:
    """Per row of a boolean matrix (each row with at least one True): a uniform True column."""
    per_row = heads.sum(axis=1)
    if (per_row < 1).any():
        raise RuntimeError("permute-and-flip: a row without heads (the best candidate's coin is 1)")
    pick = rng.uniform_below(per_row)
    # the pick-th heads of each row: the heads' flat indices are row-major, a row's in column
    # order, its first after the heads of the rows above (not a running count over the whole
    # matrix and a search of it: the same column, a pass over the heads only)
    flat = np.flatnonzero(heads)
    first = np.cumsum(per_row) - per_row
    return np.asarray(flat[first + pick] % heads.shape[1], dtype=np.int64)


def _as_matrix(counts: np.ndarray) -> tuple[np.ndarray, bool]:
    arr = np.asarray(counts)
    single = arr.ndim == 1
    mat = arr.reshape(1, -1) if single else arr
    if mat.ndim != 2 or mat.shape[1] < 1:
        raise ValueError("counts must be a vector or a (groups, buckets) matrix")
    if (mat < 0).any() or not np.issubdtype(mat.dtype, np.integer):
        raise ValueError("counts must be non-negative integers")
    return mat.astype(np.int64), single


class _PerGroup(PureEpsilon):
    """A choice made once per group: a privacy unit adds or removes at most
    ``contribution_bound`` rows of a group and touches at most ``max_groups`` groups, so each
    group's choice gets epsilon / max_groups (:attr:`group_epsilon`) and the release costs epsilon."""

    epsilon: Fraction
    contribution_bound: int
    max_groups: int

    def _check_groups(self) -> None:
        if self.epsilon <= 0 or self.contribution_bound < 1 or self.max_groups < 1:
            raise ValueError("needs epsilon > 0, contribution_bound >= 1, max_groups >= 1")

    @property
    def group_epsilon(self) -> Fraction:
        """epsilon / max_groups, rounded down to a 20-bit denominator (only ever smaller)."""
        return round_down(Fraction(self.epsilon) / self.max_groups)


@dataclass(frozen=True)
class Quantile(_PerGroup):
    """The ``quantile``-th value (0 <= q <= 1) of each group, from its bucket counts.

    MEDIAN is q = 1/2, PERCENTILE_CONT(p) and PERCENTILE_DISC(p) are q = p, MIN is q = 0 and MAX is
    q = 1. The output is the midpoint of the chosen bucket; for an ``integer`` column with integer
    bounds and bucket width, the middle integer of the bucket (exact for width 1).

    Utility: with n rows in the group, the target position is t = q (n - 1) in the sorted order
    (0-based; t = 0 when n = 0), and bucket j holds positions L_j .. L_j + c_j - 1 (L_j rows lie in
    lower buckets, c_j in bucket j). u(j) = -max(0, L_j - t, t - (L_j + c_j - 1)), the distance
    from t to the bucket's positions (an empty bucket scores -max(L_j - t, t - L_j + 1) <= -1/2),
    clipped below at -C with C = 2 Δu · 64 / epsilon_g so that exponents stay small (clipping
    keeps the sensitivity).

    Sensitivity: a privacy unit adds or removes at most R = ``contribution_bound`` rows of the group.
    Each of L_j, L_j + c_j and n moves by at most R in the same direction and t by q R, so every
    argument of the max moves by at most R: Δu = R.

    Privacy map: epsilon_g = epsilon / max_groups per group; each group's choice is epsilon_g-DP
    and a unit touches at most ``max_groups`` groups, so the release is epsilon-DP (epsilon_g is
    rounded down to a 20-bit denominator, which only strengthens the guarantee).
    """

    quantile: Fraction
    epsilon: Fraction
    lo: Fraction
    hi: Fraction
    buckets: int
    contribution_bound: int = 1
    max_groups: int = 1
    integer: bool = False
    name: str = "exponential"
    # rows added to the target position (an interval end: see offset_for); a public constant,
    # so the sensitivity argument above is unchanged
    offset: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.quantile <= 1:
            raise ValueError("quantile must be in [0, 1]")
        self._check_groups()
        if not self.lo < self.hi or self.buckets < 1:
            raise ValueError("needs lo < hi and at least one bucket")
        if self.integer and (Fraction(self.lo).denominator != 1 or self.width.denominator != 1):
            raise ValueError("integer quantiles need integer bounds and bucket width")

    @property
    def target(self) -> Fraction:
        """The quantile used: q with its denominator limited to 2**16 (a target position off by
        less than n / 2**16 rows; it only affects accuracy, never privacy)."""
        return Fraction(self.quantile).limit_denominator(2**16)

    @property
    def width(self) -> Fraction:
        return (Fraction(self.hi) - Fraction(self.lo)) / self.buckets

    def midpoints(self) -> np.ndarray:
        """The value reported per bucket: midpoints (or middle integers), as floats (read-only)."""
        return _bucket_values(Fraction(self.lo), Fraction(self.hi), self.buckets, self.integer)[0]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Per bucket, the smallest and largest value it can hold (integers: whole numbers),
        as read-only float arrays."""
        _, low, high = _bucket_values(
            Fraction(self.lo), Fraction(self.hi), self.buckets, self.integer
        )
        return low, high

    def gap_bound(self, alpha: float) -> float:
        """g with P(the chosen bucket is more than g rows from the target) <= alpha:
        B exp(-epsilon_g g / (2R)) = alpha (see rank_error)."""
        eps = float(self.group_epsilon)
        return 2 * self.contribution_bound * math.log((self.buckets + 1) / alpha) / eps

    def miss_probability(self, offset: int) -> float:
        """An upper bound on the chance that an interval end released with ``offset`` k (|k| >= 2)
        lies on the wrong side of the true quantile (of the rows it was given).

        Over the B + 1 candidates of :meth:`end_utilities` the best one's gap is at most 1/2
        (the virtual bucket holds any target beyond the data), so permute-and-flip picks a gap
        above g + 1/2 with probability <= (B + 1) exp(-epsilon_g g / (2R)). For k > 0 a pick
        with gap <= |k| - 3/2 is the virtual bucket (end = hi >= the truth) or a real bucket
        whose last position is >= q (n - 1) + 3/2 > ceil(q (n - 1)), so its highest value is
        >= the truth (which lies between positions floor and ceil of q (n - 1)); k < 0 alike.
        Hence the bound (B + 1) exp(-epsilon_g (|k| - 2) / (2R)).
        """
        eps = float(self.group_epsilon)
        g = max(0, abs(offset) - 2)
        r = self.contribution_bound
        return min(1.0, (self.buckets + 1) * math.exp(-eps * g / (2 * r)))

    def rank_error(self, confidence: float) -> float:
        """Rows t such that, with probability >= confidence, the chosen bucket holds a position
        within t of the target q (n - 1) (for the declared contribution bound).

        Every candidate's coin is heads with probability exp(-epsilon_g gap / (2R)) and the best
        one's always is, so P(the choice has gap >= g) <= B exp(-epsilon_g g / (2R)); solving for
        alpha = 1 - confidence gives g = 2R ln(B/alpha) / epsilon_g, and the best bucket is within
        1/2 row of the target.
        """
        if not 0 < confidence < 1:
            raise ValueError("confidence must be in (0, 1)")
        eps = float(self.group_epsilon)
        r = self.contribution_bound
        return 2 * r * math.log(self.buckets / (1 - confidence)) / eps + 0.5

    def scaled_utilities(self, counts: np.ndarray) -> np.ndarray:
        """d · u(j) as int64 (d = the quantile's denominator), unclipped, shape (groups, B)."""
        mat, _ = _as_matrix(counts)
        q = self.target
        a, d = q.numerator, q.denominator
        n = mat.sum(axis=1, keepdims=True)
        if int(n.max(initial=0)) * d >= 2**55:
            raise ValueError("too many rows for exact quantile utilities")
        below = np.cumsum(mat, axis=1) - mat
        target = a * np.maximum(n - 1, 0)  # d · t
        gap = np.maximum(d * below - target, target - d * (below + mat - 1))
        return np.asarray(-np.maximum(gap, 0), dtype=np.int64)

    def release(self, counts: np.ndarray) -> np.ndarray | float:
        """The noisy quantile per group (a float for a 1-D ``counts``, else an array)."""
        mat, single = _as_matrix(counts)
        if mat.shape[1] != self.buckets:
            raise ValueError(f"expected {self.buckets} bucket counts, got {mat.shape[1]}")
        chosen = self.choose(mat)
        values = self.midpoints()[chosen]
        return float(values[0]) if single else values

    def end_utilities(self, counts: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
        """d · u over B + 1 candidates for an interval end (``offset`` k != 0), shape (groups,
        B + 1): the target position moves k rows (t = q (n - 1) + k), and a virtual bucket of
        |k| + 1 rows is added past the end it moves towards (above hi for k > 0, below lo for
        k < 0), so a target beyond the data lands in it (the end is then hi, or lo). Virtual rows
        are constants: the sensitivity argument is unchanged (Δu = R).

        ``offsets``: one k per group (each of ``offset``'s sign; public, or functions of a
        release), the rows of the utilities of ``replace(self, offset=k)`` for each group's row,
        computed at once (:func:`dpsql.execute.selected_measures.quantile_ends`)."""
        mat, _ = _as_matrix(counts)
        off = np.full((mat.shape[0], 1), self.offset, dtype=np.int64)
        if offsets is not None:
            off = np.asarray(offsets, dtype=np.int64).reshape(-1, 1)
            if off.shape[0] != mat.shape[0] or (np.sign(off) != np.sign(self.offset)).any():
                raise ValueError("one offset per group, each of the end's sign")
        k = np.abs(off)
        pad = k + 1
        q = self.target
        a, d = q.numerator, q.denominator
        n = mat.sum(axis=1, keepdims=True)
        if (int(n.max(initial=0)) + int(k.max(initial=0)) + 1) * d >= 2**55:
            raise ValueError("too many rows for exact quantile utilities")
        if self.offset > 0:
            full, moved = np.hstack([mat, pad]), off
        else:  # real positions move up by k + 1
            full, moved = np.hstack([pad, mat]), off + k + 1
        below = np.cumsum(full, axis=1) - full
        target = a * np.maximum(n - 1, 0) + d * moved
        gap = np.maximum(d * below - target, target - d * (below + full - 1))
        return np.asarray(-np.maximum(gap, 0), dtype=np.int64)

    def end_values(self, pick: np.ndarray) -> np.ndarray:
        """The interval end per group for the candidates picked over :meth:`end_utilities`: the
        highest value of the chosen bucket (hi for the virtual one) for k > 0, the lowest (lo)
        for k < 0."""
        low, high = self.edges()
        ends = np.append(high, high[-1]) if self.offset > 0 else np.append(low[0], low)
        return np.asarray(ends[np.asarray(pick, dtype=np.int64)], dtype=np.float64)

    def choose(self, mat: np.ndarray, utilities: np.ndarray | None = None) -> np.ndarray:
        """Permute-and-flip over buckets: the chosen bucket index per group (over ``utilities``
        when given, else the bucket counts' :meth:`scaled_utilities`)."""
        return self.select(self.scaled_utilities(mat) if utilities is None else utilities)

    def select(self, utilities: np.ndarray) -> np.ndarray:
        """Permute-and-flip over the candidates of (groups, candidates) scaled ``utilities``:
        the chosen candidate index per group."""
        d = self.target.denominator
        eps = self.group_epsilon
        r = self.contribution_bound
        # gamma = eps (u* - u) / (2R) = e_n (U* - U) / (2 R d e_d) with U = d u; clip U >= -C d.
        clip = math.ceil(Fraction(2 * r * _GAMMA_CLIP * d) / eps)
        scaled = np.maximum(utilities, -clip)
        gap = scaled.max(axis=1, keepdims=True) - scaled
        den = 2 * r * d * eps.denominator
        if den >= 2**48 or clip * eps.numerator >= 2**62:
            raise ValueError("quantile parameters too large for exact sampling")
        heads = rng.bernoulli_exp(gap.reshape(-1) * eps.numerator, den).reshape(gap.shape)
        return choose_among_heads(heads)


@functools.lru_cache(maxsize=256)
def _bucket_values(
    lo: Fraction, hi: Fraction, buckets: int, integer: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bucket j of width w = (hi - lo) / B: the reported value (lo + (j + 1/2) w, or for
    integers lo + j w + floor((w - 1) / 2)), the lowest value lo + j w and the highest
    lo + (j + 1) w (minus 1 for integers), each the float nearest the exact rational.

    In integers over the common denominator b d (lo = a / b, w = c / d): Python's int / int is
    correctly rounded, as ``float(Fraction)`` is (it divides numerator by denominator), so the
    floats are those of the per-bucket Fraction arithmetic. A statement's quantiles share a
    column's bounds and bucket count: computed once per (lo, hi, B, integer), read-only."""
    w = (hi - lo) / buckets
    a, b, c, d = lo.numerator, lo.denominator, w.numerator, w.denominator
    base, step, den = a * d, c * b, b * d
    if integer:  # lo and w are integers (Quantile.__post_init__)
        lo_i, w_i = int(lo), int(w)
        half = (w_i - 1) // 2
        mid = [float(lo_i + j * w_i + half) for j in range(buckets)]
        low = [float(lo_i + j * w_i) for j in range(buckets)]
        high = [float(lo_i + (j + 1) * w_i - 1) for j in range(buckets)]
    else:
        mid = [(2 * base + (2 * j + 1) * step) / (2 * den) for j in range(buckets)]
        low = [(base + j * step) / den for j in range(buckets)]
        high = [(base + (j + 1) * step) / den for j in range(buckets)]
    out = (np.array(mid), np.array(low), np.array(high))
    for arr in out:
        arr.setflags(write=False)
    return out


@dataclass(frozen=True)
class Mode(_PerGroup):
    """The most frequent value among public candidates (mode() WITHIN GROUP), report-noisy-max.

    Utility u(r) = count of rows with candidate value r (per group). A privacy unit adds or removes
    at most R = ``contribution_bound`` rows of a group, so each count moves by at most R: Δu = R.
    Permute-and-flip with exponent epsilon_g (u(r) - u*) / (2R) is epsilon_g-DP per group,
    epsilon_g = epsilon / max_groups (rounded down); over a unit's groups, epsilon-DP.
    Returns candidate indices; the engine maps them to the public candidate values.
    """

    epsilon: Fraction
    contribution_bound: int = 1
    max_groups: int = 1
    name: str = "report_noisy_max"

    def __post_init__(self) -> None:
        self._check_groups()

    def count_error(self, confidence: float, candidates: int) -> float:
        """Rows g such that, with probability >= confidence, the chosen candidate's count is
        within g of the largest: g = 2R ln(candidates / (1 - confidence)) / epsilon_g."""
        if not 0 < confidence < 1 or candidates < 1:
            raise ValueError("confidence must be in (0, 1) and candidates >= 1")
        eps = float(self.group_epsilon)
        return 2 * self.contribution_bound * math.log(candidates / (1 - confidence)) / eps

    def release(self, counts: np.ndarray) -> np.ndarray | int:
        """Index of the chosen candidate per group (an int for a 1-D ``counts``)."""
        mat, single = _as_matrix(counts)
        eps = self.group_epsilon
        gap = (mat.max(axis=1, keepdims=True) - mat).reshape(-1)
        num = [int(g) * eps.numerator for g in gap]
        den = 2 * self.contribution_bound * eps.denominator
        heads = rng.bernoulli_exp_rational(num, den).reshape(mat.shape)
        chosen = choose_among_heads(heads)
        return int(chosen[0]) if single else chosen

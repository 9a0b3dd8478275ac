"""Contribution bounds chosen from the data: a DP "rank from the top" over a public grid.

A bound (rows per unit per group R, groups per unit G, a column's clamping range) is chosen from
one number per privacy unit, ``m_u`` (its largest row count in a group, its number of groups, its
largest value), so that about ``rank`` units lie above the chosen bound: the approach of Amin,
Kulesza, Muñoz Medina and Vassilvitskii ("Bounding User Contributions: A Bias-Variance Trade-off
in Differential Privacy", ICML 2019), who choose the bound as a DP quantile of the units'
contributions, with the exponential mechanism over a geometric grid as in the approximate-bounds
algorithm of Google's differential-privacy library.

Grid: public candidate bounds ``u_0 < u_1 < ... < u_{B-1}``; bucket j holds the units with
``u_{j-1} < m_u <= u_j`` (``u_{-1}`` = -inf; values above ``u_{B-1}`` are clamped into the last
bucket first). PostgreSQL counts units per bucket (:mod:`dpsql.sql.rewrite.measure_bounds`).

Utility of bucket j: with A_j units in higher buckets and c_j in bucket j (n units in all), the
units' positions from the top are A_j .. A_j + c_j - 1; u(j) = -max(0, A_j - t, t - (A_j + c_j -
1)), the distance from the target position t = min(k, s (n - 1)), k = ``rank``, s = ``top_share``
(1/4, or 1/2 for a median): k units from the top, or the upper quartile when there are fewer than
about 4k units (the minimum otherwise). Adding or removing one unit moves A_j and A_j + c_j by 0
or 1 each and t by 0 or s <= 1, all in the same direction, so every argument of the max moves by
at most 1: Δu = 1. (Computed in quarters: 4u is an integer.)
Selection is permute-and-flip (McKenna & Sheldon 2020) with coins exp(-epsilon gap / 2), which is
epsilon-DP as the exponential mechanism is (:mod:`dpsql.dp.quantiles` has the argument; the
same exact samplers are used). Utilities are clipped at -C, C = 128 / epsilon (keeps Δu = 1).

Accuracy: P(the chosen bucket's gap >= g) <= B exp(-epsilon g / 2). The default rank
k = ceil(2 ln(B / beta) / epsilon) with beta = 0.02 makes the empty buckets above the largest
unit (gap k + 1) all together less likely than beta: the bound is almost never far above the
data, and about k units (up to the rank error) have more than the bound.

Far above the data (the prior). Every empty bucket above the largest unit has the same gap
(t + 1), so the selection's rare miss (beta) lands uniformly among them: with R's grid up to
1,000,000 rows, anywhere from 2x to 10,000x the data (the demo's ``region, COUNT(DISTINCT
user_id), AVG(amount) ... GROUP BY region``: 0.9% of choices of R at epsilon 1 came out 363 ..
1,000,000 rows per user_id per group for 5 users with 400 and the rest at most 11, every AVG's
noise then covering its whole range). So for grids whose top is a policy ceiling (R, G, an L1
cap) the selection carries a public prior: a candidate one step further from the anchor is
e^-``step_nats`` as likely (1 nat a step of about sqrt 2). Permute-and-flip on u(j) - 2
step_nats j / epsilon, a data-independent offset: the sensitivity and the epsilon are u's.
A miss then lands a step or two above the data (a geometric tail of ratio e^-1 over the steps:
19x less often than uniformly over 30 empty buckets, and not past 4 steps but with odds below
e^-4 of an already rare miss). The price: one step down is preferred when it holds fewer than
2 step_nats / epsilon units (k / 7.6 at the default rank), far fewer than a tail usually has
near rank k. The bound's soundness never depended on it (the rewrite enforces whatever is
chosen), nor does an interval: what bounding removes is measured apart. Clamps keep no prior:
their grid ends at the declared bound, the fixed bounds' noise.

Small tables (the guard). That holds only when the target reaches k: t = s (n - 1) >= k. With
fewer units the empty buckets above the data are only t + 1 ~ s n below the best, and over a
grid of ~40 buckets up to ``MAX_ROWS_PER_UNIT`` the choice often lands far above the data (300
units at a slice of 0.05: R from 12 to 185,364 for a true 10). So a tenth of the epsilon
(:data:`COUNT_SHARE`) first releases a noisy unit count n~ = n + DLap(1 / epsilon_c) (one
unit changes n by 1: epsilon_c-DP); the selection runs at the rest, epsilon_s, only when
n~ - ln(1 / COUNT_BETA) / epsilon_c >= k_s / s + 1, k_s = ceil(2 ln(B / beta) / epsilon_s)
(then n >= k_s / s + 1 except with probability <= COUNT_BETA); otherwise the output is
:data:`FALLBACK` (index B): the caller keeps the fixed defaults and says so. The decision is
post-processing of a DP count, and the two steps compose sequentially: epsilon_c + epsilon_s =
epsilon, the charged cost. With n units below the limit, the chance that the selection runs at
all is <= exp(-epsilon_c (limit - n)) (the discrete Laplace tail).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.dp import rng
from dpsql.dp.accounting import PureEpsilon
from dpsql.dp.quantiles import choose_among_heads, round_down

BETA = Fraction(1, 50)  # chance that the choice lands among the empty buckets above the data
COUNT_SHARE = Fraction(1, 10)  # of a choice's epsilon: the noisy unit count of the guard
COUNT_BETA = 0.02  # the guard's margin: chance a count overstates n enough to let a choice run
CEILING_PRIOR = 1  # step_nats of a grid whose top is a policy ceiling (R, G, an L1 cap)
_CLIP = 128  # utilities are clipped at -_CLIP / epsilon: coins below exp(-64) count as tails


def default_rank(epsilon: Fraction, buckets: int) -> int:
    """k = ceil(2 ln(B / beta) / epsilon): see the module docstring.

    >>> default_rank(Fraction(1, 5), 34)
    75
    """
    return math.ceil(2 * math.log(buckets / float(BETA)) / float(epsilon))


def integer_grid(top: int) -> tuple[int, ...]:
    """Candidate integer bounds 1, 2, 3, 4, 6, 8, 11, 16, ... (ratio about sqrt 2) up to ``top``.

    >>> integer_grid(40)
    (1, 2, 3, 4, 6, 8, 12, 16, 23, 32, 40)
    """
    out = [1, 2, 3, 4]
    e = 4
    while out[-1] < top:
        v = math.ceil(2 ** (e / 2))
        e += 1
        if v > out[-1]:
            out.append(min(v, top))
    return tuple(v for v in out if v <= top)


def _round_up_3(x: Fraction) -> Fraction:
    """x > 0 rounded up to 3 significant digits (a readable candidate; never below x)."""
    e = math.floor(math.log10(x)) - 2
    unit = Fraction(10) ** e
    return math.ceil(x / unit) * unit


def value_grid(
    anchor: Fraction, far: Fraction, integer: bool, steps: int = 40
) -> tuple[Fraction, ...]:
    """Candidate ends from near ``anchor`` (excluded) to ``far`` (the declared bound, the last),
    at distances about |far - anchor| 2^(-i/2) from the anchor, i = steps-1 .. 0 (3 significant
    digits; integers, rounded away from the anchor, for integer columns). Public: a function of
    the declared bounds only.

    >>> [str(v) for v in value_grid(Fraction(0), Fraction(10), True, 6)]
    ['2', '3', '4', '5', '8', '10']
    >>> [str(v) for v in value_grid(Fraction(0), Fraction(-500), False, 3)]
    ['-250', '-354', '-500']
    """
    span = abs(far - anchor)
    sign = 1 if far > anchor else -1
    out: list[Fraction] = []
    for i in range(steps - 1, 0, -1):
        d = _round_up_3(span * Fraction(2 ** (-i / 2)))
        v = anchor + sign * d
        if integer:
            v = Fraction(math.ceil(v) if sign > 0 else math.floor(v))
        if v != anchor and sign * (far - v) > 0 and (not out or v != out[-1]):
            out.append(v)
    out.append(far)
    return tuple(out)


class _Guarded(PureEpsilon):
    """A choice guarded by a noisy unit count: ``COUNT_SHARE`` of epsilon counts the units, the
    rest selects (both rounded down to a 20-bit denominator, which only strengthens them)."""

    @property
    def select_epsilon(self) -> Fraction:
        """The selection's share (the rest is the guard's unit count)."""
        return round_down(Fraction(self.epsilon) * (1 - COUNT_SHARE))

    @property
    def count_epsilon(self) -> Fraction:
        return round_down(Fraction(self.epsilon) * COUNT_SHARE)


@dataclass(frozen=True)
class TopRank(_Guarded):
    """Choose a bucket of an ascending grid with about ``rank`` units above it (epsilon-DP).

    Privacy map: epsilon (rounded down to a 20-bit denominator, which only strengthens it) for
    counts where one unit is in exactly one bucket (Δu = 1, module docstring).
    """

    epsilon: Fraction
    rank: int
    top_share: Fraction = Fraction(1, 4)  # t = min(rank, top_share (n - 1)): 1/2 is the median
    name: str = "top_rank"
    # the public prior: each candidate one grid step further from the anchor is e^-step_nats as
    # likely a priori (0: none). For grids whose top is a policy ceiling far above most data
    # (R, G, an L1 cap: up to 1,000,000 rows): see the module docstring, "Far above the data"
    step_nats: int = 0

    def __post_init__(self) -> None:
        if self.epsilon <= 0 or self.rank < 0 or self.step_nats < 0:
            raise ValueError("needs epsilon > 0, rank >= 0 and step_nats >= 0")
        if self.top_share not in (Fraction(1, 4), Fraction(1, 2)):
            raise ValueError("top_share is 1/4 or 1/2 (4t stays an integer)")

    def min_units(self, buckets: int) -> int:
        """Units needed for the target to reach k_s (empty buckets above the data unlikely)."""
        k = default_rank(self.select_epsilon, buckets)
        return math.ceil(k / self.top_share) + 1

    def limit(self, buckets: int) -> int:
        """The noisy unit count a choice needs to run (the guard; module docstring)."""
        eps_c = self.count_epsilon
        if eps_c <= 0:
            return 2**62  # too small to count: always the fixed defaults
        return self.min_units(buckets) + math.ceil(math.log(1 / COUNT_BETA) / float(eps_c))

    def runs(self, counts: np.ndarray, n: int) -> np.ndarray:
        """``n`` independent guard decisions: whether the selection runs (noisy count >= limit)."""
        eps_c = self.count_epsilon
        if eps_c <= 0:
            return np.zeros(n, dtype=bool)
        total = int(np.asarray(counts, dtype=np.int64).sum())
        noisy = total + rng.discrete_laplace(1 / eps_c, n)
        return noisy >= self.limit(len(counts))

    def gaps(self, counts: np.ndarray) -> np.ndarray:
        """-4 u(j) per bucket (ascending buckets), unclipped."""
        c = np.asarray(counts, dtype=np.int64)
        if c.ndim != 1 or c.size < 1 or (c < 0).any():
            raise ValueError("counts must be a non-empty vector of non-negative integers")
        above = np.concatenate([np.cumsum(c[::-1])[::-1][1:], [0]])
        t4 = min(4 * self.rank, int(4 * self.top_share) * max(int(c.sum()) - 1, 0))  # 4t
        return np.asarray(np.maximum(0, np.maximum(4 * above - t4, t4 - 4 * (above + c - 1))))

    def rank_error(self, buckets: int, confidence: float) -> float:
        """With probability >= confidence the chosen bucket holds a position within this many
        units of the target (B exp(-epsilon g / 2) <= 1 - confidence)."""
        eps = float(self.select_epsilon)
        return 2 * math.log(buckets / (1 - confidence)) / eps

    def choose(self, counts: np.ndarray) -> int:
        """The chosen bucket index (permute-and-flip, exact coins), or :data:`FALLBACK` =
        ``len(counts)`` when the guard's noisy count is too small (keep the fixed defaults)."""
        return int(self.choose_many(counts, 1)[0])

    def choose_many(self, counts: np.ndarray, n: int) -> np.ndarray:
        """``n`` independent choices on the same counts (audits and benchmarks draw many)."""
        picks = self.select_many(counts, n)
        picks[~self.runs(counts, n)] = len(counts)  # FALLBACK
        return picks

    def select_many(self, counts: np.ndarray, n: int) -> np.ndarray:
        """The selection alone (at ``select_epsilon``), without the guard."""
        eps = self.select_epsilon
        if eps <= 0:
            raise ValueError("epsilon too small for exact sampling")
        clip = math.ceil(4 * _CLIP / eps)
        gap = np.minimum(self.gaps(counts), clip)
        den = 8 * eps.denominator  # exponent epsilon (4 gap) / (2 * 4)
        # the prior's step_nats per step, on the same denominator (a public offset of the
        # quality: permute-and-flip on u(j) - 2 step_nats j / epsilon, whose sensitivity is u's)
        score = gap * eps.numerator + self.step_nats * den * np.arange(gap.size, dtype=np.int64)
        num = np.tile(score - score.min(), n)
        heads = rng.bernoulli_exp(num, den).reshape(n, -1)
        return choose_among_heads(heads)

    def exact(self, counts: np.ndarray) -> int:
        """The best bucket, without noise (what a zero-noise source answers: tests' exact
        oracle, never the product's :class:`~dpsql.dp.noise_source.CsprngNoise`). Ties go to the
        highest bucket, so this bound clips nothing that the noisy one rarely would; the guard
        compares the exact unit count with :meth:`min_units`."""
        if int(np.asarray(counts).sum()) < self.min_units(len(counts)):
            return len(counts)  # FALLBACK
        g = self.gaps(counts)
        return int(np.flatnonzero(g == g.min())[-1])


STEP_CAP = 4  # grid steps (about sqrt 2 each) a tail estimate may raise R: at most 4x
SLOPE_MIN = 2  # steps per quadrupling of the rank from which a tail is heavy enough to follow
SLOPE_MAX = 4  # steps per quadrupling of the rank beyond which the first choice is an accident


@dataclass(frozen=True)
class TailRank(_Guarded):
    """R aimed past the rank one selection can resolve, along the tail's own slope (epsilon-DP).

    Why: the best R for a COUNT or SUM without GROUP BY leaves only about sqrt(2) / epsilon_m
    units above it (``balance``: the bias-variance optimum of Amin et al.), while a selection
    resolves ranks only down to about k = 2 ln(B / beta) / epsilon (75-350 units): with a heavy
    tail the units between hold most of what bounding removes (12,000 units with log-normal row
    counts: R = 128 at rank 85 leaves 1.1% of the rows out, R = 363 0.06%).

    How: one guard count for the whole bound (a tenth of its epsilon, as :class:`TopRank`'s),
    then, with epsilon_s the rest:

    * enough units for two selections at epsilon_s / 2 (the guard's limit for rank ``rank``,
      and for the second's target to be 4k, not the upper quartile): the selections at ranks
      k = ``rank`` and 4k. Their distance in grid steps, d = j_k - j_4k,
      is the tail's slope per quadrupling of the rank (0 for a table where most units have the
      same count: no tail). Extrapolated from rank k to ``balance`` (log_4(k / balance)
      quadruplings, a Pareto tail), R is the first choice raised floor(d log_4(k / balance))
      steps, at most :data:`STEP_CAP` (4x), never above the grid; only for d >=
      :data:`SLOPE_MIN` (R doubling per quadrupling of the rank, Pareto index <= 2: a tail
      without a variance; at d = 1 two ranks of a table with a few distinct counts may simply
      straddle two buckets: 1-4 rows a person, the 4s and the 3s). A slope above
      :data:`SLOPE_MAX` (R doubling or more per quadrupling of the rank: a tail without a mean)
      is read as the first selection's accident instead (it lands among the empty buckets above
      the data with probability up to beta, the second one at rank 4k almost never): R is then
      the second choice, lower, so the accident costs bias, not a bound far above the data;
    * else enough units for one selection at epsilon_s (rank ``single_rank``): that one, as
      :class:`TopRank` would choose;
    * else :data:`FALLBACK` (the fixed default).

    Privacy: the count (epsilon_c) and then selections totalling at most epsilon_s compose
    sequentially (which ones run is post-processing of the count): epsilon; the rest is
    post-processing of their outputs with public numbers (the ranks, ``balance``, the grid).
    """

    epsilon: Fraction
    rank: int  # the first of the two selections' target (at epsilon_s / 2)
    balance: int = 1
    single_rank: int = 0  # the one selection's target (at epsilon_s); 0: ``rank``
    # the slope from which a tail is followed: SLOPE_MIN for row counts (small integers whose
    # ranks straddle buckets), 1 for a clamp's values (a continuous scale: one step per
    # quadrupling of the rank is a Pareto tail of index about 4, a real one)
    slope_min: int = SLOPE_MIN
    name: str = "tail_rank"
    step_nats: int = 0  # each selection's prior (TopRank.step_nats)

    def __post_init__(self) -> None:
        if self.epsilon <= 0 or self.rank < 1:
            raise ValueError("needs epsilon > 0 and rank >= 1")

    @property
    def top_share(self) -> Fraction:
        return Fraction(1, 4)

    def _selection(self, share: Fraction, rank: int) -> TopRank:
        """A selection at ``share`` of epsilon_s (its epsilon set so its selection share is
        that: ``TopRank.select_many`` draws at exactly epsilon_s * share, rounded down)."""
        eps = self.select_epsilon * share / (1 - COUNT_SHARE)
        return TopRank(eps, rank, step_nats=self.step_nats)

    @property
    def parts(self) -> tuple[TopRank, TopRank]:
        """The two selections of the tail mode (each at epsilon_s / 2)."""
        half = Fraction(1, 2)
        return self._selection(half, self.rank), self._selection(half, 4 * self.rank)

    @property
    def single(self) -> TopRank:
        return self._selection(Fraction(1), self.single_rank or self.rank)

    def rank_error(self, buckets: int, confidence: float) -> float:
        return self.parts[0].rank_error(buckets, confidence)

    def limit(self, buckets: int) -> int:
        """The noisy unit count a choice needs to run at all (one selection's guard)."""
        return self._limit(self.single, buckets)

    def _limit(self, m: TopRank, buckets: int) -> int:
        k = default_rank(m.select_epsilon, buckets)
        margin = math.ceil(math.log(1 / COUNT_BETA) / float(self.count_epsilon))
        return math.ceil(k / m.top_share) + 1 + margin

    def _two_limit(self, buckets: int) -> int:
        """The noisy unit count the two selections need: the first's guard, and the second's
        target at 4 ``rank`` rather than the upper quartile (with fewer units the two ranks are
        not a quadrupling apart, and the first, at twice the single selection's rank, only
        costs bias: 1,000 PUMS persons, 93 of them with 4 rows: 4 at rank 77, 3 at rank 154)."""
        a, c = self.parts
        margin = math.ceil(math.log(1 / COUNT_BETA) / float(self.count_epsilon))
        return max(self._limit(a, buckets), math.ceil(c.rank / c.top_share) + 1 + margin)

    def steps(self, slope: np.ndarray) -> np.ndarray:
        """Grid steps to raise R given the slope (steps per quadrupling of the rank)."""
        quads = max(0.0, math.log(self.rank / max(self.balance, 1)) / math.log(4))
        # rows: rounded down; a clamp's values (slope_min 1): to the nearest step
        half = 0.5 if self.slope_min < SLOPE_MIN else 0.0
        up: np.ndarray = np.minimum(np.floor(np.maximum(slope, 0) * quads + half), STEP_CAP)
        return up.astype(np.int64)

    def combine(self, first: np.ndarray, second: np.ndarray, buckets: int) -> np.ndarray:
        """The chosen buckets from the selections' outputs (``first``: a bucket, or
        :data:`FALLBACK` = ``buckets``; ``second``: a bucket, or ``buckets`` when only one
        selection ran or none)."""
        out = np.asarray(first, dtype=np.int64).copy()
        second = np.asarray(second, dtype=np.int64)
        ok = (out < buckets) & (second < buckets)
        slope = out - second
        up = np.where(slope >= self.slope_min, self.steps(slope), 0)
        raised = np.where(slope > SLOPE_MAX, second, np.minimum(out + up, buckets - 1))
        out[ok] = raised[ok]
        return out

    def choose(self, counts: np.ndarray) -> int:
        return int(self.choose_many(counts, 1)[0])

    def choose_many(self, counts: np.ndarray, n: int) -> np.ndarray:
        return self.combine(*self.choose_pairs(counts, n), len(counts))

    def choose_pairs(self, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` independent draws of the mechanism before its post-processing (what the audits
        measure): the first selection's bucket (or the single one's, or FALLBACK) and the
        second's (``len(counts)`` when it did not run)."""
        b = len(counts)
        first = np.full(n, b, dtype=np.int64)
        second = np.full(n, b, dtype=np.int64)
        if self.count_epsilon <= 0:
            return first, second
        total = int(np.asarray(counts, dtype=np.int64).sum())
        noisy = total + rng.discrete_laplace(1 / self.count_epsilon, n)
        a, c = self.parts
        two = noisy >= self._two_limit(b)
        one = ~two & (noisy >= self._limit(self.single, b))
        if two.any():
            first[two] = a.select_many(counts, int(two.sum()))
            second[two] = c.select_many(counts, int(two.sum()))
        if one.any():
            first[one] = self.single.select_many(counts, int(one.sum()))
        return first, second

    def min_units(self, buckets: int) -> int:
        return self.single.min_units(buckets)

    def exact(self, counts: np.ndarray) -> int:
        """The choice without noise (a zero-noise source's, as :meth:`TopRank.exact`): the
        guard on the exact count (without the margin), the best buckets."""
        b = len(counts)
        total = int(np.asarray(counts).sum())
        a, c = self.parts
        if total >= self._two_limit(b) - self._limit(self.single, b) + self.single.min_units(b):
            first, second = np.array([a.exact(counts)]), np.array([c.exact(counts)])
            return int(self.combine(first, second, b)[0])
        return self.single.exact(counts)


Selection = TopRank | TailRank

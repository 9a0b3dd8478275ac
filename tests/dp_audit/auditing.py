"""Statistical helpers for the privacy audits: Clopper-Pearson bounds and empirical epsilon.

An audit runs a mechanism many times on two neighbouring inputs D, D' and counts how often an
output event S occurs. (epsilon, delta)-DP implies P_D'(S) <= e^epsilon P_D(S) + delta, so with a
lower confidence bound on P_D'(S) and an upper one on P_D(S), each at level alpha/2,

    epsilon_lb = ln((lower(P_D'(S)) - delta) / upper(P_D(S)))

is below the mechanism's true epsilon with probability >= 1 - alpha (Jagielski et al. 2020,
"Auditing Differentially Private Machine Learning"). A correct mechanism's epsilon_lb exceeds its
claimed epsilon with probability <= alpha = 1e-6; a broken one (half the noise) shows a larger
realized epsilon that the bound exposes.

The event S must not depend on the measured draws, and it must not come from what the mechanism
claims either (a threshold fitted to the claimed noise scale cannot see a mechanism that adds less
noise than it claims). :func:`choose_event` picks it from a separate *selection* sample of the
mechanism's outputs on the same neighbours; the audit then counts S on fresh draws, so the
Clopper-Pearson guarantee holds whatever S was chosen.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from dpsql.dp.mechanisms import Mechanism
from dpsql.dp.noise_source import CsprngNoise
from dpsql.policy.model import Policy

ALPHA = 1e-6
SELECT_ALPHA = 1e-3  # choose_event's confidence bounds on the selection sample's rates


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided exact binomial confidence interval at level 1 - alpha."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(
    hits_d: int, n_d: int, hits_d2: int, n_d2: int, delta: float = 0.0, alpha: float = ALPHA
) -> float:
    """Lower confidence bound on epsilon from event counts on D and D' (level 1 - alpha)."""
    _, p_d_hi = clopper_pearson(hits_d, n_d, alpha)
    p_d2_lo, _ = clopper_pearson(hits_d2, n_d2, alpha)
    if p_d2_lo - delta <= 0:
        return -math.inf
    if p_d_hi <= 0:
        return math.inf
    return math.log((p_d2_lo - delta) / p_d_hi)


@dataclass(frozen=True)
class Event:
    """An output event chosen from a selection sample: ``out >= cut`` (``upper``) or
    ``out <= cut``, with ``flip`` saying which neighbour's probability is the numerator
    (False: D', True: D)."""

    cut: float
    upper: bool
    flip: bool
    score: float

    def __call__(self, out: np.ndarray) -> np.ndarray:
        return np.asarray(out >= self.cut if self.upper else out <= self.cut)

    def epsilon_lower_bound(
        self, out_d: np.ndarray, out_d2: np.ndarray, delta: float = 0.0, alpha: float = ALPHA
    ) -> float:
        """The audit's bound from fresh draws (level 1 - alpha, one direction: the chosen one)."""
        h_d, h_d2 = int(self(out_d).sum()), int(self(out_d2).sum())
        if self.flip:
            return epsilon_lower_bound(h_d2, len(out_d2), h_d, len(out_d), delta, alpha)
        return epsilon_lower_bound(h_d, len(out_d), h_d2, len(out_d2), delta, alpha)


def choose_event(
    sel_d: np.ndarray, sel_d2: np.ndarray, delta: float = 0.0, n_measure: int | None = None
) -> Event:
    """The threshold event with the largest estimated epsilon lower bound on a selection sample.

    Candidates: ``out >= t`` and ``out <= t`` for t among the sample's values (at most ~400
    quantiles), in both directions. The score predicts the audit's own bound: the selection
    sample's hit rates scaled to ``n_measure`` draws (default: 5x the selection) at the audit's
    level (alpha 1e-6), from the rates' own confidence bounds on the selection sample (level
    1 - SELECT_ALPHA), so an event too rare to measure, or lucky on a small count, loses.
    Nothing here reads the mechanism: only its outputs on the two neighbours.
    """
    a = np.sort(np.asarray(sel_d, dtype=float).ravel())
    b = np.sort(np.asarray(sel_d2, dtype=float).ravel())
    values = np.unique(np.concatenate([a, b]))
    if len(values) > 400:
        values = np.unique(np.quantile(values, np.linspace(0, 1, 401)))
    na, nb = len(a), len(b)
    m = n_measure or 5 * min(na, nb)
    ge_a = na - np.searchsorted(a, values, side="left")
    ge_b = nb - np.searchsorted(b, values, side="left")
    le_a = np.searchsorted(a, values, side="right")
    le_b = np.searchsorted(b, values, side="right")
    best = Event(float(values[0]), True, False, -math.inf)
    for upper, (hits_a, hits_b) in ((True, (ge_a, ge_b)), (False, (le_a, le_b))):
        for flip in (False, True):
            num, den, n_num, n_den = (hits_a, hits_b, na, nb) if flip else (hits_b, hits_a, nb, na)
            # rates at their own confidence bounds (SELECT_ALPHA), not their point estimates:
            # the maximum over ~1,600 candidates of point estimates picks a far-tail event whose
            # few selection hits were lucky (winner's curse: the broken Laplace sum's twin then
            # read 0.60 on fresh draws instead of ~1.9)
            num_lo = np.where(num == 0, 0.0, stats.beta.ppf(SELECT_ALPHA / 2, num, n_num - num + 1))
            den_hi = np.where(
                den == n_den, 1.0, stats.beta.ppf(1 - SELECT_ALPHA / 2, den + 1, n_den - den)
            )
            predicted_num = np.floor(num_lo * m)
            predicted_den = np.minimum(np.ceil(den_hi * m), m)
            score = _vector_bound(predicted_num, m, predicted_den, m, delta, ALPHA)
            i = int(np.argmax(score))
            if score[i] > best.score:
                best = Event(float(values[i]), upper, flip, float(score[i]))
    return best


def _vector_bound(
    num: np.ndarray, n_num: int, den: np.ndarray, n_den: int, delta: float, alpha: float
) -> np.ndarray:
    """:func:`epsilon_lower_bound` over arrays of counts (numerator side: lower bound)."""
    num_lo = np.where(num == 0, 0.0, stats.beta.ppf(alpha / 2, num, n_num - num + 1))
    den_hi = np.where(den == n_den, 1.0, stats.beta.ppf(1 - alpha / 2, den + 1, n_den - den))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log((num_lo - delta) / den_hi)
    return np.where(num_lo - delta <= 0, -np.inf, out)


@dataclass(frozen=True)
class Verdict:
    """A curtailed two-sided audit's outcome: ``exceeds`` is the full audit's verdict (its
    epsilon lower bound at ``runs`` runs a side above the claim); ``used`` the runs a side it
    took to know it; ``hits`` the events counted on (D, D') by then."""

    exceeds: bool
    used: int
    runs: int
    hits: tuple[int, int]


def curtailed_audit(
    event: Callable[[int], bool], runs: int, claimed: float, alpha: float = ALPHA / 2
) -> Verdict:
    """Whether ``max(lb(D -> D'), lb(D' -> D))``, the Clopper-Pearson epsilon lower bounds (each
    at level 1 - ``alpha``) from ``runs`` runs a side of ``event(i)`` (one run on database i: 0
    is D, 1 is D'; True when the fixed event occurred), exceeds ``claimed``: the same test as
    counting all ``runs`` a side, with the runs drawn in pairs and stopped as soon as the runs
    left cannot change the verdict (curtailed sampling). Each bound grows with its numerator's
    hits and falls with its denominator's, so after m pairs with hits (a, b) and r = runs - m
    left, every completion's final bound is at most ``high`` (each direction at its best
    completion: its numerator's runs all hits, its denominator's none) and at least ``low`` (each
    direction at its worst): once both lie on one side of the claim, so does the full test's. The verdict is thus
    the full test's for every sequence of outcomes: its false-failure probability (2 alpha for a
    correct mechanism) and its power on a broken twin are the full test's, and a correct
    mechanism is usually settled after a quarter to a half of the runs (the expensive part
    of an end-to-end audit: one statement through the engine per run)."""

    def bound(hits_d: int, hits_d2: int) -> float:
        return max(
            epsilon_lower_bound(hits_d, runs, hits_d2, runs, alpha=alpha),
            epsilon_lower_bound(hits_d2, runs, hits_d, runs, alpha=alpha),
        )

    a = b = 0
    for m in range(1, runs + 1):
        a += bool(event(0))
        b += bool(event(1))
        r = runs - m
        # the largest and the smallest final bound over the completions of the remaining runs
        high = max(
            epsilon_lower_bound(a, runs, b + r, runs, alpha=alpha),
            epsilon_lower_bound(b, runs, a + r, runs, alpha=alpha),
        )
        low = max(
            epsilon_lower_bound(a + r, runs, b, runs, alpha=alpha),
            epsilon_lower_bound(b + r, runs, a, runs, alpha=alpha),
        )
        if high <= claimed or low > claimed or r == 0:
            assert r > 0 or (low == high == bound(a, b))
            return Verdict(low > claimed, m, runs, (a, b))
    raise ValueError("runs must be positive")


def permute_and_flip_probabilities(coins: np.ndarray) -> np.ndarray:
    """Exact output distribution of 'flip all coins, uniform among heads' (small candidate sets)."""
    b = len(coins)
    out = np.zeros(b)
    for heads in itertools.product([False, True], repeat=b):
        if not any(heads):
            continue
        p = math.prod(c if h else 1 - c for c, h in zip(coins, heads, strict=True))
        for j in range(b):
            if heads[j]:
                out[j] += p / sum(heads)
    return out / out.sum()


def neighbouring_engines(make_db, policy: Policy, load, prefix: str, noise=None):  # type: ignore[no-untyped-def]
    """Engines on two neighbouring databases: ``load(dsn, with_extreme)`` fills each; the second
    has one extra privacy unit. Yields (engine on D, engine on D'), closes both afterwards.
    ``noise``: the engines' noise source (default the product's; tests.helpers.EXACT for the
    exact answers)."""
    from dpsql.dp.noise_source import CSPRNG
    from dpsql.engine import Engine

    dsn_d, dsn_d2 = make_db(f"{prefix}_d"), make_db(f"{prefix}_d2")
    load(dsn_d, False)
    load(dsn_d2, True)
    src = CSPRNG if noise is None else noise
    d, d2 = (Engine(policy, dsn, pool_size=2, noise=src) for dsn in (dsn_d, dsn_d2))
    try:
        yield d, d2
    finally:
        d.close()
        d2.close()


@contextmanager
def broken_twins(engines, planner):  # type: ignore[no-untyped-def]
    """Engines on the same two neighbouring databases as ``engines`` whose private queries are
    planned by ``planner`` (a deliberately broken ``make_plan``), through the engine's own seam
    (``Engine(planner=...)``): the audit must flag them. Closed at exit; ``engines`` untouched."""
    from dpsql.engine import Engine

    twins = tuple(Engine(e.policy, e.backend.dsn, pool_size=2, planner=planner) for e in engines)
    try:
        yield twins
    finally:
        for t in twins:
            t.close()


class WrongScale(CsprngNoise):
    """A broken twin of the product's noise source: ``target``'s noise drawn at ``factor`` times
    its scale (an interval stating a width its noise does not have), the rest as the product
    draws it (the coverage audits' twin)."""

    def __init__(self, target: Mechanism, factor: int) -> None:
        self.target, self.factor = target, factor

    def add(self, mech: Any, values: np.ndarray) -> np.ndarray:
        if mech == self.target:
            mech = dataclasses.replace(mech, epsilon=mech.epsilon / self.factor)
        return super().add(mech, values)

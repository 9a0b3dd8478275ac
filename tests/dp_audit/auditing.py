"""Statistical helpers for the privacy audits: Clopper-Pearson bounds and empirical epsilon.

An audit runs a mechanism many times on two neighbouring inputs D, D' and counts how often an
output event S occurs. (epsilon, delta)-DP implies P_D'(S) <= e^epsilon P_D(S) + delta, so with a
lower confidence bound on P_D'(S) and an upper one on P_D(S), each at level alpha/2,

    epsilon_lb = ln((lower(P_D'(S)) - delta) / upper(P_D(S)))

is below the mechanism's true epsilon with probability >= 1 - alpha (Jagielski et al. 2020,
"Auditing Differentially Private Machine Learning"). A correct mechanism's epsilon_lb exceeds its
claimed epsilon with probability <= alpha = 1e-6; a broken one (half the noise) shows a larger
realized epsilon that the bound exposes.
"""

from __future__ import annotations

import itertools
import math
from contextlib import contextmanager

import numpy as np
from scipy import stats

ALPHA = 1e-6


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


def neighbouring_engines(make_db, policy: dict, load, prefix: str):  # type: ignore[no-untyped-def]
    """Engines on two neighbouring databases: ``load(dsn, with_extreme)`` fills each; the second
    has one extra privacy unit. Yields (engine on D, engine on D'), closes both afterwards."""
    from dpsql.engine import Engine
    from dpsql.policy.model import Policy

    pol = Policy.model_validate(policy)
    dsn_d, dsn_d2 = make_db(f"{prefix}_d"), make_db(f"{prefix}_d2")
    load(dsn_d, False)
    load(dsn_d2, True)
    d, d2 = Engine(pol, dsn_d, pool_size=2), Engine(pol, dsn_d2, pool_size=2)
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

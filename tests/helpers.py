"""Test-only helpers. Nothing here is importable from the dpsql package."""

from __future__ import annotations

import math

from dpsql.engine import Engine


def noiseless(engine: Engine) -> Engine:
    """Switch an engine's noise off (test-only; `dpsql serve` and the CLI can't reach this)."""
    engine._noiseless = True
    return engine


def binom_min_successes(n: int, p: float, alpha: float = 1e-6) -> int:
    """The largest k with P(Binomial(n, p) < k) <= alpha: fewer successes fail a test at level alpha."""
    cdf = 0.0
    for k in range(n + 1):
        term = math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * math.log(p)
            + (n - k) * math.log1p(-p)
        )
        if cdf + term > alpha:
            return k
        cdf += term
    return n

"""The engine's use of the ledger: what it reserves is what the analyst asked for."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.session import SessionContext


def test_gaussian_at_the_per_query_maximum_with_a_larger_delta(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> None:
    """epsilon = max_epsilon at delta 1e-4 (above the default 1e-6) is allowed, and recorded so."""
    with Ledger.open(make_db("engine_ledger"), demo_policy) as ledger:
        engine = Engine(demo_policy, demo_dsn, ledger=ledger, pool_size=2)
        try:
            cap = Fraction(str(demo_policy.analysts["analyst"].max_epsilon))
            s = SessionContext(
                analyst="analyst", epsilon=cap, delta=Fraction(1, 10**4), mechanism="gaussian"
            )
            r = engine.execute(engine.prepare("SELECT COUNT(*) AS n FROM purchases"), s)
            assert r.epsilon_spent == float(cap)
        finally:
            engine.close()
        [h] = ledger.history("analyst")
        assert h.mechanism == "gaussian" and h.rho > 0
        assert h.epsilon <= cap and float(h.delta) == 1e-4

"""The engine's use of the ledger: what it reserves is what the analyst asked for."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import UndefinedTable
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


def test_engine_answers_the_ledger_views(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> None:
    with Ledger.open(make_db("engine_ledger"), demo_policy) as ledger:
        engine = Engine(demo_policy, demo_dsn, ledger=ledger, pool_size=2)
        try:
            s = SessionContext(analyst="analyst", epsilon=Fraction(1, 2))
            engine.execute(engine.prepare("SELECT COUNT(*) AS n FROM purchases"), s)
            p = engine.prepare("SELECT name, epsilon_spent FROM dpsql.budget")
            assert p.kind == "dpsql"
            assert [c.name for c in engine.describe(p, s)] == ["name", "epsilon_spent"]
            r = engine.execute(p, s)
            assert r.rows == [("analyst", Fraction(1, 2)), ("demo", Fraction(1, 2))]
            h = engine.execute(engine.prepare("SELECT * FROM dpsql.history"), s)
            assert h.command_tag == "SELECT 1"
            with pytest.raises(UndefinedTable):
                engine.execute(engine.prepare("SELECT * FROM dpsql.answer"), s)
        finally:
            engine.close()

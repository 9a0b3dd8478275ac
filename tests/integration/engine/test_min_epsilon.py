"""The policy's per-query minimum epsilon: a nearly free query is refused before it runs.

Without the minimum, an epsilon just above the sampler floor (1e-9) still executed the private
SQL, so an analyst could time the private query thousands of times for almost no budget.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from pydantic import ValidationError

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import InvalidParameter, PolicyError
from dpsql.policy.model import Defaults
from dpsql.session import SessionContext
from tests.policies import build_policy, demo_doc

SQL = "SELECT COUNT(*) AS n FROM purchases"


def _engine_with_recorder(engine: Engine) -> list[str]:
    sent: list[str] = []
    run = engine.backend.run

    def record(query: str, params: Any = None, **kw: Any) -> Any:
        sent.append(query)
        return run(query, params, **kw)

    engine.backend.run = record  # type: ignore[method-assign]
    return sent


def test_below_the_minimum_is_refused_before_budget_or_data(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> None:
    with Ledger.open(make_db("min_eps"), demo_policy) as ledger:
        engine = Engine(demo_policy, demo_dsn, ledger=ledger, pool_size=2)
        sent = _engine_with_recorder(engine)
        try:
            s = SessionContext(analyst="analyst", epsilon=Fraction(1, 10**6))
            with pytest.raises(InvalidParameter) as e:
                engine.execute(engine.prepare(SQL), s)
            assert e.value.sqlstate == "22023"
            assert str(e.value) == (  # one range, PostgreSQL's words
                '1e-06 is outside the valid range for parameter "dpsql.epsilon" (0.001 .. 5)'
            )
            assert e.value.detail is not None and "minimum is 0.001" in e.value.detail
            assert e.value.hint is not None and "between 0.001 and 5" in e.value.hint
            assert sent == []  # nothing ran upstream
            assert ledger.history("analyst") == []  # nothing reserved or charged
            s = SessionContext(analyst="analyst", epsilon=Fraction(1, 1000))  # the minimum runs
            assert engine.execute(engine.prepare(SQL), s).epsilon_spent == pytest.approx(0.001)
        finally:
            engine.close()


def test_analyst_minimum_overrides_the_default(demo_dsn: str, demo_policy: Any) -> None:
    analysts = dict(demo_policy.analysts)
    analysts["analyst"] = analysts["analyst"].model_copy(update={"min_epsilon": 0.25})
    pol = demo_policy.model_copy(update={"analysts": analysts})
    engine = Engine(pol, demo_dsn, pool_size=1)
    try:
        s = SessionContext(analyst="analyst", epsilon=Fraction(1, 5))
        with pytest.raises(InvalidParameter, match=r"\(0\.25 \.\. 5\)"):
            engine.privacy_params(s, engine.prepare(SQL).analysis)  # type: ignore[arg-type]
        s = SessionContext(analyst="analyst", epsilon=Fraction(1, 4))
        assert engine.privacy_params(s, engine.prepare(SQL).analysis)[0] == Fraction(1, 4)  # type: ignore[arg-type]
    finally:
        engine.close()


def test_policy_default_epsilon_must_respect_the_minimum() -> None:
    assert Defaults().min_epsilon == 0.001
    with pytest.raises(ValidationError, match="min_epsilon"):
        Defaults(epsilon=0.0001)
    assert Defaults(epsilon=0.0001, min_epsilon=0.0001).epsilon == 0.0001


def test_analyst_min_epsilon_above_its_default_or_maximum_is_a_policy_error() -> None:
    analysts = demo_doc()["analysts"]
    analyst = {**analysts["analyst"], "min_epsilon": 2.0}  # above the default epsilon (1.0)
    with pytest.raises(PolicyError, match="default_epsilon 1 is below the minimum"):
        build_policy(fixed_bounds=True, analysts={**analysts, "analyst": analyst})
    analyst.update(min_epsilon=2.0, default_epsilon=2.0, max_epsilon=1.5)
    with pytest.raises(PolicyError, match="max_epsilon 1.5 is below the minimum"):
        build_policy(fixed_bounds=True, analysts={**analysts, "analyst": analyst})

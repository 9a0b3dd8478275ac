"""The engine charges the ledger: repeats are free, exhausted budgets refuse (53400)."""

from __future__ import annotations

import uuid
from fractions import Fraction

import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.policy import parse_policy
from dpsql.session import SessionContext

POLICY = """
tables:
  purchases:
    privacy_unit: user_id
    max_rows_per_unit: 10
    max_groups_per_unit: 5
    columns:
      user_id: {type: integer, identifier: true}
      amount: {type: numeric, bounds: [0, 500]}
      category: {type: text, keys: [books, clothing, electronics, groceries, travel]}
analysts:
  alice: {budget: {epsilon: 3}}
  bob: {budget: {epsilon: 3}}
"""


@pytest.fixture
def charged(demo_dsn: str):  # type: ignore[no-untyped-def]
    policy = parse_policy(POLICY)
    ledger = Ledger.open(demo_dsn, policy, schema=f"dpsql_t{uuid.uuid4().hex[:8]}")
    e = Engine(policy, demo_dsn, ledger=ledger, pool_size=2)
    yield e
    e.close()
    ledger.close()


def q(e: Engine, sql: str, analyst: str = "alice", eps: str = "1"):  # type: ignore[no-untyped-def]
    return e.execute(e.prepare(sql), SessionContext(analyst=analyst, epsilon=Fraction(eps)))


def test_repeats_are_free_and_identical(charged: Engine) -> None:
    sql = "SELECT category, COUNT(*), AVG(amount) FROM purchases GROUP BY category"
    first = q(charged, sql)
    assert not first.cached
    for _ in range(5):  # 5 more asks at epsilon 1 would exceed the budget of 3 if charged
        again = q(charged, sql.replace("COUNT(*)", "count(*)") + " ")
        assert again.cached and again.rows == first.rows


def test_equivalent_spellings_are_free_repeats(charged: Engine) -> None:
    """newcomer21 #27: ``GROUP BY 1`` and ``GROUP BY category`` (and the table's name or alias
    as a qualifier) are one query, one charge; another position or an output alias that
    PostgreSQL reads as another column stays another query, charged on its own."""
    first = q(charged, "SELECT category, AVG(amount) FROM purchases GROUP BY category")
    assert not first.cached
    for same in (
        "SELECT category, AVG(amount) FROM purchases GROUP BY 1",
        "SELECT p.category, avg(p.amount) AS a FROM purchases p GROUP BY 1",
        "SELECT purchases.category, AVG(amount) FROM purchases GROUP BY purchases.category",
    ):
        again = q(charged, same)
        assert again.cached and again.rows == first.rows, same
    # the negative direction in full: tests/fixtures/canonical.sql (GROUP BY 2, an alias)
    assert not q(
        charged, "SELECT category, AVG(amount) FROM purchases WHERE amount > 1 GROUP BY 1"
    ).cached
    spent = [s.epsilon_spent for s in charged.ledger.remaining("alice") if s.budget == "analyst"]
    assert [Fraction(x) for x in spent] == [2]  # two queries at epsilon 1


def test_budget_exhausted(charged: Engine) -> None:
    for i in range(3):
        q(charged, f"SELECT COUNT(*) FROM purchases WHERE amount > {i}")
    with pytest.raises(DpsqlError) as e:
        q(charged, "SELECT COUNT(*) FROM purchases WHERE amount > 99")
    assert e.value.sqlstate == "53400"
    assert q(charged, "SELECT COUNT(*) FROM purchases WHERE amount > 99", analyst="bob").rows


def test_refused_query_costs_nothing(charged: Engine) -> None:
    for _ in range(5):
        with pytest.raises(DpsqlError):
            q(charged, "SELECT amount FROM purchases")
    assert q(charged, "SELECT COUNT(*) FROM purchases", eps="3").rows


def test_analysts_see_their_budget_and_history(charged: Engine) -> None:
    q(charged, "SELECT COUNT(*) FROM purchases")
    s = SessionContext(analyst="alice")
    r = charged.execute(charged.prepare("SELECT * FROM dpsql.budget"), s)
    by = {row[0]: row for row in r.rows}
    names = [c.name for c in r.columns]
    assert float(by["analyst"][names.index("epsilon_spent")]) == 1
    assert float(by["analyst"][names.index("epsilon_remaining")]) == 2
    r = charged.execute(
        charged.prepare("SELECT fingerprint, epsilon, cached FROM dpsql.history"), s
    )
    assert [(float(e), c) for _, e, c in r.rows] == [(1.0, False)]
    r = charged.execute(
        charged.prepare("SELECT * FROM dpsql.history"), SessionContext(analyst="bob")
    )
    assert r.rows == []  # bob never sees alice's releases
    (show,) = charged.execute(charged.prepare("SHOW dpsql.budget"), s).rows[0]
    assert "epsilon 2 of 3" in show
    with pytest.raises(DpsqlError):
        charged.execute(charged.prepare("SELECT * FROM dpsql.release"), s)


def test_repeat_at_another_confidence_says_so(charged: Engine) -> None:
    sql = "SELECT COUNT(*), AVG(amount) FROM purchases WHERE amount > 4"
    s = SessionContext(analyst="alice", epsilon=Fraction(1))
    first = charged.execute(charged.prepare(sql), s)
    s.confidence = 0.5
    again = charged.execute(charged.prepare(sql), s)
    assert again.cached and again.rows == first.rows and again.intervals == first.intervals
    assert any("confidence 0.95" in n for n in again.notices)

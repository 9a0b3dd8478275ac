"""Identical statements run at once in different sessions (a dashboard's tiles) share one
release, charged once: the first is charged, the others wait for its release and get it as free
repeats, recorded as such, exactly as a sequential repeat (was: all three got the same answer
and the dataset was charged 0.9 for it, three times 0.3).

Real engine, ledger and PostgreSQL (demo data), three psycopg sessions through the wire server
released together by a barrier; deterministic (charges and history, whatever the noise).
"""

from __future__ import annotations

import threading
import uuid
from fractions import Fraction
from typing import Any

import psycopg

from dpsql.budget.ledger import Ledger
from tests.helpers import analyst_dsn, served_engine

SQL = (
    "SELECT region, COUNT(*) FROM purchases WHERE quantity <= 2 AND amount >= 0.7 "
    "GROUP BY region ORDER BY region"
)


def _dataset_spent(ledger: Ledger) -> Fraction:
    return max(
        Fraction(s.epsilon_spent) for s in ledger.remaining("analyst") if s.budget == "dataset"
    )


def test_concurrent_identical_statements_are_charged_once(demo_dsn: str, demo_policy: Any) -> None:
    ledger = Ledger.open(demo_dsn, demo_policy, schema=f"dpsql_cr{uuid.uuid4().hex[:8]}")
    try:
        with served_engine(demo_policy, demo_dsn, ledger=ledger) as srv:
            conns = [psycopg.connect(analyst_dsn(srv.port), autocommit=True) for _ in range(3)]
            try:
                for c in conns:
                    c.execute("SET dpsql.epsilon = 0.3")
                before = _dataset_spent(ledger)
                barrier = threading.Barrier(len(conns))
                answers: list[Any] = [None] * len(conns)

                def run(i: int) -> None:
                    barrier.wait()
                    answers[i] = conns[i].execute(SQL).fetchall()

                threads = [threading.Thread(target=run, args=(i,)) for i in range(len(conns))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=120)
                assert all(a is not None for a in answers), answers
                spent = _dataset_spent(ledger) - before
            finally:
                for c in conns:
                    c.close()
        states = sorted(h.state for h in ledger.history("analyst") if h.statement == SQL)
    finally:
        ledger.close()
    assert answers[0] == answers[1] == answers[2]
    assert spent == Fraction(3, 10)  # one release, charged once
    assert states == ["committed", "repeat", "repeat"], states

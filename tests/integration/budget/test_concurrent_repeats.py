"""Identical statements run at once in different sessions (a dashboard's tiles) share one
release, charged once: the first is charged, the others wait for its release and get it as free
repeats, recorded as such, exactly as a sequential repeat (was: all three got the same answer
and the dataset was charged 0.9 for it, three times 0.3).

Real engine, ledger and PostgreSQL (demo data), three psycopg sessions through the wire server
released together by a barrier; deterministic (charges and history, whatever the noise).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import psycopg

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, served_engine
from tests.policies import PolicyMaker, private_table

SQL = (
    "SELECT region, COUNT(*) FROM purchases WHERE quantity <= 2 AND amount >= 0.7 "
    "GROUP BY region ORDER BY region"
)


def _dataset_spent(ledger: Ledger) -> Fraction:
    return max(
        Fraction(s.epsilon_spent) for s in ledger.remaining("analyst") if s.budget == "dataset"
    )


def _at_once(
    policy: Any, dsn: str, sessions: int, epsilon: str, sql: str
) -> tuple[list[Any], Fraction, list[Any]]:
    """``sql`` run at once (a barrier) in ``sessions`` wire sessions at ``SET dpsql.epsilon =
    epsilon``, through a served engine with a ledger of its own: each session's answer (its rows
    sorted), what the dataset was charged for them, and the statement's history rows."""
    ledger = Ledger.open(dsn, policy, schema=f"dpsql_cr{uuid.uuid4().hex[:8]}")
    try:
        with served_engine(policy, dsn, ledger=ledger) as srv:
            conns = [
                psycopg.connect(analyst_dsn(srv.port), autocommit=True) for _ in range(sessions)
            ]
            try:
                for c in conns:
                    c.execute(f"SET dpsql.epsilon = {epsilon}")
                before = _dataset_spent(ledger)
                barrier = threading.Barrier(len(conns))
                answers: list[Any] = [None] * len(conns)

                def run(i: int) -> None:
                    barrier.wait()
                    answers[i] = sorted(conns[i].execute(sql).fetchall())

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
        rows = [h for h in ledger.history("analyst") if h.statement == sql]
    finally:
        ledger.close()
    return answers, spent, rows


def test_concurrent_identical_statements_are_charged_once(demo_dsn: str, demo_policy: Any) -> None:
    answers, spent, rows = _at_once(demo_policy, demo_dsn, 3, "0.3", SQL)
    assert answers[0] == answers[1] == answers[2]
    assert spent == Fraction(3, 10)  # one release, charged once
    assert sorted(h.state for h in rows) == ["committed", "repeat", "repeat"], rows


def test_another_analysts_identical_statement_does_not_wait(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> None:
    """review21: under ``repeats: analyst`` two analysts never share a release, but the second
    of two identical statements waited in dpsql for the other analyst's release to end (one
    in-flight slot per repeat key): its delay told it that another analyst was running the very
    same statement, and when that ended. Now each analyst's statement goes its own way: both
    reach PostgreSQL. Deterministic: a table lock holds both measurements in PostgreSQL, where
    pg_locks shows each one waiting (before: one waiter, the other held in dpsql)."""
    dsn = make_db("crwait")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t AS SELECT u, u % 3 AS g FROM generate_series(1, 30) u")
    columns = {"g": {"type": "integer", "keys": [0, 1, 2]}}
    pf = make_policy("crwait", tables={"public.t": private_table("u", columns)}, public_tables=[])
    assert pf.policy.repeats == "analyst"
    ledger = Ledger.open(dsn, pf.policy, schema=f"dpsql_crw{uuid.uuid4().hex[:8]}")
    engine = Engine(pf.policy, dsn, ledger, pool_size=4)
    sql = "SELECT g, COUNT(*) FROM t GROUP BY g"
    try:
        # the checks before the charge (types, catalog) once, at another epsilon (another key)
        engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
        done: dict[str, Any] = {}

        def run(who: str) -> None:
            try:
                done[who] = engine.execute(
                    engine.prepare(sql, who), SessionContext(who, Fraction(1, 2))
                ).rows
            except BaseException as e:  # (reported by the assertions below)
                done[who] = e

        with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as holder:
            holder.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
            threads = [threading.Thread(target=run, args=(w,)) for w in ("analyst", "examples")]
            for th in threads:
                th.start()
            waiting, deadline = 0, time.monotonic() + 90  # (a guard, not a measurement)
            while waiting < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
                waiting = admin.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 't'::regclass"
                ).fetchone()[0]  # type: ignore[index]
            holder.rollback()  # the lock goes: both statements finish
            for th in threads:
                th.join(timeout=120)
    finally:
        engine.close()
        ledger.close()
    assert waiting == 2, waiting
    assert all(isinstance(done.get(w), list) for w in ("analyst", "examples")), done


AUTO_SQL = (
    "SELECT category, COUNT(*), AVG(quantity) FROM purchases WHERE quantity <= 7 GROUP BY category"
)


def test_concurrent_statements_choosing_auto_bounds_are_charged_once(
    demo_dsn: str, demo_policy_auto: Any
) -> None:
    """newcomer21 #28: with the shipped policy (``max_rows_per_unit: auto``) four sessions at
    ``SET dpsql.epsilon = 0.15`` running one new statement at once (a dashboard's tiles) got one
    answer and were charged four times (4 x the bound choices + 4 x laplace = 0.6): the
    statement's bound choices and answer were reserved before the in-flight slot was taken.
    Now the first chooses and answers (0.15 in all), the three others are free repeats."""
    answers, spent, rows = _at_once(demo_policy_auto, demo_dsn, 4, "0.15", AUTO_SQL)
    assert all(a == answers[0] for a in answers)
    assert spent == Fraction(15, 100), spent  # one statement's epsilon, charged once
    assert sorted(h.state for h in rows if h.mechanism != "auto_bound") == [
        "committed", "repeat", "repeat", "repeat",
    ], rows  # fmt: skip
    assert sum(h.mechanism == "auto_bound" for h in rows) == 2, rows  # chosen once


TREE_SQL = (
    "SELECT category, SUM(revenue) FROM (SELECT category, region, SUM(amount) AS revenue "
    "FROM purchases WHERE quantity <= 6 GROUP BY 1, 2) t GROUP BY category"
)


def test_concurrent_statements_of_several_parts_are_charged_once(
    demo_dsn: str, demo_policy_auto: Any
) -> None:
    """The same for a statement of several parts (a virtual dataset re-aggregated: a tree
    statement, dpsql.execute.tree), which took no in-flight slot at all: three sessions at once
    were charged three times for one answer."""
    answers, spent, _ = _at_once(demo_policy_auto, demo_dsn, 3, "0.2", TREE_SQL)
    assert all(a == answers[0] for a in answers)
    assert spent == Fraction(1, 5), spent  # one statement's epsilon, charged once

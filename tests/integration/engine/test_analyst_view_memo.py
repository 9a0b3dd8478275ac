"""The engine's SQL memo never hands one analyst's analysis (or its SQL) to another analyst's view.

An analyst denied the public table a ``keys_from`` reads sees that column without a key source:
GROUP BY on it goes through partition selection, and the denied table's values are never released
as group keys (:meth:`dpsql.policy.model.Policy.for_analyst`). The same statement text prepared
under the whole policy has another analysis (the keys come from the public table). Memo entries
keyed by the text alone (the resolved ``auto`` bounds, the ``auto`` items, a grouping set's SQL)
handed the open analyst's analysis to the restricted one: it then listed ``secret_zone``, a value
of the table it may not read, or (grouping sets) read its partition selection from the open
analyst's SQL, whose columns differ, and dropped every group.

Deterministic: the zero-noise source keeps every group with a unit and adds nothing; each
statement is run at another epsilon so that no answer is a free repeat from the ledger.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

UNITS = 3000
BUDGET = {"epsilon": 1000, "delta": 0.1}


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("views")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text, v numeric)")
        conn.execute("CREATE TABLE zones (code text)")
        conn.execute("INSERT INTO zones VALUES ('a'), ('b'), ('secret_zone')")
        conn.execute(
            "INSERT INTO t SELECT u, CASE WHEN u % 2 = 0 THEN 'a' ELSE 'b' END, u % 7 "
            f"FROM generate_series(1, {UNITS}) u"
        )
    return dsn


def _engine(dsn: str, make_policy: PolicyMaker, rows: int | None) -> Iterator[Engine]:
    cols = {
        "g": {"type": "text", "keys_from": "public.zones.code"},
        "v": {"type": "numeric", "bounds": [0, 10]},
    }
    pf = make_policy(
        f"views{rows}",
        base={"version": 1},
        tables={"public.t": private_table("uid", cols, rows=rows, groups=2)},
        public_tables=["public.zones"],
        analysts={
            "open": {"budget": BUDGET},
            "closed": {"budget": BUDGET, "deny": ["public.zones"]},
        },
    )
    ledger = Ledger.open(dsn, pf.policy, schema=f"dpsql_av{uuid.uuid4().hex[:8]}")
    e = Engine(pf.policy, dsn, ledger, pool_size=2, noise=EXACT)
    yield e
    e.close()
    ledger.close()


@pytest.fixture
def auto_engine(dsn: str, make_policy: PolicyMaker) -> Iterator[Engine]:
    yield from _engine(dsn, make_policy, None)  # auto R: stored bounds, reused


@pytest.fixture
def fixed_engine(dsn: str, make_policy: PolicyMaker) -> Iterator[Engine]:
    yield from _engine(dsn, make_policy, 2)


def _run(engine: Engine, sql: str, who: str, eps: int) -> list[tuple[object, ...]]:
    p = engine.prepare(sql, who)
    return [tuple(r) for r in engine.execute(p, SessionContext(who, Fraction(eps))).rows]


OPEN = {("a", UNITS // 2), ("b", UNITS // 2), ("secret_zone", 0)}
CLOSED = {("a", UNITS // 2), ("b", UNITS // 2)}


def test_stored_auto_bounds_keep_each_analysts_view(auto_engine: Engine) -> None:
    sql = "SELECT g, COUNT(*) FROM t GROUP BY g"
    # the open analyst measures its bounds, then reuses them (the memo of its resolved analysis)
    for eps in (1, 2):
        assert {(r[0], int(r[1])) for r in _run(auto_engine, sql, "open", eps)} == OPEN
    # the restricted analyst measures its own, then reuses them: its own view each time
    for eps in (1, 3):
        assert {(r[0], int(r[1])) for r in _run(auto_engine, sql, "closed", eps)} == CLOSED


def test_grouping_set_sql_keeps_each_analysts_view(fixed_engine: Engine) -> None:
    sql = "SELECT g, COUNT(*) FROM t GROUP BY ROLLUP(g)"
    total = (None, UNITS)
    for eps in (1, 2):
        got = {(r[0], int(r[1])) for r in _run(fixed_engine, sql, "open", eps)}
        assert got == {*OPEN, total}
    for eps in (1, 3):
        got = {(r[0], int(r[1])) for r in _run(fixed_engine, sql, "closed", eps)}
        assert got == {*CLOSED, total}

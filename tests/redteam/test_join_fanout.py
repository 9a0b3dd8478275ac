"""Joins must not let ONE row decide whether a private query times out (57014, an exact bit).

Found by the red team: with R = 25 rows per unit kept before the join, seven copies of the demo's
purchases joined on the unit turned the one row passing ``WHERE t0.amount > 1249990`` into
25^6 = 2.4e8 joined rows, so the query timed out after 30 s if and only if that row existed
(1.5 s without it). The analyzer now refuses R^k > MAX_JOINED_ROWS_PER_UNIT and more than
MAX_JOINED_TABLES tables (dpsql.sql.select_from.check_join_size), before anything runs.

A PUBLIC table's fan-out multiplies each private row too: one row of t joined three times to a
public table of 3,000 rows sharing one key made 2.7e10 joined rows, a timeout iff the row existed.
Each public table's fan-out (rows per key value, or its size without a key equality) is now read
from the public table and R^k times the fan-outs is limited (dpsql.sql.join_fanout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError, StatementTooComplex
from dpsql.session import SessionContext
from dpsql.sql.select_from import MAX_JOINED_ROWS_PER_UNIT, MAX_JOINED_TABLES
from tests.policies import PolicyMaker, private_table

R = 5
PUBLIC_ROWS = 3000


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Engine]]:
    """Engines on D (100 light units with x = 0, plus ONE row of unit 0 with x = 1) and on D'
    (the same without unit 0), with a public table p of PUBLIC_ROWS rows, all with k = 1, and a
    public table q of PUBLIC_ROWS rows with unique k (a dimension table)."""
    policy = make_policy(
        "fanout",
        tables={
            "public.t": private_table("u", {"x": {"type": "integer", "bounds": [0, 1]}}, rows=R)
        },
        public_tables=["public.p", "public.q"],
    ).policy
    engines = []
    for with_unit in (True, False):
        dsn = make_db("rtfan")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (u integer, x integer)")
            conn.execute("INSERT INTO t SELECT u, 0 FROM generate_series(1, 100) AS u")
            if with_unit:
                conn.execute("INSERT INTO t VALUES (0, 1)")
            conn.execute("CREATE TABLE p (k integer)")
            conn.execute("INSERT INTO p SELECT 1 FROM generate_series(1, %s)", (PUBLIC_ROWS,))
            conn.execute("CREATE TABLE q (k integer)")
            conn.execute("INSERT INTO q SELECT g FROM generate_series(0, %s) AS g", (PUBLIC_ROWS,))
            conn.execute("ANALYZE t; ANALYZE p; ANALYZE q")
        engines.append(Engine(policy, dsn, pool_size=1, statement_timeout_ms=1500))
    yield engines[0], engines[1]
    for e in engines:
        e.close()


def _self_join(k: int) -> str:
    joins = " ".join(f"JOIN t t{i} ON t0.u = t{i}.u" for i in range(1, k))
    return f"SELECT COUNT(*) FROM t t0 {joins} WHERE t0.x = 1"


def test_limits_are_what_the_docstring_says() -> None:
    assert R**6 <= MAX_JOINED_ROWS_PER_UNIT < R**7
    assert MAX_JOINED_TABLES >= 6


@pytest.mark.parametrize("k", [7, 8])
def test_private_self_join_past_the_per_unit_limit_is_refused(
    neighbours: tuple[Engine, Engine], k: int
) -> None:
    engine, _ = neighbours
    with pytest.raises(StatementTooComplex) as err:
        engine.prepare(_self_join(k))
    assert err.value.sqlstate == "54001" and err.value.hint


def test_too_many_tables_are_refused(neighbours: tuple[Engine, Engine]) -> None:
    engine, _ = neighbours
    joins = " ".join(f"JOIN p p{i} ON true" for i in range(MAX_JOINED_TABLES))
    with pytest.raises(StatementTooComplex):
        engine.prepare(f"SELECT COUNT(*) FROM t {joins}")


def _outcome(engine: Engine, sql: str) -> str:
    try:
        engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    except DpsqlError as e:
        return e.sqlstate
    return "answered"


def test_self_join_within_the_limit_answers_on_both_neighbours(
    neighbours: tuple[Engine, Engine],
) -> None:
    """R^k <= the limit: unit 0's single row becomes at most R^(k-1) joined rows, no timeout."""
    d, d2 = neighbours
    sql = _self_join(6)
    assert _outcome(d, sql) == _outcome(d2, sql) == "answered"


def test_public_fanout_can_not_reveal_one_row(neighbours: tuple[Engine, Engine]) -> None:
    """Was a timeout on D only (xfail); now the same refusal on both, before anything runs."""
    d, d2 = neighbours
    sql = (
        "SELECT COUNT(*) FROM t JOIN p p1 ON p1.k = t.x JOIN p p2 ON p2.k = t.x "
        "JOIN p p3 ON p3.k = t.x WHERE t.x = 1"
    )
    assert _outcome(d, sql) == _outcome(d2, sql) == "54001"


@pytest.mark.parametrize(
    ("sql", "expect"),
    [
        # a key join: each private row matches at most one row of q, however many joins
        ("SELECT COUNT(*) FROM t JOIN q q1 ON q1.k = t.x JOIN q q2 ON t.x = q2.k", "answered"),
        ("SELECT COUNT(*) FROM t LEFT JOIN q ON q.k = t.x + 5000", "answered"),
        ("SELECT COUNT(*) FROM q JOIN t ON q.k = t.x", "answered"),
        ("SELECT COUNT(*) FROM t, q q1, q q2 WHERE q1.k = t.x AND t.x = q2.k", "answered"),
        # no key equality: the fan-out is the table's size (R * 3001 is under the limit,
        # R * 3001^2 is not)
        ("SELECT COUNT(*) FROM t JOIN q ON q.k > t.x", "answered"),
        ("SELECT COUNT(*) FROM t JOIN q q1 ON q1.k > t.x JOIN q q2 ON q2.k > t.x", "54001"),
        ("SELECT COUNT(*) FROM t CROSS JOIN q q1 CROSS JOIN q q2", "54001"),
        ("SELECT COUNT(*) FROM t JOIN q q1 ON q1.k = q1.k JOIN q q2 ON q2.k IS NOT NULL", "54001"),
        (
            "SELECT COUNT(*) FROM t JOIN q q1 ON q1.k = t.x OR true JOIN q q2 ON (q2.k = t.x OR true)",
            "54001",
        ),
        # a shared key: 3000 rows per value, times R = 5
        ("SELECT COUNT(*) FROM t JOIN p ON p.k = t.x", "answered"),
        ("SELECT COUNT(*) FROM t JOIN p p1 ON p1.k = t.x JOIN p p2 ON p2.k = t.x", "54001"),
    ],
)
def test_public_fanout_limit(neighbours: tuple[Engine, Engine], sql: str, expect: str) -> None:
    d, d2 = neighbours
    assert _outcome(d, sql) == _outcome(d2, sql) == expect


def test_fanout_is_read_again_after_the_public_table_changes(
    neighbours: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dimension table that later gets many rows per key is seen (runs last: q is restored)."""
    from dpsql.execute import shadows

    d, _ = neighbours
    sql = "SELECT COUNT(*) FROM t JOIN q q1 ON q1.k = t.x JOIN q q2 ON q2.k = t.x"
    assert _outcome(d, sql) == "answered"
    dsn = d.backend.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO q SELECT 1 FROM generate_series(1, %s)", (PUBLIC_ROWS,))
    try:
        # (within the refresh interval the old fan-out still applies: REFRESH_S bounds that gap)
        monkeypatch.setattr(shadows, "REFRESH_S", 0.0)
        assert _outcome(d, sql) == "54001"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM q WHERE k = 1; INSERT INTO q VALUES (1)")

"""Joins of private tables on their units must not let one unit multiply the join's work.

``SELECT COUNT(*) FROM t a JOIN t b ON a.u = b.u JOIN t c ON b.u = c.u`` is accepted (a join on
the privacy units) and was bounded only *after* the join, so PostgreSQL first built n(u)^3 rows
for a unit with n(u) rows. On the demo data the five "whales" (400 rows each) made that query
run past the statement timeout while the same query without them finished: whether it timed out
(57014, an exact bit, not noised) said whether some unit had many rows matching the WHERE
clause; charging epsilon for the timeout does not make that bit private, and padding can't hide
an error. Each private table of such a join now keeps at most R rows per unit before the join
(dpsql.sql.rewrite.source_rows.capped_table). Measured with EXPLAIN ANALYZE of the
rewritten SQL: the join's intermediate rows (deterministic, no timing).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

R = 5
LIGHT_UNITS, LIGHT_ROWS, HEAVY_ROWS = 100, 2, 400


@pytest.fixture(scope="module")
def join_engine(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, str]]:
    dsn = make_db("rtjoin")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer, x integer)")
        conn.execute(
            "INSERT INTO t SELECT u, 1 FROM generate_series(1, %s) AS u, generate_series(1, %s)",
            (LIGHT_UNITS, LIGHT_ROWS),
        )
        conn.execute("INSERT INTO t SELECT 0, 1 FROM generate_series(1, %s)", (HEAVY_ROWS,))
        conn.execute("ANALYZE t")
    pf = make_policy(
        "join",
        tables={
            "public.t": private_table("u", {"x": {"type": "integer", "bounds": [0, 1]}}, rows=R)
        },
        public_tables=[],
    )
    e = Engine(pf.policy, dsn, pool_size=1)
    yield e, dsn
    e.close()


def _max_join_rows(plan: Any) -> int:
    node = plan["Plan"] if "Plan" in plan else plan
    rows = int(node.get("Actual Rows", 0)) if "Join" in node.get("Node Type", "") else 0
    return max([rows, *(_max_join_rows(p) for p in node.get("Plans", []))])


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("SELECT COUNT(*) FROM t a JOIN t b ON a.u = b.u", 2),
        ("SELECT SUM(a.x) FROM t a JOIN t b ON a.u = b.u WHERE a.x = 1 AND b.x >= 0", 2),
        ("SELECT COUNT(*) FROM t a LEFT JOIN t b ON a.u = b.u", 2),
        ("SELECT COUNT(*) FROM t a JOIN t b ON a.u = b.u JOIN t c ON b.u = c.u", 3),
    ],
)
def test_one_unit_cannot_multiply_the_join_work(
    join_engine: tuple[Engine, str], sql: str, tables: int
) -> None:
    engine, dsn = join_engine
    p = engine.prepare(sql)
    assert p.analysis is not None
    text = engine.private_sql(p, p.analysis)
    with psycopg.connect(dsn) as conn:
        (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text).fetchone()  # type: ignore[misc]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    # each unit's rows capped at R per table before the join: at most R^k rows per unit
    bound = LIGHT_UNITS * min(LIGHT_ROWS, R) ** tables + R**tables
    assert _max_join_rows(plan[0]) <= bound


def test_capped_join_still_counts_every_light_unit(join_engine: tuple[Engine, str]) -> None:
    """Zero noise: light units (2 rows, under the cap) keep every joined row; the heavy unit
    counts R rows (LEAST(n, R) per unit, as before the cap)."""
    engine, dsn = join_engine
    exact = Engine(engine.policy, dsn, pool_size=1, noise=EXACT)
    try:
        p = exact.prepare("SELECT COUNT(*) FROM t a JOIN t b ON a.u = b.u WHERE a.x = 1")
        rows = exact.execute(p, SessionContext(analyst="analyst")).rows
    finally:
        exact.close()
    assert rows == [(LIGHT_UNITS * min(LIGHT_ROWS**2, R) + R,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*), SUM(a.x) FROM t a JOIN t b ON a.u = b.u",
        "SELECT COUNT(*), SUM(b.x) FROM t a JOIN t b ON a.u = b.u JOIN t c ON b.u = c.u "
        "WHERE a.x = 1",
    ],
)
def test_removing_the_heavy_unit_moves_each_measure_by_at_most_r(
    join_engine: tuple[Engine, str], sql: str
) -> None:
    """Light units are under the cap (deterministic), so the difference is the heavy unit's
    contribution, whichever of its rows the cap kept: at most R per measure (G = 1, |x| <= 1)."""
    engine, dsn = join_engine
    p = engine.prepare(sql)
    assert p.analysis is not None
    text = engine.private_sql(p, p.analysis)
    with psycopg.connect(dsn) as conn:
        full = conn.execute(text).fetchone()
        conn.execute("DELETE FROM t WHERE u = 0")
        less = conn.execute(text).fetchone()
        conn.rollback()
    assert full is not None and less is not None
    assert all(0 <= f - g <= R for f, g in zip(full, less, strict=True)), (full, less)

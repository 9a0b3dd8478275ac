"""Table functions in FROM: answered as PostgreSQL answers them where they read no private row,
refused otherwise.

A function in FROM is no relation to PostgreSQL's parser (a RangeFunction, not a RangeVar), so
the relations check of dpsql.sql.pg_reading sees none; what it reads is in its arguments (a
subquery, a LATERAL reference to a private row), or in its body (a function the database defines:
``CREATE FUNCTION leak() RETURNS SETOF text AS 'SELECT email FROM purchases'``), or in a string it
runs (``query_to_xml('SELECT email FROM purchases', ...)``, ``ts_stat``). Each probe below is run
through the engine and checked against PostgreSQL 15: a public answer must be PostgreSQL's to the
same text and its plan (EXPLAIN) must read no table but ``regions``; a private one must be refused
(0A000 / 42501 / 42883) before anything runs upstream, or answered through the DP pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.execute.prepared import PublicQuery
from dpsql.session import SessionContext
from tests.helpers import EXACT

# over no table or public ones: PostgreSQL's answer, no private relation in the plan
PUBLIC = [
    "SELECT * FROM generate_series(1, 3)",
    "SELECT g FROM generate_series(1, 3) AS g",
    "SELECT * FROM unnest(ARRAY[1, 2]) AS u(x)",
    "SELECT * FROM unnest(ARRAY[1, 2], ARRAY['a', 'b']) AS u(n, s)",
    "SELECT * FROM ROWS FROM (generate_series(1, 2), generate_series(1, 3)) AS r(a, b)",
    "SELECT * FROM generate_series(1, 3) WITH ORDINALITY AS g(v, n)",
    "SELECT r.code, g FROM regions r, LATERAL generate_series(1, 2) g ORDER BY 1, 2",
    "SELECT r.code, g FROM regions r CROSS JOIN LATERAL unnest(string_to_array(r.name, ' ')) g "
    "ORDER BY 1",
    "SELECT * FROM regions r LEFT JOIN LATERAL unnest(ARRAY[r.code]) u ON true ORDER BY 1",
    "SELECT * FROM generate_series(DATE '2025-01-01', DATE '2025-01-03', INTERVAL '1 day') d",
    "SELECT * FROM pg_catalog.generate_series(1, 3) AS purchases",
    'SELECT * FROM "generate_series"(1, 2), (VALUES (1)) v',
]

# a private table read through a table function: refused, with the SQLSTATE, before anything
# ran on a private row
PRIVATE = [
    ("SELECT COUNT(*) FROM purchases p, LATERAL generate_series(1, p.quantity) g", "0A000"),
    (
        "SELECT COUNT(*) FROM purchases p CROSS JOIN LATERAL unnest(string_to_array(p.email, '@')) g",
        "0A000",
    ),  # fmt: skip
    ("SELECT g, COUNT(*) FROM purchases p, unnest(ARRAY['a', 'b']) g GROUP BY g", "0A000"),
    ("SELECT COUNT(*) FROM generate_series(1, 10) g JOIN purchases p ON p.quantity = g", "0A000"),
    ("SELECT * FROM generate_series(1, 10) g WHERE g IN (SELECT quantity FROM purchases)", "0A000"),
    (
        "SELECT * FROM generate_series(1, 3) g, LATERAL (SELECT email FROM purchases OFFSET g) x",
        "0A000",
    ),  # fmt: skip
    ("SELECT * FROM unnest(ARRAY(SELECT email FROM purchases)) e", "0A000"),
    ("SELECT * FROM unnest((SELECT array_agg(email) FROM purchases)) e", "42501"),
    ("SELECT * FROM unnest(ARRAY[(SELECT p FROM purchases p LIMIT 1)])", "0A000"),
    (
        "SELECT * FROM regexp_split_to_table((SELECT string_agg(email, ',') FROM purchases), ',')",
        "42501",
    ),  # fmt: skip
    (
        "SELECT COUNT(*) FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM generate_series(1, p.quantity) g WHERE g > 5)",
        "0A000",
    ),  # fmt: skip
    ("SELECT SUM(x) FROM (SELECT unnest(ARRAY[amount, amount]) AS x FROM purchases) s", "0A000"),
    ("SELECT * FROM query_to_xml('SELECT email FROM purchases', true, false, '')", "42501"),
    ("SELECT table_to_xml('purchases', true, false, '') FROM regions", "42501"),
    ("SELECT * FROM ts_stat('SELECT to_tsvector(email) FROM purchases')", "42501"),
    ("SELECT * FROM json_populate_recordset(NULL::purchases, '[{\"amount\": 1}]')", "42501"),
    ("SELECT * FROM dblink('dbname=demo', 'SELECT email FROM purchases') AS t(e text)", "42501"),
    ("SELECT * FROM leak()", "42883"),  # the database's own function, reading purchases
    ("SELECT * FROM ROWS FROM (leak()) AS r(e)", "42883"),
    ("SELECT * FROM generate_series(1, 2), LATERAL public.leak() l", "42501"),
    ("SELECT leak_n(3) FROM regions", "42883"),
]


@pytest.fixture(scope="module")
def dsn(make_demo_db: Callable[[str], str]) -> str:
    """The demo database with two functions of the database's own that read purchases."""
    dsn = make_demo_db("tablefn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION public.leak() RETURNS SETOF text LANGUAGE sql "
            "AS $$SELECT email FROM purchases$$"
        )
        conn.execute(
            "CREATE FUNCTION public.leak_n(int) RETURNS int LANGUAGE sql "
            "AS $$SELECT count(*)::int FROM purchases WHERE quantity = $1$$"
        )
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, dsn, pool_size=1, noise=EXACT)
    yield e
    e.close()


def _plan_reads(dsn: str, sql: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        plan = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}").fetchall()[0][0]
    names: set[str] = set()
    stack: list[Any] = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "Relation Name" in node:
                names.add(node["Relation Name"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names


@pytest.mark.parametrize("sql", PUBLIC)
def test_a_table_function_over_public_rows_is_postgresqls(
    engine: Engine, dsn: str, sql: str
) -> None:
    prepared = engine.prepare(sql, "analyst")
    assert isinstance(prepared, PublicQuery)
    got = [tuple(r) for r in engine.execute(prepared, SessionContext("analyst")).rows]
    assert got == [tuple(r) for r in engine.backend.run(sql, private=False).rows]
    assert _plan_reads(dsn, sql) <= {"regions"}


@pytest.mark.parametrize(("sql", "state"), PRIVATE)
def test_a_table_function_reading_private_rows_is_refused(
    engine: Engine, sql: str, state: str
) -> None:
    ran: list[str] = []
    run = engine.backend.run

    def record(query: str, params: Any = None, **kw: Any) -> Any:
        ran.append(query)
        return run(query, params, **kw)

    engine.backend.run = record  # type: ignore[method-assign]
    try:
        with pytest.raises(DpsqlError) as e:
            engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst"))
    finally:
        engine.backend.run = run  # type: ignore[method-assign]
    assert e.value.sqlstate == state, e.value
    assert not any("purchases" in q and "pg_catalog" not in q for q in ran), ran

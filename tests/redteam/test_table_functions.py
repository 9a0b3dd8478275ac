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
from tests.owner import as_owner, dpsql_rows, owner_rows

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
    # bi28 (const27's findings): ROWS FROM beside a private table was 42P01 'relation "" does
    # not exist'; a private aggregate correlated with a LATERAL function's outer row 42703
    ("SELECT 1 FROM purchases CROSS JOIN ROWS FROM (generate_series(1, 2)) r", "0A000"),
    (
        "SELECT r.code, g FROM regions r CROSS JOIN LATERAL generate_series(1, "
        "(SELECT COUNT(*) FROM purchases p WHERE p.region = r.code)) g",
        "0A000",
    ),  # fmt: skip
]


@pytest.fixture(scope="module")
def dsn(make_demo_db: Callable[[str], str]) -> str:
    """The demo database with two functions of the database's own that read purchases."""
    return as_owner(
        make_demo_db("tablefn"),
        "CREATE FUNCTION public.leak() RETURNS SETOF text LANGUAGE sql "
        "AS $$SELECT email FROM purchases$$",
        "CREATE FUNCTION public.leak_n(int) RETURNS int LANGUAGE sql "
        "AS $$SELECT count(*)::int FROM purchases WHERE quantity = $1$$",
    )


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
    assert dpsql_rows(engine, sql) == owner_rows(engine, sql)
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


# bi28: refusals (and answers) in PostgreSQL's terms where the words were wrong (const27's findings)
WORDS = [
    # a set-returning statistics function: was the catalog rewrite's NULL::bigint in FROM (one
    # row, one column; 42601 with pg_catalog.), PostgreSQL returns the server's activity
    (
        "SELECT * FROM pg_stat_get_activity(NULL) a",
        "0A000",
        "function pg_stat_get_activity() is not available through dpsql",
        "SELECT * FROM pg_stat_activity lists your own sessions",
    ),
    (
        "SELECT * FROM pg_catalog.pg_stat_get_wal_senders()",
        "0A000",
        "rows of the server's activity and statistics",
        "pg_stat_* views read as empty",
    ),
    (
        "SELECT r.code, (SELECT COUNT(*) FROM purchases p WHERE p.region = r.code) FROM regions r",
        "0A000",
        "reads r.code of the query around it (a correlated subquery)",
        "LEFT JOIN (SELECT region, COUNT(*) AS n FROM purchases GROUP BY region) c",
    ),
    (
        "SELECT 1 FROM purchases CROSS JOIN ROWS FROM (generate_series(1, 2)) r",
        "0A000",
        "only plain tables (and subqueries that filter them) are supported in FROM",
        "query the private table directly",
    ),
    (
        "SELECT COUNT(*) FROM purchases p WHERE x.region = 'N'",
        "42P01",
        'missing FROM-clause entry for table "x"',
        "",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("sql", "state", "words", "hint"), WORDS)
def test_refusals_say_what_postgresql_and_the_user_need(
    engine: Engine, sql: str, state: str, words: str, hint: str
) -> None:
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst"))
    assert e.value.sqlstate == state and words in str(e.value), e.value
    assert hint in (e.value.hint or ""), e.value.hint


def test_a_blanked_statistics_function_in_from_is_postgresqls_shape(engine: Engine) -> None:
    """A scalar size or counter function blanked to NULL keeps PostgreSQL's column name and type
    in FROM and in the select list (pg_catalog.f(...) in FROM was 42601: the rewrite wrote
    pg_catalog.CAST(NULL AS BIGINT))."""
    for sql, names in [
        ("SELECT x.* FROM pg_catalog.pg_relation_size('regions') x", ["x"]),
        ("SELECT * FROM pg_catalog.pg_stat_get_backend_pid(1)", ["pg_stat_get_backend_pid"]),
        ("SELECT pg_stat_get_backend_activity(1), pg_catalog.pg_table_size('regions')",
         ["pg_stat_get_backend_activity", "pg_table_size"]),
    ]:  # fmt: skip
        prepared = engine.prepare(sql, "analyst")
        r = engine.execute(prepared, SessionContext("analyst"))
        assert [c.name for c in r.columns] == names and [tuple(x) for x in r.rows] == [
            (None,) * len(names)
        ], sql
    r = engine.execute(
        engine.prepare("SELECT pg_stat_get_backend_activity(1) AS a", "analyst"),
        SessionContext("analyst"),
    )
    assert r.columns[0].type_oid == 25  # text, PostgreSQL's type (was bigint)

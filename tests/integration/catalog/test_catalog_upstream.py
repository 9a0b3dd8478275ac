"""The rewritten catalog queries on a real PostgreSQL: they run, hide what the policy hides, and
show no statistic measured on the data."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlglot

from dpsql.catalog.check import check_catalog_query
from dpsql.errors import DpsqlError
from tests.fixtures.catalog.collect import SCHEMA
from tests.fixtures.catalog.fixtures import CatalogQuery, all_catalog_queries
from tests.unit.catalog.test_catalog import POLICY, UNPARSABLE, parsable

# Visible: people (id, age, city declared; name and status hidden) and cities (public).
HIDDEN_WORDS = (
    "salaries", "orders", "ledger", "status", "secret comment", "hidden_nsp",
    "people_lower_name", "people_stx",
)  # fmt: skip
EXTRA = """
COMMENT ON COLUMN people.name IS 'secret comment';
CREATE SCHEMA hidden_nsp;
CREATE TABLE hidden_nsp.t (x int);
CREATE INDEX people_lower_name ON people (lower(name));
CREATE STATISTICS people_stx ON age, name FROM people;
"""


@pytest.fixture(scope="module")
def conn(make_db: Callable[[str], str]) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(make_db("catalog"), autocommit=True) as c:
        c.execute(SCHEMA)
        c.execute(EXTRA)
        yield c


def rewritten(sql: str) -> str:
    return check_catalog_query(sqlglot.parse_one(sql, read="postgres"), POLICY, "ann").sql(
        "postgres"
    )


def run(
    conn: psycopg.Connection[Any], sql: str, params: tuple[str | None, ...] = ()
) -> list[tuple[Any, ...]]:
    """Rewrite ``sql`` and run it upstream with text parameters bound as a driver would."""
    return run_rewritten(conn, rewritten(sql), params)


def run_rewritten(
    conn: psycopg.Connection[Any], sql: str, params: tuple[str | None, ...] = ()
) -> list[tuple[Any, ...]]:
    """Run the rewritten ``sql`` upstream with text parameters bound as a driver would."""
    text = sql.encode()
    res = conn.pgconn.exec_params(text, [None if p is None else p.encode() for p in params])
    if res.status not in (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK):
        raise AssertionError((res.error_message or b"").decode() + "\n" + sql)
    return [
        tuple(
            None if (v := res.get_value(r, c)) is None else v.decode() for c in range(res.nfields)
        )
        for r in range(res.ntuples)
    ]


def test_tables_listed_are_the_policys(conn: psycopg.Connection[Any]) -> None:
    rows = run(
        conn,
        "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 2",
    )
    assert rows == [
        ("public", "cities"),
        ("public", "cities_pkey"),
        ("public", "people"),
        ("public", "people_pkey"),
    ]
    rows = run(
        conn,
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1",
    )
    assert rows == [("cities",), ("people",)]
    schemas = {r[0] for r in run(conn, "SELECT nspname FROM pg_namespace")}
    # dpsql's own schema (its views dpsql.budget, dpsql.history: catalog/own_views.py) too
    assert schemas == {"pg_catalog", "information_schema", "public", "dpsql"}


def test_only_declared_columns_of_private_tables(conn: psycopg.Connection[Any]) -> None:
    rows = run(
        conn,
        "SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position",
        ("people",),
    )
    assert rows == [("id",), ("age",), ("city",)]
    rows = run(
        conn,
        "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = 'public.people'::regclass "
        "AND a.attnum > 0 ORDER BY a.attnum",
    )
    assert rows == [("id",), ("age",), ("city",)]
    cities = run(
        conn, "SELECT column_name FROM information_schema.columns WHERE table_name = 'cities'"
    )
    assert sorted(cities) == [("country",), ("name",)]


def test_statistics_are_blank(conn: psycopg.Connection[Any]) -> None:
    assert run(
        conn, "SELECT reltuples, relpages, relallvisible FROM pg_class WHERE relname = 'people'"
    ) == [("-1", "0", "0")]
    assert run(conn, "SELECT count(*) FROM pg_stats") == [("0",)]
    assert run(conn, "SELECT count(*) FROM pg_catalog.pg_statistic") == [("0",)]
    assert run(conn, "SELECT relname, n_live_tup FROM pg_stat_user_tables") == []
    assert (
        run(conn, "SELECT n_distinct, most_common_vals FROM pg_stats WHERE tablename = 'people'")
        == []
    )
    assert run(
        conn,
        "SELECT pg_relation_size('public.people'), pg_stat_get_live_tuples('public.people'::regclass)",
    ) == [(None, None)]


def test_settings_hide_paths_and_secrets(conn: psycopg.Connection[Any]) -> None:
    names = {r[0] for r in run(conn, "SELECT name FROM pg_settings")}
    assert "TimeZone" in names and "search_path" in names and "max_index_keys" in names
    for hidden in ("data_directory", "config_file", "hba_file", "primary_conninfo", "ssl_key_file"):
        assert hidden not in names
    bound = "SELECT current_setting($1::VARCHAR)"
    assert run(conn, bound, ("data_directory",)) == [(None,)]
    assert run(conn, bound, ("TimeZone",)) != [(None,)]
    assert run(conn, "SELECT current_setting('max_index_keys')") == [("32",)]


def _oid(conn: psycopg.Connection[Any], sql: str) -> str:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return str(row[0])


def test_hidden_objects_by_oid_are_null(conn: psycopg.Connection[Any]) -> None:
    view = _oid(conn, "SELECT 'public.big_orders'::regclass::oid")
    table = _oid(conn, "SELECT 'public.salaries'::regclass::oid")
    rowtype = _oid(conn, "SELECT reltype FROM pg_class WHERE relname = 'salaries'")
    con = _oid(conn, "SELECT oid FROM pg_constraint WHERE conname = 'orders_pkey'")
    people = _oid(conn, "SELECT 'public.people'::regclass::oid")
    name_att = _oid(
        conn,
        "SELECT attnum FROM pg_attribute WHERE attrelid = 'public.people'::regclass AND attname = 'name'",
    )
    assert run(conn, "SELECT pg_get_viewdef($1::oid)", (view,)) == [(None,)]
    assert run(conn, "SELECT $1::oid::regclass::text", (table,)) == [(None,)]
    with pytest.raises(AssertionError, match='42P01 relation "public.salaries" does not'):
        run(conn, "SELECT 'public.salaries'::regclass")  # a name: PostgreSQL's missing-name error
    assert run(conn, "SELECT to_regclass('public.salaries')") == [(None,)]
    assert run(conn, "SELECT format_type($1::oid, NULL)", (rowtype,)) == [("???",)]  # no such type
    assert run(conn, "SELECT pg_get_constraintdef($1::oid)", (con,)) == [(None,)]
    assert run(conn, "SELECT col_description($1::oid, $2::int)", (people, name_att)) == [(None,)]
    assert run(conn, "SELECT obj_description($1::oid, 'pg_class')", (people,)) == [
        ("one row per person",)
    ]
    bound = "SELECT obj_description($1::oid, $2)"
    assert run(conn, bound, (people, "pg_class")) == [("one row per person",)]
    assert run(conn, bound, (table, "pg_class")) == [(None,)]
    assert run(conn, "SELECT 'public.people'::regclass::text") == [("people",)]
    expr_index = _oid(conn, "SELECT 'public.people_lower_name'::regclass::oid")
    stx = _oid(conn, "SELECT oid FROM pg_statistic_ext WHERE stxname = 'people_stx'")
    assert run(conn, "SELECT pg_get_indexdef($1::oid)", (expr_index,)) == [(None,)]
    assert run(conn, "SELECT pg_get_statisticsobjdef($1::oid)", (stx,)) == [(None,)]


def test_enumerating_oids_finds_only_visible_tables(conn: psycopg.Connection[Any]) -> None:
    # every user relation's oid in this database (read directly, not through the rewrite): oids
    # are cluster-wide, so after many test databases they lie far above 16384
    (top,) = conn.execute("SELECT max(oid)::int FROM pg_class").fetchone()  # type: ignore[misc]
    rows = run(
        conn,
        f"SELECT g::regclass::text FROM generate_series(16384, {top}) AS g "
        "WHERE g::regclass::text IS NOT NULL ORDER BY 1",
    )
    names = {r[0] for r in rows}
    assert names <= {"people", "cities", "people_pkey", "cities_pkey"}
    assert {"people", "cities"} <= names


def test_refused_before_reaching_postgres(conn: psycopg.Connection[Any]) -> None:
    for sql in (
        "SELECT * FROM salaries",
        "SELECT pg_read_file('postgresql.conf')",
        "SELECT * FROM pg_authid",
    ):
        with pytest.raises(DpsqlError):
            run(conn, sql)


@pytest.fixture(scope="module")
def reader(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A plain login role with SELECT on the tables, as a production upstream role would be."""
    info = psycopg.conninfo.conninfo_to_dict(conn.info.dsn)
    role = f"reader_{info['dbname']}"
    conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'reader-pw'")
    conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    info.update(user=role, password="reader-pw")
    with psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True) as c:
        yield c


@pytest.mark.parametrize("query", all_catalog_queries(), ids=lambda q: q.id)
def test_fixture_runs_and_leaks_nothing(
    conn: psycopg.Connection[Any], reader: psycopg.Connection[Any], query: CatalogQuery
) -> None:
    """The rewrite of each collected query runs, as the superuser and as a plain login role
    with SELECT on the tables (as a production upstream role would be), and shows no hidden
    name. One rewrite for both runs (it is most of the test's CPU)."""
    parsed = query.id not in UNPARSABLE
    sql = rewritten(query.text if parsed else parsable(query.text))
    roles = (conn, reader) if parsed else (conn,)
    for role in roles:
        text = repr(run_rewritten(role, sql, query.params)).lower()
        for word in HIDDEN_WORDS:
            assert word not in text, f"{query.id} shows {word!r} ({role.info.user})"

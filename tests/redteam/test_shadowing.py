"""The database's own functions and operators must not stand in for the built-ins dpsql allows.

Found by the red team: dpsql allows functions by name, but PostgreSQL resolves a call by name
and argument types over the whole search path. With ``public.md5(integer)`` in the upstream
database (a function reading the private table), ``SELECT md5(1) FROM regions`` went through the
public path and returned e-mail addresses, and ``upper(quantity)`` ran such a function inside a
private query's WHERE. Statements that call a function (or use an operator) the database defines
outside its system schemas are now refused (dpsql.sql.shadowing), in every path: engine, EXPLAIN,
describe and the wire's fast path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError, PrivacyViolation
from dpsql.execute import shadows
from dpsql.policy import load_policy
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, served_engine
from tests.policies import PolicyMaker, private_table

READS_T = "SELECT string_agg(s, ',') FROM t"
SETUP = f"""
CREATE TABLE t (u integer, x integer, s text, g text);
INSERT INTO t SELECT g, g % 3, 'secret' || g, 'k' || (g % 2) FROM generate_series(1, 50) AS g;
CREATE TABLE p (k integer, name text);
INSERT INTO p VALUES (1, 'a'), (2, 'b');
CREATE FUNCTION public.md5(integer) RETURNS text LANGUAGE sql AS $$ {READS_T} $$;
CREATE FUNCTION public.upper(integer) RETURNS text LANGUAGE sql AS $$ {READS_T} $$;
CREATE SCHEMA other;
CREATE FUNCTION other.concat_ws(text, integer) RETURNS text LANGUAGE sql AS $$ {READS_T} $$;
CREATE FUNCTION public.leak(integer, text) RETURNS text LANGUAGE sql AS $$ {READS_T} $$;
CREATE OPERATOR public.|| (LEFTARG = integer, RIGHTARG = text, FUNCTION = public.leak);
CREATE VIEW public.v_raw AS SELECT s FROM t;
CREATE VIEW public.v_counts AS SELECT x, count(*) AS n FROM t GROUP BY x;
CREATE VIEW public.v_nested AS SELECT k FROM p UNION ALL SELECT n::integer FROM v_counts;
CREATE VIEW public.v_calls AS SELECT public.leak(k, name) AS y FROM p;
CREATE MATERIALIZED VIEW public.m_raw AS SELECT s FROM t;
CREATE VIEW public.v_ok AS SELECT k, name FROM p WHERE k > 0;
CREATE VIEW public.v_keys AS SELECT DISTINCT s FROM t;
CREATE TABLE hidden (secret_col text);
CREATE SCHEMA other2;
CREATE TABLE other2."Hidden" (c integer);
"""
VIEWS = ["v_raw", "v_counts", "v_nested", "v_calls", "m_raw", "v_ok", "v_keys"]


@pytest.fixture(scope="module")
def shadow_db(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Path, str]]:
    dsn = make_db("rtshadow")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP)
    columns = {
        "x": {"type": "integer", "bounds": [0, 2]},
        "s": {"type": "text", "keys": ["a", "b"]},
        "g": {"type": "text", "keys_from": "public.v_keys.s"},
    }
    pf = make_policy(
        "shadow",
        tables={"public.t": private_table("u", columns)},
        public_tables=["public.p", *(f"public.{v}" for v in VIEWS)],
    )
    e = Engine(pf.policy, dsn, pool_size=1)
    yield e, pf.path, dsn
    e.close()


SHADOWED = [
    "SELECT md5(1) FROM p",
    "SELECT md5(k) FROM p",
    "SELECT md5('x')",  # the built-in would be called here, but the name is shadowed anyway
    "SELECT upper(k) FROM p",
    "SELECT name FROM p WHERE upper(k) = 'x'",
    "SELECT concat_ws('x', k) FROM p",
    "SELECT k || 'x' FROM p",
    "SELECT COUNT(*) FROM t WHERE upper(x) = 'a'",
    "SELECT COUNT(*) FROM t WHERE upper(s) = 'A'",
    "SELECT relname FROM pg_class WHERE md5(relnatts) = 'x'",
    "EXPLAIN SELECT md5(1) FROM p",
    "EXPLAIN ANALYZE SELECT md5(1) FROM p",
]


@pytest.mark.parametrize("sql", SHADOWED)
def test_shadowed_function_is_refused_before_it_runs(
    shadow_db: tuple[Engine, Path, str], sql: str
) -> None:
    engine, _, _ = shadow_db
    with pytest.raises(PrivacyViolation) as err:
        engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    assert err.value.sqlstate == "42501" and err.value.hint
    assert "secret" not in str(err.value)


def test_describe_is_refused_too(shadow_db: tuple[Engine, Path, str]) -> None:
    """A zero-row describe still lets PostgreSQL plan the statement (and fold constants)."""
    engine, _, _ = shadow_db
    with pytest.raises(PrivacyViolation):
        engine.describe(engine.prepare("SELECT md5(1) FROM p"), SessionContext(analyst="analyst"))


def test_unshadowed_functions_still_work(shadow_db: tuple[Engine, Path, str]) -> None:
    engine, _, _ = shadow_db
    s = SessionContext(analyst="analyst")
    rows = engine.execute(engine.prepare("SELECT lower(name) FROM p ORDER BY k"), s).rows
    assert rows == [("a",), ("b",)]
    assert engine.execute(engine.prepare("SELECT COUNT(*) FROM t WHERE x = 1"), s).rows


def test_function_created_later_is_seen_after_the_refresh(
    shadow_db: tuple[Engine, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, _, dsn = shadow_db
    s = SessionContext(analyst="analyst")
    sql = "SELECT initcap(name) FROM p ORDER BY k"
    assert engine.execute(engine.prepare(sql), s).rows == [("A",), ("B",)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION public.initcap(integer) RETURNS text LANGUAGE sql AS $$ {READS_T} $$"
        )
    monkeypatch.setattr(shadows, "REFRESH_S", 0.0)
    with pytest.raises(PrivacyViolation):
        engine.execute(engine.prepare(sql), s)


@pytest.mark.parametrize("prepare", [False, True])
def test_wire_fast_path_refuses_it(shadow_db: tuple[Engine, Path, str], prepare: bool) -> None:
    """Through a real client: simple query, and a prepared statement with its value sent as a
    parameter (the fast path, which runs public statements upstream with their parameters)."""
    _, path, dsn = shadow_db
    with (
        served_engine(load_policy(path), dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        for _ in range(3):  # the fast path prepares upstream from the second run on
            with pytest.raises(psycopg.Error) as err:
                conn.execute("SELECT md5(%s) FROM p", (1,), prepare=prepare)
            assert err.value.sqlstate == "42501"
            assert "secret" not in str(err.value)
        assert conn.execute("SELECT name FROM p WHERE k = %s", (1,), prepare=prepare).fetchall()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM v_raw",
        "SELECT * FROM v_counts",
        "SELECT * FROM v_nested",
        "SELECT * FROM v_calls",
        "SELECT * FROM m_raw",
        "SELECT k FROM p WHERE k IN (SELECT x FROM v_counts)",
        "SELECT COUNT(*) FROM t JOIN v_counts v ON v.x = t.x",
        "EXPLAIN SELECT * FROM v_raw",
        # the keys of a GROUP BY listed by a view of the private values themselves
        "SELECT g, COUNT(*) FROM t GROUP BY g",
    ],
)
def test_public_view_over_protected_data_is_refused(
    shadow_db: tuple[Engine, Path, str], sql: str
) -> None:
    """A view declared public that reads the private table (raw or aggregated), an undeclared
    view of it, or a function of the database's own would hand out its rows without noise."""
    engine, _, _ = shadow_db
    with pytest.raises(PrivacyViolation) as err:
        engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    assert "public table" in err.value.message and err.value.hint


def test_public_view_over_public_tables_is_answered(shadow_db: tuple[Engine, Path, str]) -> None:
    engine, _, _ = shadow_db
    rows = engine.execute(engine.prepare("SELECT name FROM v_ok ORDER BY k"), SessionContext())
    assert rows.rows == [("a",), ("b",)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT NULL::hidden",
        "SELECT (NULL::hidden).secret_col",
        "SELECT NULL::public.hidden",
        "SELECT NULL::hidden[] FROM p",
        "SELECT CAST(NULL AS hidden)",
        'SELECT NULL::other2."Hidden"',
    ],
)
def test_row_type_of_a_hidden_table_is_a_missing_type(
    shadow_db: tuple[Engine, Path, str], sql: str
) -> None:
    """Found by the red team: ``SELECT NULL::hidden`` succeeded (and ``(NULL::hidden).col``
    named its columns) for a table the analyst may not see, which otherwise behaves as missing."""
    engine, _, _ = shadow_db
    with pytest.raises(DpsqlError) as err:
        engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    assert err.value.sqlstate in ("42704", "42501"), err.value
    assert "secret_col" not in str(err.value)


def test_row_types_of_visible_tables_still_work(shadow_db: tuple[Engine, Path, str]) -> None:
    engine, _, _ = shadow_db
    for sql in ("SELECT (NULL::p).name", "SELECT NULL::t", "SELECT NULL::xid"):
        assert engine.execute(engine.prepare(sql), SessionContext(analyst="analyst")).rows


def test_row_type_through_the_wire_fast_path(shadow_db: tuple[Engine, Path, str]) -> None:
    _, path, dsn = shadow_db
    with (
        served_engine(load_policy(path), dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        for _ in range(3):
            with pytest.raises(psycopg.Error) as err:
                conn.execute("SELECT %s::hidden FROM p", ("(x)",), prepare=True)
            assert err.value.sqlstate == "42704"


def test_row_type_of_a_hidden_table_does_not_describe(shadow_db: tuple[Engine, Path, str]) -> None:
    """PostgreSQL's Describe of ``SELECT $1::hidden`` would succeed (and name the row type) where a
    missing type fails: the same refusal as at Execute."""
    engine, _, _ = shadow_db
    for sql in ("SELECT $1::hidden FROM p", "SELECT NULL::hidden"):
        with pytest.raises(DpsqlError) as err:
            engine.describe(engine.prepare(sql), SessionContext(analyst="analyst"))
        assert err.value.sqlstate == "42704"

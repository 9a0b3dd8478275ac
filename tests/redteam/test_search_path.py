"""Name resolution upstream must match dpsql's: an unqualified table is ``public.<name>``.

dpsql classifies ``regions`` as ``public.regions`` and runs public statements as written. PostgreSQL
resolves the name through the upstream connection's ``search_path``, by default ``"$user", public``:
a schema named after the upstream role (or a role-level ``search_path``) holding a table of the
same name shadowed the public table, and ``SELECT * FROM regions`` returned raw rows of a table
the policy never declared, through the engine and through the wire fast path. Every upstream
connection now pins ``search_path`` (dpsql.upstream.settings.session_settings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT, analyst_dsn, served_engine

SECRET = "SECRET-ROW-of-a-shadowing-table"


@pytest.fixture(scope="module")
def shadow_dsn(make_db: Callable[[str], str]) -> str:
    """The demo schema, a few public regions, and a schema named after the connecting role
    (first in the default search path) holding its own ``regions`` and ``purchases``."""
    from dpsql.demo import SCHEMA

    dsn = make_db("rtshadow")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(
            "INSERT INTO purchases (id, user_id, email, category, region, amount, quantity, "
            "purchased_at) SELECT g, g, 'u' || g || '@x', 'books', 'N', 10, 1, DATE '2025-01-01' "
            "FROM generate_series(1, 50) AS g"
        )
        role = conn.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(role)))
        conn.execute(
            psycopg.sql.SQL("CREATE TABLE {}.regions (code text, name text)").format(
                psycopg.sql.Identifier(role)
            )
        )
        conn.execute(
            psycopg.sql.SQL("INSERT INTO {}.regions VALUES ('N', %s), ('X', %s)").format(
                psycopg.sql.Identifier(role)
            ),
            (SECRET, SECRET),
        )
    return dsn


@pytest.fixture(scope="module")
def shadow_engine(shadow_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, shadow_dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def _run(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    p = engine.prepare(sql)
    return list(engine.execute(p, SessionContext(analyst="analyst")).rows)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM regions",
        "SELECT name FROM regions WHERE code = 'N'",
        "SELECT r.name FROM regions r JOIN regions s ON r.code = s.code",
        "SELECT (SELECT max(name) FROM regions) AS m",
    ],
)
def test_public_statement_reads_the_public_table(shadow_engine: Engine, sql: str) -> None:
    rows = _run(shadow_engine, sql)
    assert rows, sql
    assert all(SECRET not in str(v) for r in rows for v in r), rows


def test_private_subquery_reads_the_public_table(shadow_engine: Engine) -> None:
    """A public IN-subquery inside private SQL is not qualified by the rewrite: it must still
    read public.regions (N, S, E, W, C), not the shadowing table (N, X)."""
    q = (
        "SELECT COUNT(*) FROM purchases "
        "WHERE region IN (SELECT r.code FROM regions r WHERE r.name = '{}')"
    )
    assert _run(shadow_engine, q.format(SECRET)) == [(0,)]
    assert _run(shadow_engine, q.format("North")) == [(50,)]


def test_current_schema_is_still_public(shadow_engine: Engine) -> None:
    assert _run(shadow_engine, "SELECT current_schema()") == [("public",)]


def _upstream_role(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        return str(conn.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]


def test_wire_fast_path_reads_the_public_table(shadow_dsn: str, demo_policy: Any) -> None:
    with (
        served_engine(demo_policy, shadow_dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        for prepare in (False, True):
            rows = conn.execute("SELECT * FROM regions", prepare=prepare).fetchall()
            assert rows and all(SECRET not in str(v) for r in rows for v in r), rows
        rows = conn.execute("SELECT name FROM regions WHERE code = %s", ("X",)).fetchall()
        assert rows == []
        role = _upstream_role(shadow_dsn)
        for script in (  # SET is answered by the session, never forwarded upstream; a path
            # dpsql would not follow is refused (test_a_search_path_dpsql_would_not_follow...)
            f"SET search_path = {role}, public; SELECT * FROM regions",
            f"BEGIN; SET LOCAL search_path TO {role}; SELECT * FROM regions; COMMIT",
            f"SET schema '{role}'; SELECT * FROM regions",
        ):
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                conn.execute(script)
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
            rows = conn.execute("SELECT * FROM regions").fetchall()
            assert rows and all(SECRET not in str(v) for r in rows for v in r), script
        conn.execute("RESET search_path")


def test_a_search_path_dpsql_would_not_follow_is_refused(shadow_dsn: str, demo_policy: Any) -> None:
    """``SET search_path = <schema>`` (DBeaver's active schema, PgJDBC's currentSchema) made
    PostgreSQL's reading of ``SELECT COUNT(*) FROM purchases`` the schema's table while dpsql,
    which reads an unqualified name as public's, answered public.purchases: SHOW search_path
    said the schema, the number was another table's. Now such a path is refused (0A000, the
    hint: write the schema in the statement), by SET and at startup; one whose first schema is
    public (past "$user" and pg_catalog) is kept, and a refused SET leaves the session as it
    was."""
    role = _upstream_role(shadow_dsn)  # a schema that exists upstream (the shadowing one)
    with (
        served_engine(demo_policy, shadow_dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        for kept in ('"$user", public', "public", "pg_catalog, public, " + role, '"public"'):
            conn.execute(f"SET search_path = {kept}")
        for refused in (role, f"{role}, public", f'"$user", {role}', '"Public"'):
            with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
                conn.execute(f"SET search_path = {refused}")
            assert "write the schema in the statement" in (e.value.diag.message_hint or "")
        assert conn.execute("SHOW search_path").fetchone() == ("public",)
        assert conn.execute("SELECT COUNT(*) FROM regions").fetchone() == (5,)
        with pytest.raises(psycopg.OperationalError, match="write the schema in the statement"):
            psycopg.connect(analyst_dsn(srv.port), options=f"-c search_path={role}")

"""Session-information functions are answered for the client's own dpsql session.

Real engine and PostgreSQL (demo data), psycopg and psql through a wire server that serves the
upstream's database under its own name (``database=""``, as ``dpsql serve`` does). Properties:
``pg_backend_pid()`` is the BackendKeyData process id (per session, also when the same text ran
in another session first: the statement memo must not hand one session's pid to another);
``current_database()`` / ``current_catalog`` name the database the client named and another
name is refused at startup with 3D000; ``SHOW server_version``, the startup ParameterStatus and
``version()`` are the upstream's, byte for byte; ``pg_cancel_backend`` is true for one's own pid
and false for any other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from dpsql.wire.server import ServerConfig

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def upstream_db(demo_dsn: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(demo_dsn)["dbname"])


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    engine = Engine(demo_policy, demo_dsn, pool_size=2)
    srv = ServerThread(engine, demo_policy, ServerConfig(port=0, database="")).start()
    try:
        yield srv
    finally:
        srv.stop()
        engine.close()


def _dsn(srv: ServerThread, db: str) -> str:
    return f"host=127.0.0.1 port={srv.port} user=analyst password=analyst dbname={db}"


def _one(conn: psycopg.Connection[Any], sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def test_backend_pid_is_the_sessions_own(served: ServerThread, upstream_db: str) -> None:
    with (
        psycopg.connect(_dsn(served, upstream_db), autocommit=True) as a,
        psycopg.connect(_dsn(served, upstream_db), autocommit=True) as b,
    ):
        assert a.info.backend_pid != b.info.backend_pid
        for conn in (a, b):  # the same texts in both sessions: no memo hands over a's pid
            assert _one(conn, "SELECT pg_backend_pid()") == conn.info.backend_pid
            assert _one(conn, "select pg_catalog.pg_backend_pid()") == conn.info.backend_pid
            cur = conn.execute("SELECT pg_backend_pid()")
            assert cur.description is not None and cur.description[0].name == "pg_backend_pid"
            assert cur.description[0].type_code == 23  # int4, as PostgreSQL's
        assert _one(a, f"SELECT pg_cancel_backend({a.info.backend_pid})") is True
        assert _one(a, "SELECT pg_cancel_backend(pg_backend_pid())") is True
        # another of the analyst's sessions: signalled (newcomer21 #38; b runs nothing: the
        # cancel finds nothing to cancel, as PostgreSQL's); a pid of no session: false
        assert _one(a, f"SELECT pg_cancel_backend({b.info.backend_pid})") is True
        assert _one(a, f"SELECT pg_cancel_backend({b.info.backend_pid ^ 1})") is False
        assert _one(a, f"SELECT pg_terminate_backend({a.info.backend_pid})") is False
        assert _one(b, "SELECT 1") == 1
        superset_stop = (  # SQL Lab's Stop button (PostgresEngineSpec.cancel_query)
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE pid='{b.info.backend_pid}'"
        )
        assert a.execute(superset_stop).fetchall() == [(True,)]
        with pytest.raises(psycopg.OperationalError):  # b was ended (57P01)
            b.execute("SELECT 1")
        assert _one(a, "SELECT 1") == 1  # the session still works


def test_a_datestyle_dpsql_cannot_honour_refuses_the_connection(
    served: ServerThread, upstream_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq's PGDATESTYLE (a startup parameter) in day/month order: refused with the words of
    SET, not dropped (was: SHOW said ISO, MDY and '01/12/2025' was 12 January: newcomer22 #33)."""
    monkeypatch.setenv("PGDATESTYLE", "ISO, DMY")
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect(_dsn(served, upstream_db))
    assert "DateStyle 'ISO, DMY' is not supported" in str(e.value)
    monkeypatch.setenv("PGDATESTYLE", "ISO, MDY")
    with psycopg.connect(_dsn(served, upstream_db)) as conn:
        assert _one(conn, "SHOW DateStyle") == "ISO, MDY"


def test_database_is_the_one_the_client_named(served: ServerThread, upstream_db: str) -> None:
    with psycopg.connect(_dsn(served, upstream_db), autocommit=True) as conn:
        row = conn.execute("SELECT current_database(), current_catalog").fetchone()
        assert row == (upstream_db, upstream_db)
        cur = conn.execute("SELECT current_database()")
        assert cur.description is not None and cur.description[0].type_code == 19  # name
        assert conn.execute(
            "SELECT datname FROM pg_database WHERE datname = current_database()"
        ).fetchall() == [(upstream_db,)]
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect(_dsn(served, "no_such_db"))
    assert 'database "no_such_db" does not exist' in str(e.value)


def test_version_is_the_upstreams(served: ServerThread, upstream_db: str, demo_dsn: str) -> None:
    with psycopg.connect(demo_dsn, autocommit=True) as direct:
        want = direct.execute(
            "SELECT version(), current_setting('server_version'), "
            "current_setting('server_version_num')"
        ).fetchone()
    assert want is not None
    with psycopg.connect(_dsn(served, upstream_db), autocommit=True) as conn:
        assert conn.info.parameter_status("server_version") == want[1]
        assert _one(conn, "SELECT version()") == want[0]
        assert _one(conn, "SHOW server_version") == want[1]
        assert _one(conn, "SHOW server_version_num") == want[2]
        assert _one(conn, "SELECT current_setting('server_version')") == want[1]
        assert conn.info.server_version == int(want[2])


def test_other_session_functions(served: ServerThread, upstream_db: str) -> None:
    with psycopg.connect(_dsn(served, upstream_db), autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_user, session_user, current_schema(), current_schemas(false)"
        ).fetchone()
        assert row == ("analyst", "analyst", "public", ["public"])
        assert _one(conn, "SELECT current_setting('DateStyle')") == "ISO, MDY"
        assert _one(conn, "SELECT now() IS NOT NULL") is True


def test_psql_sees_the_database_and_refuses_another(served: ServerThread, upstream_db: str) -> None:
    psql = shutil.which("psql")
    if psql is None:
        if IN_CI:
            pytest.fail("psql is missing")
        pytest.skip("psql is not installed")
    env = {**os.environ, "PGPASSWORD": "analyst"}
    base = [psql, "-X", "-h", "127.0.0.1", "-p", str(served.port), "-U", "analyst", "-At"]
    ok = subprocess.run([*base, "-d", upstream_db, "-c", "SELECT current_database()"],
                        env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.strip() == upstream_db, ok.stderr
    bad = subprocess.run([*base, "-d", "nope", "-c", "SELECT 1"], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode != 0
    assert 'FATAL:  database "nope" does not exist' in bad.stderr

"""The session over real sockets with real clients (psycopg, psql) and a fake engine.

Protocol-layer tests only: the engine is a stand-in per the engine contract. The same behaviours
against the real Engine and PostgreSQL are in tests/integration/wire/test_server_engine.py.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from fractions import Fraction

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.server.run import ServerThread
from dpsql.wire import session as wire_session
from dpsql.wire.auth import AuthConfig
from dpsql.wire.server import ServerConfig
from tests.conftest import IN_CI
from tests.wire_support import PASSWORD, POLICY, TYPES_ROW, CancelToken, FakeEngine


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture(scope="module")
def server(engine: FakeEngine) -> Iterator[ServerThread]:
    orig = wire_session._new_cancel_token
    wire_session._new_cancel_token = CancelToken  # type: ignore[assignment]
    cfg = ServerConfig(port=0, max_sessions_per_analyst=5,
                       auth=AuthConfig(max_failures=3, failure_delay_s=0.01))  # fmt: skip
    with ServerThread(engine, POLICY, cfg) as srv:
        yield srv
    wire_session._new_cancel_token = orig  # type: ignore[assignment]


def dsn(srv: ServerThread, user: str = "ana", password: str = PASSWORD, **kw: str) -> str:
    extra = " ".join(f"{k}={v}" for k, v in kw.items())
    return (f"host=127.0.0.1 port={srv.port} user={user} password='{password}' dbname=db "
            f"sslmode=disable {extra}")  # fmt: skip


def test_connect_reports_parameters(server: ServerThread) -> None:
    with psycopg.connect(dsn(server, application_name="t1"), autocommit=True) as conn:
        ps = conn.info.parameter_status
        assert ps("server_version") == "16.0"
        assert ps("is_superuser") == "off"
        assert ps("application_name") == "t1"
        assert ps("session_authorization") == "ana"
        assert ps("integer_datetimes") == "on"
        assert conn.info.backend_pid > 0
        assert conn.execute("SELECT count FROM people").fetchone() == (42,)


@pytest.mark.parametrize(("user", "pw"), [("ana", "wrong"), ("nobody", "x"), ("nocred", "x")])
def test_bad_logins_fail_alike(server: ServerThread, user: str, pw: str) -> None:
    with pytest.raises(
        psycopg.OperationalError, match=f'password authentication failed for user "{user}"'
    ):
        psycopg.connect(dsn(server, user=user, password=pw))


def test_simple_query_stops_at_first_error(server: ServerThread, engine: FakeEngine) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        before = len(engine.executed)
        with pytest.raises(pe.InsufficientPrivilege, match="raw rows") as e:
            conn.execute("SELECT 1; SELECT raw FROM people; SELECT gen 3", prepare=False)
        assert e.value.diag.message_hint == "aggregate"
        assert [x[0] for x in engine.executed[before:]] == ["SELECT 1"]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT gen 2").fetchall() == [(0,), (1,)]


def test_syntax_error_position(server: ServerThread) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        with pytest.raises(pe.SyntaxError) as e:
            conn.execute("bad stuff")
        assert e.value.diag.statement_position == "1"


@pytest.mark.parametrize("binary", [False, True])
def test_value_types_round_trip(server: ServerThread, binary: bool) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        cur = conn.cursor(binary=binary)
        row = cur.execute("SELECT types").fetchone()
        assert row == TYPES_ROW
        assert [d.type_code for d in cur.description] == [21, 23, 20, 701, 1700, 16, 25, 1082,
                                                          1184, 17, 1007]  # fmt: skip


def test_parameters_text_and_binary(server: ServerThread) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        row = conn.execute("SELECT echo %s %s %s", (5, "x'y", None)).fetchone()
        assert row == ("5", repr("x'y"), None)
        cur = conn.cursor(binary=True)
        got = cur.execute("SELECT echo %b %b %b", (2**40, 1.5, "é")).fetchone()
        assert got == (str(2**40), "1.5", repr("é"))


def test_prepared_statement_is_parsed_once(server: ServerThread, engine: FakeEngine) -> None:
    sql = "SELECT echo %s /* loop */"
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        for i in range(5):
            assert conn.execute(sql, (i,), prepare=True).fetchone() == (str(i),)
    assert engine.prepares[sql.replace("%s", "$1")] == 1


def test_transactions_and_savepoints(server: ServerThread) -> None:
    TS = psycopg.pq.TransactionStatus
    with psycopg.connect(dsn(server)) as conn:
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == TS.INTRANS
        with pytest.raises(pe.InsufficientPrivilege):
            conn.execute("SELECT raw")
        assert conn.info.transaction_status == TS.INERROR
        with pytest.raises(pe.InFailedSqlTransaction):
            conn.execute("SELECT 1")
        conn.rollback()
        assert conn.info.transaction_status == TS.IDLE
        with conn.transaction():
            with pytest.raises(pe.InsufficientPrivilege):
                with conn.transaction():  # SAVEPOINT ... ROLLBACK TO SAVEPOINT
                    conn.execute("SELECT raw")
            assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.commit()


def test_dpsql_settings_reach_the_engine(server: ServerThread, engine: FakeEngine) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.25")
        conn.execute("SELECT count FROM people")
        assert engine.last_epsilon == Fraction(1, 4)
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.25",)
        with pytest.raises(pe.InvalidParameterValue):
            conn.execute("SET dpsql.epsilon = -1")
        with pytest.raises(pe.UndefinedObject):
            conn.execute("SET dpsql.epsilom = 1")
        conn.execute("BEGIN")
        conn.execute("SET dpsql.epsilon TO 2")
        conn.execute("ROLLBACK")
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.25",)
        conn.execute("SET application_name = 'x y'")
        assert conn.info.parameter_status("application_name") == "x y"
        assert conn.execute("SHOW application_name").fetchone() == ("x y",)
        conn.execute("DISCARD ALL")
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == (
            "1",
        )  # the policy's default epsilon


def test_notices_are_forwarded(server: ServerThread) -> None:
    got: list[str] = []
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: got.append(d.message_primary or ""))
        conn.execute("SELECT count FROM people")
    assert got == ["noise added"]


def test_cancel_request(server: ServerThread) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        # conn.cancel() (PQcancel) holds the GIL while it waits, deadlocking an in-process server.
        # Cancel once the statement runs: a fixed 0.3 s timer could fire before the server had
        # started it on a loaded machine (a cancel of an idle session is dropped, as PostgreSQL
        # drops it, and the 5 s statement would then end normally).
        def cancel_once_running() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if any(s.busy for s in list(server.server.sessions.values())):
                    break
                time.sleep(0.01)
            conn.cancel_safe()

        threading.Thread(target=cancel_once_running).start()
        with pytest.raises(pe.QueryCanceled):
            conn.execute("SELECT sleep")
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_sessions_per_analyst_limit(server: ServerThread) -> None:
    conns = [psycopg.connect(dsn(server, user="bob", password="bobpw")) for _ in range(5)]
    try:
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(dsn(server, user="bob", password="bobpw"))
    finally:
        for c in conns:
            c.close()
    # the server frees a slot when it sees the close: poll (a fixed 0.2 s raced under load)
    deadline = time.monotonic() + 10
    while True:
        try:
            psycopg.connect(dsn(server, user="bob", password="bobpw")).close()
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _statement_kinds(caplog: pytest.LogCaptureFixture) -> set[str]:
    return {
        json.loads(r.getMessage()).get("kind", "")
        for r in list(caplog.records)
        if r.name == "dpsql.statement"
    }


def test_statement_log_line(server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="dpsql.statement"):
        with psycopg.connect(dsn(server), autocommit=True) as conn:
            conn.execute("SELECT count FROM people WHERE age > 31337")
            with pytest.raises(pe.InsufficientPrivilege):
                conn.execute("SELECT raw FROM people WHERE name = 'alice'")
        # the server thread logs after it answers: wait for both lines (a fixed 0.05 s raced)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _statement_kinds(caplog) >= {
            "private",
            "refused",
        }:
            time.sleep(0.02)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "dpsql.statement"]
    line = next(x for x in lines if x["kind"] == "private")
    assert line["analyst"] == "ana" and line["outcome"] == "ok" and line["epsilon"] == 0.5
    assert {"fingerprint", "latency_ms", "rows"} <= line.keys()
    assert "31337" not in caplog.text and "alice" not in caplog.text
    refused = next(x for x in lines if x["kind"] == "refused")
    assert refused["outcome"] == "42501"


def test_psql_connects(server: ServerThread) -> None:
    psql = shutil.which("psql")
    if psql is None:
        if IN_CI:
            pytest.fail("psql is required in CI")
        pytest.skip("psql not installed")
    env = {"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [psql, "-h", "127.0.0.1", "-p", str(server.port), "-U", "ana", "-d", "db", "-X", "-A",
         "-t", "-c", "SELECT count FROM people", "-c", "\\conninfo"],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "42"
    assert 'as user "ana"' in out.stdout

"""``dpsql serve`` end to end: real clients -> wire server -> real Engine -> real PostgreSQL.

Demo data and policy (analyst "analyst", password "analyst"); the budget ledger lives in its own
fresh database so every charge can be counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from dpsql.wire import messages as m
from dpsql.wire.server import ServerConfig
from tests.wire_support import RawClient

USER = PASSWORD = "analyst"


@pytest.fixture(scope="module")
def ledger(make_db: Callable[[str], str], demo_policy: Any) -> Iterator[Ledger]:
    led = Ledger.open(make_db("wire_ledger"), demo_policy)
    yield led
    led.close()


@pytest.fixture(scope="module")
def server(demo_dsn: str, demo_policy: Any, ledger: Ledger) -> Iterator[ServerThread]:
    engine = Engine(demo_policy, demo_dsn, ledger=ledger, pool_size=4)
    with ServerThread(engine, demo_policy, ServerConfig(port=0, shutdown_grace_s=2)) as srv:
        yield srv
    engine.close()


def dsn(srv: ServerThread) -> str:
    return f"host=127.0.0.1 port={srv.port} user={USER} password={PASSWORD} dbname=demo"


def releases(ledger: Ledger) -> int:
    return len([h for h in ledger.history(USER) if not h.cached])


def test_dp_aggregate_and_refusal(server: ServerThread, ledger: Ledger) -> None:
    before = releases(ledger)
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.5")
        cur = conn.execute("SELECT COUNT(*) AS n FROM purchases WHERE quantity >= 2")
        (n,) = cur.fetchone()  # type: ignore[misc]
        assert 50_000 < n < 200_000
        assert cur.description[0].name == "n"
        with pytest.raises(pe.InsufficientPrivilege) as e:
            conn.execute("SELECT * FROM purchases")
        assert e.value.diag.message_hint
    assert releases(ledger) == before + 1
    assert float(ledger.history(USER)[0].epsilon) == pytest.approx(0.5)


@pytest.mark.parametrize("binary", [False, True])
def test_extended_protocol_with_parameters(server: ServerThread, binary: bool) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        cur = conn.cursor(binary=binary)
        for q in (2, 5):
            sql = "SELECT category, COUNT(*) FROM purchases WHERE quantity >= %s GROUP BY category"
            rows = cur.execute(sql, (q,), prepare=True).fetchall()
            assert sorted(r[0] for r in rows) == [
                "books", "clothing", "electronics", "groceries", "travel"
            ]  # fmt: skip
        rows = cur.execute("SELECT code FROM regions ORDER BY code").fetchall()
        assert [r[0] for r in rows] == ["C", "E", "N", "S", "W"]


def test_portal_row_limit_charges_once(server: ServerThread, ledger: Ledger) -> None:
    before = releases(ledger)
    c = RawClient(server.port)
    c.login(USER, PASSWORD)
    sql = "SELECT category, SUM(amount) FROM purchases WHERE quantity <= 9 GROUP BY category"
    c.send(m.Parse("", sql), m.Bind("", ""), m.Execute("", 2), m.Execute("", 2), m.Execute("", 2),
           m.Sync())  # fmt: skip
    msgs = c.until_ready()
    assert not [x for x in msgs if type(x) is m.ErrorResponse], msgs  # notices may come too
    assert sum(isinstance(x, m.DataRow) for x in msgs) == 5
    assert sum(isinstance(x, m.PortalSuspended) for x in msgs) == 2
    c.close()
    assert releases(ledger) == before + 1


def test_session_functions_and_version(server: ServerThread, demo_dsn: str) -> None:
    with psycopg.connect(demo_dsn) as direct:
        (upstream,) = direct.execute("SHOW server_version").fetchone()  # type: ignore[misc]
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        (v,) = conn.execute("SELECT version()").fetchone()  # type: ignore[misc]
        assert v.startswith(f"PostgreSQL {upstream} ")  # SHOW and version() agree
        assert conn.execute("SHOW server_version").fetchone() == (upstream,)
        assert conn.execute("SHOW transaction isolation level").fetchone() == ("read committed",)


def test_orm_style_transaction_with_savepoints(server: ServerThread) -> None:
    with psycopg.connect(dsn(server)) as conn:
        with conn.transaction():
            conn.execute("SELECT COUNT(*) FROM purchases")
            with pytest.raises(pe.InsufficientPrivilege):
                with conn.transaction():
                    conn.execute("SELECT email FROM purchases")
            conn.execute("SELECT code FROM regions")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_cancel_running_upstream_query(server: ServerThread, demo_dsn: str) -> None:
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        # cancel once the query runs upstream (a fixed 0.5 s timer could fire before it was sent,
        # and the cancel would be lost under load)
        threading.Thread(
            target=lambda: (_wait_until_running(demo_dsn, "2000000000", []), conn.cancel_safe())
        ).start()
        with pytest.raises(pe.QueryCanceled):  # minutes of work if the cancel were lost
            conn.execute("SELECT count(*) FROM generate_series(1, 2000000000)")
        assert conn.execute("SELECT 1").fetchone() == (1,)


def _wait_until_running(upstream: str, text: str, done: list[Any]) -> None:
    """Until the statement runs on the upstream (or has finished): a fixed 0.1 s sleep let a
    loaded machine stop the server before the query had even been sent."""
    deadline = time.monotonic() + 10
    with psycopg.connect(upstream, autocommit=True) as conn:
        while not done and time.monotonic() < deadline:
            running = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query ILIKE %s "
                "AND pid <> pg_backend_pid()",
                (f"%{text}%",),
            ).fetchone()
            if running and running[0]:
                return
            time.sleep(0.01)


def test_graceful_shutdown(demo_dsn: str, demo_policy: Any) -> None:
    engine = Engine(demo_policy, demo_dsn, pool_size=2)
    srv = ServerThread(engine, demo_policy, ServerConfig(port=0, shutdown_grace_s=5)).start()
    try:
        busy = psycopg.connect(dsn(srv), autocommit=True)
        idle = psycopg.connect(dsn(srv), autocommit=True)
        result: list[Any] = []
        t = threading.Thread(
            target=lambda: result.append(
                busy.execute("SELECT count(*), 7 FROM generate_series(1, 3000000)").fetchone()
            )
        )
        t.start()
        _wait_until_running(demo_dsn, "3000000", result)  # not a fixed sleep
        srv.stop()
        t.join(10)
        assert result and result[0][1] == 7  # the running query finished within the grace
        with pytest.raises(psycopg.OperationalError):
            idle.execute("SELECT 1")
        busy.close()
        idle.close()
    finally:
        engine.close()

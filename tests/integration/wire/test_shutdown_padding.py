"""Graceful shutdown and timing padding: a private answer waiting for its padded moment was already
charged and stored, so a shutdown lets it reach the client within the grace period; past the
grace the wait is abandoned and the session ends (57P01) without waiting out the padding."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from dpsql.wire.auth import make_verifier
from dpsql.wire.server import ServerConfig
from tests.integration.budget.ledger_support import states
from tests.policies import build_policy, private_table

TABLE = private_table("uid", {"v": {"type": "integer", "bounds": [0, 10]}}, rows=None, groups=None)
ZOE = {"credential": make_verifier("pw"), "budget": {"epsilon": 100}}


@pytest.fixture(scope="module")
def data(make_db: Callable[[str], str]) -> str:
    dsn = make_db("shutdown_padding")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid int, v int); INSERT INTO t SELECT g, g % 7 FROM "
                     "generate_series(1, 200) g")  # fmt: skip
    return dsn


@contextmanager
def _server(
    dsn: str, quantum_ms: int, grace_s: float, ledger: str | None = None
) -> Iterator[ServerThread]:
    timing = {"quantum_ms": quantum_ms}
    pol = build_policy(base={}, tables={"t": TABLE}, analysts={"zoe": ZOE}, timing=timing)
    engine = Engine(pol, dsn, pool_size=2, ledger=Ledger.open(ledger, pol) if ledger else None)
    srv = ServerThread(engine, pol, ServerConfig(port=0, shutdown_grace_s=grace_s)).start()
    try:
        yield srv
    finally:
        engine.close()


def _dsn(port: int) -> str:
    return f"host=127.0.0.1 port={port} user=zoe password=pw dbname=x"


def _ask(port: int, out: list[Any], conn: psycopg.Connection[Any] | None = None) -> None:
    """One fresh private query; appends (answer or exception, seconds from sending)."""
    with conn or psycopg.connect(_dsn(port), autocommit=True) as conn:
        t0 = time.monotonic()
        try:
            out.append(conn.execute("SELECT COUNT(*), 7 FROM t WHERE v > 1").fetchone())
        except psycopg.Error as e:
            out.append(e)
        out.append(time.monotonic() - t0)


def _wait_busy(srv: ServerThread, out: list[Any]) -> None:
    """Until the server runs (or pads) the statement: a shutdown before it arrived would end an
    idle session instead."""
    deadline = time.monotonic() + 20
    while not out and time.monotonic() < deadline:
        if any(s.busy for s in list(srv.server.sessions.values())):
            return
        time.sleep(0.005)
    raise AssertionError(f"the statement never ran: {out}")


def test_shutdown_delivers_a_padded_answer_within_the_grace(data: str) -> None:
    """Quantum 3 s, grace 8 s: the answer arrives at its padded moment although the shutdown
    started during the wait (before, the session was closed with 57P01: charged, never seen)."""
    with _server(data, quantum_ms=3000, grace_s=8) as srv:
        out: list[Any] = []
        client = threading.Thread(target=_ask, args=(srv.port, out))
        client.start()
        _wait_busy(srv, out)
        srv.stop()
        client.join(60)
    answer, elapsed = out
    assert isinstance(answer, tuple) and answer[1] == 7, answer
    assert elapsed >= 2.9, elapsed  # delivered at its padded moment, not early


def test_shutdown_abandons_a_padded_wait_past_the_grace(data: str) -> None:
    """Quantum 60 s, grace 1 s: the session ends about when the grace does, not after 60 s."""
    with _server(data, quantum_ms=60_000, grace_s=1) as srv:
        out: list[Any] = []
        client = threading.Thread(target=_ask, args=(srv.port, out))
        client.start()
        _wait_busy(srv, out)
        time.sleep(0.5)  # into the wait (the query itself takes milliseconds)
        stopper = threading.Thread(target=srv.stop)
        stopper.start()
        stopper.join(30)  # a deadline well under the 60 s quantum the session would wait for
        stopped = not stopper.is_alive()
        client.join(20)
    error, _ = out
    assert stopped, "shutdown waited for the padding past the grace"
    assert isinstance(error, psycopg.OperationalError), error
    assert "terminating connection" in str(error), error


def test_a_statement_sent_during_the_shutdown_is_refused_before_it_is_charged(
    data: str, make_db: Callable[[str], str]
) -> None:
    """Session a waits out its padding (quantum 3 s) when the shutdown starts; session b, idle
    then, sends a private statement during the grace. b must be refused (57P01) without a charge:
    run, it would be charged and then cut off when a's wait ends and the sessions are closed."""
    ledger = make_db("shutdown_ledger")
    with _server(data, quantum_ms=3000, grace_s=8, ledger=ledger) as srv:
        b = psycopg.connect(_dsn(srv.port), autocommit=True)
        out_a: list[Any] = []
        client = threading.Thread(target=_ask, args=(srv.port, out_a))
        client.start()
        _wait_busy(srv, out_a)
        stopping = threading.Thread(target=srv.stop)
        stopping.start()
        deadline = time.monotonic() + 2  # a waits until about 3 s: still waiting after this
        while not srv.server._stopping and time.monotonic() < deadline:
            time.sleep(0.005)
        assert srv.server._stopping and not out_a, "the shutdown did not start in time"
        with pytest.raises(psycopg.OperationalError, match="terminating connection"):
            b.execute("SELECT COUNT(*), 8 FROM t WHERE v > 2").fetchone()
        stopping.join(20)
        client.join(20)
        b.close()
    answer, _ = out_a
    assert isinstance(answer, tuple) and answer[1] == 7, answer
    # a's statement only, charged once: its answer (one release) and its auto bound choice
    # (reserved with it, in one transaction); b's statement charged nothing
    with psycopg.connect(ledger) as conn:
        rows = conn.execute("SELECT statement, mechanism, state FROM dpsql.release").fetchall()
    assert {r[0] for r in rows} == {"SELECT COUNT(*), 7 FROM t WHERE v > 1"}, rows
    assert sorted(r[1] == "auto_bound" for r in rows) == [False, True], rows
    assert states(ledger) == {"committed": 2}, rows

"""The event-loop fast path for public and catalog statements (dpsql.wire.upstream).

Real engine, real PostgreSQL (demo data). The fast path must answer exactly as the worker-thread
path does, keep error recovery, transactions, cancellation and the per-statement log line.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import sqlglot
from psycopg import errors as pe

from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from dpsql.sql.bind import bind, template
from dpsql.wire import messages as m
from dpsql.wire.server import ServerConfig
from tests.wire_support import RawClient

USER = PASSWORD = "analyst"

QUERIES = (
    "SELECT name FROM regions WHERE code = $1",
    "SELECT $2, $1, $1 + 1 AS x, '$1' AS lit, -$1 FROM t WHERE a IN ($1, $2) -- $2",
    "SELECT * FROM t WHERE x = $1 LIMIT $2",
)
VALUES = (
    (1, "it's"), (-5, None), (True, dt.date(2024, 1, 2)), (0, "dpsql_slot_"),
    (Decimal("-1.50"), dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.UTC)), (1.5e300, "a\\b"),
    ("ü'\"", -0.0), (dt.datetime(2024, 1, 2), 2**70),
)  # fmt: skip


@pytest.mark.parametrize("sql", QUERIES)
def test_template_renders_as_bind(sql: str) -> None:
    tree = sqlglot.parse_one(sql, read="postgres")
    tpl = template(tree)
    assert tpl is not None
    for values in VALUES:
        assert tpl.render(values) == bind(tree, values).sql("postgres")


def _dsn(port: int) -> str:
    return f"host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname=demo"


@pytest.fixture(scope="module")
def servers(demo_dsn: str, demo_policy: Any) -> Iterator[tuple[ServerThread, ServerThread]]:
    """The same engine served with the fast path and without it."""
    engine = Engine(demo_policy, demo_dsn, pool_size=4)
    fast = ServerThread(engine, demo_policy, ServerConfig(port=0, shutdown_grace_s=2)).start()
    slow = ServerThread(
        engine, demo_policy, ServerConfig(port=0, shutdown_grace_s=2, fast_path=False)
    ).start()
    yield fast, slow
    fast.stop()
    slow.stop()
    engine.close()


PARITY = (
    ("SELECT code, name FROM regions WHERE code = %s", ("N",)),
    ("SELECT code, name FROM regions WHERE code <> %s ORDER BY code", ("N",)),
    ("SELECT %s::int + 1 AS x, %s::numeric AS y, %s::date AS d",
     (41, Decimal("-2.50"), dt.date(2024, 2, 29))),
    ("SELECT relname FROM pg_class WHERE relname = %s", ("regions",)),
    ("SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
     "ON n.oid = c.relnamespace WHERE n.nspname = 'public' ORDER BY 1", ()),
    ("SELECT typname FROM pg_type WHERE oid = %s", (23,)),
    ("SELECT %s IS NULL AS x, %s::text AS y", ("a", None)),  # untyped: the literal fallback
    ("SELECT code, name FROM regions ORDER BY %s DESC", (2,)),  # a column position: literal form
    ("SELECT code FROM regions WHERE code IN (%s, %s) ORDER BY code LIMIT %s", ("N", "S", 1)),
)  # fmt: skip


@pytest.mark.parametrize("binary", [False, True])
def test_same_answers_with_and_without_fast_path(
    servers: tuple[ServerThread, ServerThread], binary: bool
) -> None:
    fast, slow = servers
    before = fast.server.upstream.statements  # type: ignore[union-attr]
    got: list[list[Any]] = []
    for srv in (fast, slow):
        with psycopg.connect(_dsn(srv.port), autocommit=True) as conn:
            cur = conn.cursor(binary=binary)
            out = []
            for sql, params in PARITY:
                for prepare in (False, True):
                    rows = cur.execute(sql, params, prepare=prepare).fetchall()
                    out.append((rows, [(d.name, d.type_code) for d in cur.description or ()]))
            got.append(out)
    assert got[0] == got[1]
    assert slow.server.upstream is None
    after = fast.server.upstream.statements  # type: ignore[union-attr]
    assert after - before >= 2 * len(PARITY)  # answered on the async pool, not in a thread


def test_errors_transactions_and_log_lines(
    servers: tuple[ServerThread, ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    fast, _ = servers
    caplog.set_level(logging.INFO, logger="dpsql.statement")
    with psycopg.connect(_dsn(fast.port)) as conn:
        with pytest.raises(pe.DivisionByZero) as e:
            conn.execute("SELECT 1 / %s::int AS x", (0,))
        assert "division by zero" in str(e.value)  # public errors keep their text
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(pe.InFailedSqlTransaction):
            conn.execute("SELECT code FROM regions")
        conn.rollback()
        with conn.transaction():
            assert conn.execute("SELECT count(*) FROM regions").fetchone() == (5,)
        assert conn.execute("SELECT 1 / %s::int", (1,)).fetchone() == (1,)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "dpsql.statement"]
    public = [x for x in lines if x["kind"] == "public"]
    assert {x["outcome"] for x in public} >= {"ok", "22012"}
    assert all(x["analyst"] == USER and x["latency_ms"] >= 0 for x in public)


def _running(demo_dsn: str, needle: str) -> int:
    with psycopg.connect(demo_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s "
            "AND pid <> pg_backend_pid()",
            (f"%{needle}%",),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_client_vanishing_mid_query_cancels_upstream(
    servers: tuple[ServerThread, ServerThread], demo_dsn: str
) -> None:
    fast, _ = servers
    c = RawClient(fast.port)
    c.login(USER, PASSWORD)
    c.send(m.Query("SELECT count(*) FROM generate_series(1, 1999999937)"))
    deadline = time.monotonic() + 30  # generous: a loaded 2-core machine
    while _running(demo_dsn, "1999999937") == 0:
        assert time.monotonic() < deadline, "the query never reached the upstream"
        time.sleep(0.05)
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    deadline = time.monotonic() + 30  # generous: a loaded 2-core machine
    while _running(demo_dsn, "1999999937") > 0:
        assert time.monotonic() < deadline, "the upstream query was not cancelled"
        time.sleep(0.05)


def test_cancel_request_on_fast_path(
    servers: tuple[ServerThread, ServerThread], demo_dsn: str
) -> None:
    fast, _ = servers
    with psycopg.connect(_dsn(fast.port), autocommit=True) as conn:
        import threading

        def cancel_once_running() -> None:  # a fixed 0.3 s timer could cancel before the query ran
            deadline = time.monotonic() + 20
            while _running(demo_dsn, "1999999943") == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            conn.cancel_safe()

        threading.Thread(target=cancel_once_running).start()
        with pytest.raises(pe.QueryCanceled):
            conn.execute("SELECT count(*) FROM generate_series(1, 1999999943)")
        assert conn.execute("SELECT code FROM regions WHERE code = %s", ("S",)).fetchone() == ("S",)


@pytest.mark.parametrize("which", ["fast", "thread"])
def test_cancel_sent_before_the_query_reaches_postgresql(
    servers: tuple[ServerThread, ServerThread], which: str
) -> None:
    """A CancelRequest as soon as the proxy runs the statement usually arrives before the query
    reaches PostgreSQL (which drops such a cancel): it is repeated until the statement ended."""
    srv = servers[0] if which == "fast" else servers[1]
    c = RawClient(srv.port)
    key = next(x for x in c.login(USER, PASSWORD) if isinstance(x, m.BackendKeyData))
    deadline = time.monotonic() + 60
    c.send(m.Query("SELECT count(*) FROM generate_series(1, 1999999951)"))
    session = srv.server.sessions[key.process_id]
    while not session.busy:
        assert time.monotonic() < deadline
        time.sleep(0.0005)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(m.CancelRequest(key.process_id, key.secret_key).encode())
    msgs = c.until_ready()
    errors = [x for x in msgs if isinstance(x, m.ErrorResponse)]
    assert errors and errors[0].fields["C"] == "57014", msgs
    c.close()


def _exchange(port: int, pipelined: bool) -> list[Any]:
    """A script of extended-protocol batches, each sent in one write (the session's pipelined
    lane) or message by message (its loop): the answers must be the same."""
    c = RawClient(port)
    c.login(USER, PASSWORD)
    c.send(m.Parse("one", "SELECT code, name FROM regions WHERE code = $1", ()), m.Sync())
    c.send(m.Parse("many", "SELECT code FROM regions WHERE code <> $1 ORDER BY code", ()))
    c.send(m.Parse("div", "SELECT 1 / $1::int AS x", ()), m.Sync())
    out: list[Any] = [c.until_ready(), c.until_ready()]
    batches: list[tuple[Any, ...]] = [
        (m.Bind("", "one", (), (b"N",), ()), m.Describe("P", ""), m.Execute("", 0)),
        (m.Bind("", "one", (), (b"N",), (1,)), m.Describe("P", ""), m.Execute("", 0)),
        (m.Bind("", "many", (), (b"N",), ()), m.Describe("P", ""), m.Execute("", 2)),
        (m.Bind("", "nope", (), (), ()), m.Describe("P", ""), m.Execute("", 0)),
        (m.Bind("", "one", (), (), ()), m.Describe("P", ""), m.Execute("", 0)),
        (m.Bind("p", "one", (), (b"S",), ()), m.Describe("P", "q"), m.Execute("p", 0)),
        (m.Query("BEGIN"),),
        (m.Bind("", "one", (), (b"S",), ()), m.Describe("P", ""), m.Execute("", 0)),
        (m.Bind("", "div", (), (b"0",), ()), m.Describe("P", ""), m.Execute("", 0)),
        (m.Bind("", "one", (), (b"S",), ()), m.Describe("P", ""), m.Execute("", 0)),
        (m.Query("ROLLBACK"),),
    ]
    for batch in batches:
        msgs = batch if isinstance(batch[0], m.Query) else (*batch, m.Sync())
        if pipelined or len(msgs) == 1:
            c.send(*msgs)
        else:  # the Bind alone, so the loop handles each message (the Execute is already there
            c.send(msgs[0])  # when the Describe is handled, as when a driver pipelines them)
            time.sleep(0.02)
            c.send(*msgs[1:])
        out.append(c.until_ready())
    c.close()
    return out


def test_pipelined_batch_answers_as_message_by_message(
    servers: tuple[ServerThread, ServerThread],
) -> None:
    fast, _ = servers
    one_by_one, pipelined = _exchange(fast.port, False), _exchange(fast.port, True)
    assert pipelined == one_by_one
    codes = [[type(x).__name__ for x in answer] for answer in pipelined[2:]]
    assert codes[0] == ["BindComplete", "RowDescription", "DataRow", "CommandComplete",
                        "ReadyForQuery"]  # fmt: skip
    assert codes[2][-2:] == ["PortalSuspended", "ReadyForQuery"]
    assert codes[3] == ["ErrorResponse", "ReadyForQuery"]  # an unknown statement
    assert pipelined[-3][-2].fields["C"] == "22012" and pipelined[-3][-1].status == "E"

"""Hostile and broken clients: the offending session gets an ErrorResponse or is closed; the server
and every other session keep working. Also the extended protocol's corners, driven byte by byte."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from dpsql.server.run import ServerThread
from dpsql.wire import messages as m
from dpsql.wire import session as wire_session
from dpsql.wire.server import ServerConfig
from tests.wire_support import PASSWORD, POLICY, CancelToken, FakeEngine, RawClient

ENGINE = FakeEngine()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    orig = wire_session._new_cancel_token
    wire_session._new_cancel_token = CancelToken  # type: ignore[assignment]
    with ServerThread(ENGINE, POLICY, ServerConfig(port=0, max_message_size=4096)) as srv:
        yield srv
    wire_session._new_cancel_token = orig  # type: ignore[assignment]


@pytest.fixture
def client(server: ServerThread) -> Iterator[RawClient]:
    c = RawClient(server.port)
    c.login()
    yield c
    c.close()


def healthy(server: ServerThread) -> bool:
    dsn = f"host=127.0.0.1 port={server.port} user=ana password='{PASSWORD}' dbname=db"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as conn:
        return conn.execute("SELECT gen 1").fetchall() == [(0,)]


def errors(msgs: list[object]) -> list[str]:
    return [x.fields["C"] for x in msgs if isinstance(x, m.ErrorResponse)]


def test_startup_sequence(server: ServerThread) -> None:
    c = RawClient(server.port)
    msgs = c.login()
    names = {x.name for x in msgs if isinstance(x, m.ParameterStatus)}
    assert {"server_version", "client_encoding", "DateStyle", "TimeZone", "IntervalStyle",
            "integer_datetimes", "standard_conforming_strings", "is_superuser",
            "application_name", "server_encoding"} <= names  # fmt: skip
    assert isinstance(msgs[-2], m.BackendKeyData) and msgs[-1] == m.ReadyForQuery("I")
    c.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00\x00\x00\x03",
        b"\x00\x00\x00\x08\x00\x02\x00\x00",  # protocol 2.0
        b"\x00\x00\x00\x10\x00\x03\x00\x00user\x00ana",  # unterminated parameters
        b"\x00\x00\x00\x09\x00\x03\x00\x00\x00",  # no user
    ],
)
def test_garbage_before_startup(server: ServerThread, garbage: bytes) -> None:
    c = RawClient(server.port)
    c.sock.sendall(garbage)
    try:
        first = c.recv()
        assert isinstance(first, m.ErrorResponse) and first.fields["S"] == "FATAL"
    except (EOFError, ConnectionError):
        pass
    assert c.closed()
    assert healthy(server)


def test_ssl_and_gss_requests_answered_n(server: ServerThread) -> None:
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(m.GSSENCRequest().encode())
    assert s.recv(1) == b"N"
    s.sendall(m.SSLRequest().encode())
    assert s.recv(1) == b"N"
    s.close()


def test_oversized_message_closes_only_that_session(
    server: ServerThread, client: RawClient
) -> None:
    other = RawClient(server.port)
    other.login()
    client.send(b"Q" + struct.pack("!I", 10_000) + b"x" * 100)
    err = client.recv()
    assert isinstance(err, m.ErrorResponse) and err.fields["C"] == "08P01"
    assert err.fields["S"] == "FATAL"
    assert client.closed()
    other.send(m.Query("SELECT gen 2"))
    assert errors(other.until_ready()) == []
    other.close()


def test_unknown_message_type_is_fatal(server: ServerThread, client: RawClient) -> None:
    client.send(b"\x01\x00\x00\x00\x04")
    err = client.recv()
    assert isinstance(err, m.ErrorResponse) and err.fields["C"] == "08P01"
    assert client.closed()
    assert healthy(server)


def test_malformed_query_body_is_an_error_not_a_disconnect(client: RawClient) -> None:
    client.send(b"Q\x00\x00\x00\x07\xff\xfe\x00")  # invalid UTF-8
    msgs = client.until_ready()
    assert errors(msgs) == ["22021"]
    client.send(m.Query("SELECT gen 1"))
    assert errors(client.until_ready()) == []


def test_truncated_message_then_vanish(server: ServerThread, client: RawClient) -> None:
    client.send(m.Query("SELECT gen 3").encode()[:7])
    client.close()
    time.sleep(0.1)
    assert healthy(server)


def test_client_vanishes_mid_query(server: ServerThread, client: RawClient) -> None:
    client.send(m.Query("SELECT sleep"))
    time.sleep(0.1)
    client.sock.close()
    assert healthy(server)


def test_extended_error_discards_until_sync(client: RawClient) -> None:
    client.send(
        m.Parse("", "SELECT raw FROM people"),
        m.Bind("", ""),
        m.Execute("", 0),
        m.Parse("", "SELECT gen 1"),
        m.Sync(),
    )
    msgs = client.until_ready()
    assert errors(msgs) == ["42501"]
    assert not any(isinstance(x, m.ParseComplete) for x in msgs)
    client.send(m.Parse("", "SELECT gen 1"), m.Bind("", ""), m.Execute("", 0), m.Sync())
    msgs = client.until_ready()
    assert [type(x).__name__ for x in msgs] == [
        "ParseComplete", "BindComplete", "DataRow", "CommandComplete", "ReadyForQuery"
    ]  # fmt: skip


def test_portal_row_limits(client: RawClient) -> None:
    client.send(
        m.Parse("s", "SELECT gen 5"),
        m.Describe("S", "s"),
        m.Bind("p", "s", result_formats=(1,)),
        m.Describe("P", "p"),
        m.Execute("p", 2),
        m.Execute("p", 2),
        m.Execute("p", 2),
        m.Sync(),
    )
    msgs = client.until_ready()
    kinds = [type(x).__name__ for x in msgs]
    assert kinds == [
        "ParseComplete", "ParameterDescription", "RowDescription", "BindComplete",
        "RowDescription", "DataRow", "DataRow", "PortalSuspended", "DataRow", "DataRow",
        "PortalSuspended", "DataRow", "CommandComplete", "ReadyForQuery",
    ]  # fmt: skip
    rows = [x.values[0] for x in msgs if isinstance(x, m.DataRow)]
    assert rows == [struct.pack("!i", i) for i in range(5)]
    assert msgs[4].fields[0].format == 1 and msgs[2].fields[0].format == 0
    assert msgs[-2] == m.CommandComplete("SELECT 1")


def test_flush_sends_pending_output(client: RawClient) -> None:
    client.send(m.Parse("", "SELECT gen 1"), m.Flush())
    assert client.recv() == m.ParseComplete()
    client.send(m.Sync())
    assert client.until_ready() == [m.ReadyForQuery("I")]


def test_named_statement_errors(client: RawClient) -> None:
    client.send(m.Parse("a", "SELECT gen 1"), m.Parse("a", "SELECT gen 1"), m.Sync())
    assert errors(client.until_ready()) == ["42P05"]
    client.send(m.Bind("", "nope"), m.Sync())
    assert errors(client.until_ready()) == ["26000"]
    client.send(m.Execute("nope", 0), m.Sync())
    assert errors(client.until_ready()) == ["34000"]
    client.send(m.Bind("", "a", params=(b"1",)), m.Sync())
    assert errors(client.until_ready()) == ["08P01"]
    client.send(m.Close("S", "a"), m.Close("S", "never"), m.Sync())
    msgs = client.until_ready()
    assert msgs == [m.CloseComplete(), m.CloseComplete(), m.ReadyForQuery("I")]


def test_empty_queries(client: RawClient) -> None:
    client.send(m.Query(""))
    assert client.until_ready() == [m.EmptyQueryResponse(), m.ReadyForQuery("I")]
    client.send(m.Query(" ; ;"))
    assert client.until_ready() == [m.EmptyQueryResponse(), m.ReadyForQuery("I")]


def test_simple_protocol_transaction_status(client: RawClient) -> None:
    client.send(m.Query("BEGIN; SELECT gen 1"))
    assert client.until_ready()[-1] == m.ReadyForQuery("T")
    client.send(m.Query("SELECT raw"))
    assert client.until_ready()[-1] == m.ReadyForQuery("E")
    client.send(m.Query("SELECT gen 1"))
    msgs = client.until_ready()
    assert errors(msgs) == ["25P02"] and msgs[-1] == m.ReadyForQuery("E")
    client.send(m.Query("COMMIT"))
    msgs = client.until_ready()
    assert m.CommandComplete("ROLLBACK") in msgs and msgs[-1] == m.ReadyForQuery("I")


def test_function_call_and_copy_messages(client: RawClient) -> None:
    client.send(m.FunctionCall(b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"))
    assert errors(client.until_ready()) == ["0A000"]
    client.send(m.CopyData(b"x"), m.CopyDone(), m.Query("SELECT gen 1"))
    assert errors(client.until_ready()) == []


def test_many_sessions_survive_a_flood_of_bad_ones(server: ServerThread) -> None:
    good = [RawClient(server.port) for _ in range(3)]
    for g in good:
        g.login()
    for i in range(30):
        c = RawClient(server.port)
        c.sock.sendall(bytes([i]) * (i + 1))
        c.close()
    for g in good:
        g.send(m.Query("SELECT gen 2"))
        assert errors(g.until_ready()) == []
        g.close()


def test_newer_minor_version_and_protocol_options_are_negotiated(server: ServerThread) -> None:
    c = RawClient(server.port)
    c.send(m.StartupMessage(protocol=(3 << 16) | 2, parameters={"user": "ana", "_pq_.x": "1"}))
    assert c.recv() == m.NegotiateProtocolVersion(0, ("_pq_.x",))
    assert isinstance(c.recv(), m.AuthenticationSASL)
    c.close()


def test_large_result_is_streamed(client: RawClient) -> None:
    client.send(m.Query("SELECT gen 100000"))
    counts = client.count_until_ready()
    assert counts[b"D"] == 100_000 and counts[b"C"] == 1 and counts[b"E"] == 0


def test_pipelined_describe_execute_skips_the_engine_describe(client: RawClient) -> None:
    sql = "SELECT gen 3 /* pipelined */"
    client.send(m.Parse("", sql), m.Bind("", ""), m.Describe("P", ""), m.Execute("", 0), m.Sync())
    kinds = [type(x).__name__ for x in client.until_ready()]
    assert kinds == ["ParseComplete", "BindComplete", "RowDescription", "DataRow", "DataRow",
                     "DataRow", "CommandComplete", "ReadyForQuery"]  # fmt: skip
    assert ENGINE.describes[sql] == 0
    client.send(m.Bind("", ""), m.Describe("P", ""), m.Sync())  # no Execute behind it
    assert [type(x).__name__ for x in client.until_ready()] == [
        "BindComplete", "RowDescription", "ReadyForQuery"
    ]  # fmt: skip
    assert ENGINE.describes[sql] == 1


def test_error_is_sent_before_sync(client: RawClient) -> None:
    """asyncpg waits for the ErrorResponse of Parse/Describe/Flush before it sends Sync."""
    client.send(m.Parse("", "SELECT raw"), m.Describe("S", ""), m.Flush())
    err = client.recv()
    assert isinstance(err, m.ErrorResponse) and err.fields["C"] == "42501"
    client.send(m.Sync())
    assert client.until_ready() == [m.ReadyForQuery("I")]


def test_slow_reader_does_not_block_other_sessions(server: ServerThread, client: RawClient) -> None:
    client.send(m.Query("SELECT gen 150000"))  # megabytes of rows the client doesn't read yet
    time.sleep(0.3)
    ok: list[bool] = []
    probe = threading.Thread(target=lambda: ok.append(healthy(server)), daemon=True)
    probe.start()
    probe.join(60)  # a deadline: a session blocked behind the slow reader would never answer
    assert ok == [True]
    assert client.count_until_ready()[b"D"] == 150_000

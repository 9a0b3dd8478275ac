"""The one-comparison lane for Bind + [Describe] + Execute + Sync (dpsql.wire.batch).

Property: for every well-formed Bind body the fast decoder gives Bind.decode's message; for any
bytes it gives that message or None (then Bind.decode reports the error), never a message that
Bind.decode would refuse or read differently.
Property: a client pipelining many statements in one write (libpq's and asyncpg's shapes, named
portals, row limits, errors, NULLs, binary results) gets, byte for byte, the answers it gets
sending one batch at a time and waiting for each; with a tiny max message size, so the server
pauses and resumes reading many times on the way.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.server.run import ServerThread
from dpsql.wire import messages as m
from dpsql.wire.batch import decode_bind
from dpsql.wire.server import ServerConfig
from tests.wire_support import RawClient

_names = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                 max_size=8)  # fmt: skip
_formats = st.lists(st.sampled_from([0, 1]), max_size=4).map(tuple)
_binds = st.builds(
    m.Bind,
    _names,
    _names,
    _formats,
    st.lists(st.none() | st.binary(max_size=12), max_size=5).map(tuple),
    _formats,
)


@settings(max_examples=400, deadline=None)
@given(_binds)
def test_fast_bind_decodes_as_bind_decode(msg: m.Bind) -> None:
    body = msg.encode()[5:]
    got = decode_bind(body)
    assert got is not None and m.Bind(*got) == m.Bind.decode(body) == msg


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=40), _binds.map(lambda b: b.encode()[5:])),
       st.integers(0, 60), st.binary(max_size=3))  # fmt: skip
def test_fast_bind_never_accepts_what_bind_decode_refuses(
    body: bytes, at: int, junk: bytes
) -> None:
    for candidate in (body, body[:at] + junk + body[at:], body[:at]):
        fast = decode_bind(candidate)
        if fast is None:
            continue
        assert m.Bind(*fast) == m.Bind.decode(candidate)  # raises if Bind.decode refuses it


USER = PASSWORD = "analyst"
STATEMENTS = (
    ("one", "SELECT code, name FROM regions WHERE code = $1"),
    ("many", "SELECT code, NULLIF(code, 'S') AS n FROM regions WHERE code <> $1 ORDER BY code"),
    ("div", "SELECT 1 / $1::int AS x"),
)


def _batches() -> list[tuple[Any, ...]]:
    des = (m.Describe("P", ""), m.Execute("", 0), m.Sync())
    es = (m.Execute("", 0), m.Sync())
    out: list[tuple[Any, ...]] = []
    for i in range(60):
        code = b"NSEWC"[i % 5 : i % 5 + 1]
        out += [
            (m.Bind("", "one", (), (code,), ()), *des),  # libpq's shape
            (m.Bind("", "many", (), (code,), (1,)), *es),  # asyncpg's, binary results
            (m.Bind("p", "many", (), (code,), ()), m.Describe("P", "p"), m.Execute("p", 2),
             m.Execute("p", 0), m.Sync()),  # a named portal, a row limit
            (m.Bind("", "div", (), (b"0" if i % 7 == 0 else b"1",), ()), *des),  # some fail
            (m.Bind("", "nope", (), (), ()), *es),  # an unknown statement
        ]  # fmt: skip
    return out


def _client(port: int) -> RawClient:
    c = RawClient(port)
    c.login(USER, PASSWORD)
    c.send(*(m.Parse(n, sql, ()) for n, sql in STATEMENTS), m.Sync())
    c.until_ready()
    return c


@pytest.fixture(scope="module")
def server(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    engine = Engine(demo_policy, demo_dsn, pool_size=2)
    config = ServerConfig(port=0, shutdown_grace_s=2, max_message_size=512)
    srv = ServerThread(engine, demo_policy, config).start()
    yield srv
    srv.stop()
    engine.close()


def test_pipelined_batches_answer_as_one_at_a_time(server: ServerThread) -> None:
    batches = _batches()
    c = _client(server.port)
    one_at_a_time = []
    for batch in batches:
        c.send(*batch)
        one_at_a_time.append(c.until_ready())
    c.send(*(msg for batch in batches for msg in batch))  # ~20 kB in one write
    pipelined = [c.until_ready() for _ in batches]
    c.close()
    assert pipelined == one_at_a_time
    kinds = [[type(x).__name__ for x in answer] for answer in one_at_a_time[:5]]
    assert kinds[0] == ["BindComplete", "RowDescription", "DataRow", "CommandComplete",
                        "ReadyForQuery"]  # fmt: skip
    assert kinds[1] == ["BindComplete"] + ["DataRow"] * 4 + ["CommandComplete", "ReadyForQuery"]
    assert "PortalSuspended" in kinds[2]
    assert one_at_a_time[3][1].fields["C"] == "22012"  # i = 0: a division by zero
    assert kinds[4] == ["ErrorResponse", "ReadyForQuery"]
    nulls = [row.values for row in one_at_a_time[1] if isinstance(row, m.DataRow)]
    assert (b"S", None) in nulls  # binary text values are the bytes; NULL stays NULL


def test_a_malformed_bind_in_a_batch_is_reported(server: ServerThread) -> None:
    c = _client(server.port)
    body = m.Bind("", "one", (), (b"N",), ()).encode()[5:-2] + b"\x00\x01\x00\x07"  # format 7
    bad = b"B" + struct.pack("!I", len(body) + 4) + body
    c.send(bad, m.Describe("P", ""), m.Execute("", 0), m.Sync())
    got = c.until_ready()
    assert isinstance(got[0], m.ErrorResponse) and got[0].fields["C"] == "08P01", got
    c.send(m.Bind("", "one", (), (b"N",), ()), m.Execute("", 0), m.Sync())
    assert [type(x).__name__ for x in c.until_ready()] == ["BindComplete", "DataRow",
                                                          "CommandComplete", "ReadyForQuery"]  # fmt: skip
    c.close()


def test_fast_bind_errors_match_general_decoder() -> None:
    with pytest.raises(DpsqlError):
        m.Bind.decode(b"\x00s\x00\x00\x01\x00\x07\x00\x00\x00\x00")
    assert decode_bind(b"\x00s\x00\x00\x01\x00\x07\x00\x00\x00\x00") is None

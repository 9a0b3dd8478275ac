"""Test support for the wire protocol layer: a small fake engine (protocol-layer unit tests ONLY;
integration tests use the real Engine) and a raw protocol client built on dpsql's own codec."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from scramp import ScramClient
from sqlglot import exp

from dpsql.errors import PrivacyViolation, QueryCanceled, SqlSyntaxError
from dpsql.execute.context import Execution
from dpsql.execute.prepared import (
    CatalogQuery,
    EmptyQuery,
    ExplainQuery,
    LedgerQuery,
    Prepared,
    PublicQuery,
    TreeQuery,
)
from dpsql.result import Result, ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.explain_options import ExplainOptions
from dpsql.sql.parse import ParsedEmpty, ParsedQuery
from dpsql.wire import messages as m
from dpsql.wire.auth import make_verifier
from dpsql.wire.framing import FrameDecoder
from tests.policies import build_policy

PASSWORD = "correct horse"
POLICY = build_policy(
    base={},
    analysts={
        "ana": {"credential": make_verifier(PASSWORD), "budget": {"epsilon": 10}},
        "bob": {"credential": make_verifier("bobpw"), "budget": {"epsilon": 10}},
        "nocred": {"budget": {"epsilon": 1}},
    },
)

TYPES_ROW = (
    7, 70000, 2**40, 1.5, Decimal("12.345"), True, "héllo", date(2024, 2, 29),
    datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), b"\x00\xff", [1, None, 3],
)  # fmt: skip
TYPES_COLS = tuple(
    ResultColumn(n, oid)
    for n, oid in zip(
        ("i2", "i4", "i8", "f8", "num", "b", "t", "d", "ts", "bytes", "arr"),
        (21, 23, 20, 701, 1700, 16, 25, 1082, 1184, 17, 1007),
        strict=True,
    )
)


class CancelToken:
    def __init__(self) -> None:
        self.event = threading.Event()

    def cancel(self) -> None:
        self.event.set()


def fake_prepared(sql: str, kind: str, param_count: int = 0) -> Prepared:
    """A real :data:`~dpsql.execute.prepared.Prepared` of ``kind`` for the fake engine (the
    wire routes on its class): "public", "catalog", "private" (a ``TreeQuery``), "explain" (of a
    public statement), "dpsql" or "empty". The fake parses nothing: its tree is None (the wire
    then infers no parameter type, as for a statement without parameters; the parsed statement,
    which the wire never reads, holds ``SELECT 1``), and a private one's split and leaves are
    empty (only the fake engine runs it)."""
    parsed = ParsedEmpty(sql) if kind == "empty" else ParsedQuery(sql, "SELECT", exp.select("1"))
    common: dict[str, Any] = {"text": sql, "statement": parsed, "fingerprint": "fp"}
    query = {"tree": None, "param_count": param_count}
    if kind == "empty":
        return EmptyQuery(**common)
    if kind == "dpsql":
        return LedgerQuery(**common, param_count=param_count)
    if kind == "private":
        return TreeQuery(**common, **query, split=None, leaves=())
    if kind == "explain":
        inner = PublicQuery(**common, **query)
        return ExplainQuery(**common, inner=inner, explain=ExplainOptions())
    return {"public": PublicQuery, "catalog": CatalogQuery}[kind](**common, **query)


class FakeEngine:
    """Answers a handful of fixed statements the way the engine contract says."""

    def __init__(self) -> None:
        self.prepares: Counter[str] = Counter()
        self.describes: Counter[str] = Counter()
        self.executed: list[tuple[str, SessionContext, tuple[Any, ...]]] = []
        self.last_epsilon: Fraction | None = None

    def split(self, sql: str) -> list[str]:
        return [s.strip() for s in sql.split(";") if s.strip()]

    def prepare(self, sql: str, analyst: str | None = None) -> Prepared:
        self.prepares[sql] += 1
        low = sql.lower().strip()
        if ";" in low.rstrip(";"):
            raise SqlSyntaxError("cannot insert multiple commands into a prepared statement")
        if low.startswith("bad"):
            raise SqlSyntaxError('syntax error at or near "bad"', position=1)
        if "raw" in low:
            raise PrivacyViolation("raw rows of people cannot be returned", hint="aggregate")
        if not low.startswith("select"):
            raise SqlSyntaxError(f'syntax error at or near "{low.split()[0]}"')
        nparams = max((int(x) for x in re.findall(r"\$(\d+)", sql)), default=0)
        return fake_prepared(sql, "private" if "count" in low else "public", nparams)

    def _columns(self, p: Prepared) -> tuple[ResultColumn, ...]:
        low = p.text.lower()
        if "count" in low:
            return (ResultColumn("count", 20),)
        if "gen" in low:
            return (ResultColumn("i", 23),)
        if "types" in low:
            return TYPES_COLS
        if "echo" in low:
            return tuple(ResultColumn(f"p{i + 1}", 25) for i in range(p.param_count))
        return (ResultColumn("?column?", 23),)

    def describe(
        self, prepared: Prepared, session: SessionContext, param_types: Sequence[int] = ()
    ) -> tuple[ResultColumn, ...]:
        self.describes[prepared.text] += 1
        return self._columns(prepared)

    def run(self, execution: Execution) -> Result:
        prepared, session = execution.prepared, execution.session
        params, cancel = execution.params, execution.cancel
        self.executed.append((prepared.text, session, tuple(params)))
        self.last_epsilon = session.epsilon
        low = prepared.text.lower()
        cols = self._columns(prepared)
        if "sleep" in low:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if cancel is not None and cancel.event.wait(0.01):
                    raise QueryCanceled("canceling statement due to user request")
            return Result(cols, [(1,)], "SELECT 1")
        if "count" in low:
            return Result(cols, [(42,)], "SELECT 1", notices=("noise added",), epsilon_spent=0.5)
        if "gen" in low:
            n = int(re.findall(r"gen (\d+)", low)[0])
            return Result(cols, [(i,) for i in range(n)], f"SELECT {n}")
        if "types" in low:
            return Result(cols, [TYPES_ROW], "SELECT 1")
        if "echo" in low:
            return Result(cols, [tuple(None if v is None else repr(v) for v in params)], "SELECT 1")
        return Result(cols, [(1,)], "SELECT 1")


class RawClient:
    """A minimal protocol client over a socket, using dpsql's message classes."""

    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.dec = FrameDecoder(1 << 30)
        self.dec.startup = False

    def send(self, *msgs: Any) -> None:
        self.sock.sendall(b"".join(x if isinstance(x, bytes) else x.encode() for x in msgs))

    def recv(self) -> Any:
        while (f := self.dec.next()) is None:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError
            self.dec.feed(data)
        assert f.code is not None
        return m.decode_backend(f.code, f.body)

    def until_ready(self) -> list[Any]:
        out = []
        while True:
            msg = self.recv()
            out.append(msg)
            if isinstance(msg, m.ReadyForQuery):
                return out

    def count_until_ready(self) -> Counter[bytes]:
        """Message type counts up to ReadyForQuery, without decoding (for big results)."""
        counts: Counter[bytes] = Counter()
        while True:
            while (f := self.dec.next()) is None:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise EOFError
                self.dec.feed(data)
            assert f.code is not None
            counts[f.code] += 1
            if f.code == b"Z":
                return counts

    def closed(self) -> bool:
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.dec.feed(data)
        except (ConnectionError, TimeoutError):
            return True

    def login(self, user: str = "ana", password: str = PASSWORD) -> list[Any]:
        self.send(m.StartupMessage(parameters={"user": user, "database": "db"}))
        sasl = self.recv()
        assert isinstance(sasl, m.AuthenticationSASL), sasl
        c = ScramClient(["SCRAM-SHA-256"], user, password)
        self.send(m.SASLInitialResponse("SCRAM-SHA-256", c.get_client_first().encode()))
        cont = self.recv()
        assert isinstance(cont, m.AuthenticationSASLContinue), cont
        c.set_server_first(cont.data.decode())
        self.send(m.SASLResponse(c.get_client_final().encode()))
        return self.until_ready()

    def close(self) -> None:
        self.sock.close()

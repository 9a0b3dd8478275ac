"""Messages a client sends, one class each, named as in the PostgreSQL protocol documentation.

Each class has ``encode() -> bytes`` (the whole message, type byte and length included) and
``decode(body) -> message`` (the body after the length word), so ``decode(encode()[5:])`` round-trips.
Startup packets (:class:`StartupMessage`, :class:`SSLRequest`, :class:`GSSENCRequest`,
:class:`CancelRequest`) have no type byte: their body starts after the length word and begins with a
request code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Self

from dpsql.errors import ProtocolViolation
from dpsql.wire.messages._base import Empty, Opaque, one_string
from dpsql.wire.messages._buffer import INT16, INT32, UINT32, Reader, cstr, frame

PROTOCOL_3_0 = 196608  # 3 << 16
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102


def _startup_frame(body: bytes) -> bytes:
    return UINT32.pack(len(body) + 4) + body


@dataclass(frozen=True, slots=True)
class StartupMessage:
    """The first packet of a session: protocol version and parameters (user, database, ...)."""

    protocol: int = PROTOCOL_3_0
    parameters: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = UINT32.pack(self.protocol)
        body += b"".join(cstr(k) + cstr(v) for k, v in self.parameters.items()) + b"\x00"
        return _startup_frame(body)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        protocol = r.uint32()
        params: dict[str, str] = {}
        while True:
            key = r.cstring()
            if key == "":
                break
            params[key] = r.cstring()
        r.end()
        return cls(protocol, params)


@dataclass(frozen=True, slots=True)
class SSLRequest:
    def encode(self) -> bytes:
        return _startup_frame(UINT32.pack(SSL_REQUEST_CODE))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        r.uint32()
        r.end()
        return cls()


@dataclass(frozen=True, slots=True)
class GSSENCRequest:
    def encode(self) -> bytes:
        return _startup_frame(UINT32.pack(GSSENC_REQUEST_CODE))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        r.uint32()
        r.end()
        return cls()


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """Sent on a fresh connection: cancel the query running in session (process_id, secret_key)."""

    process_id: int
    secret_key: int

    def encode(self) -> bytes:
        body = UINT32.pack(CANCEL_REQUEST_CODE) + INT32.pack(self.process_id)
        return _startup_frame(body + INT32.pack(self.secret_key))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        r.uint32()
        pid, key = r.int32(), r.int32()
        # Protocol 3.2 allows longer keys; we only issue 4-byte ones, so anything else can't match.
        r.rest()
        return cls(pid, key)


StartupPacket = StartupMessage | SSLRequest | GSSENCRequest | CancelRequest


def decode_startup(body: bytes) -> StartupPacket:
    """Decode a startup-phase packet by its request code."""
    r = Reader(body)
    code = r.uint32()
    if code == SSL_REQUEST_CODE:
        return SSLRequest.decode(body)
    if code == GSSENC_REQUEST_CODE:
        return GSSENCRequest.decode(body)
    if code == CANCEL_REQUEST_CODE:
        return CancelRequest.decode(body)
    return StartupMessage.decode(body)


@dataclass(frozen=True, slots=True)
class Query:
    code: ClassVar[bytes] = b"Q"
    sql: str

    def encode(self) -> bytes:
        return frame(self.code, cstr(self.sql))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(one_string(body))


@dataclass(frozen=True, slots=True)
class Parse:
    code: ClassVar[bytes] = b"P"
    statement: str
    sql: str
    param_types: tuple[int, ...] = ()

    def encode(self) -> bytes:
        body = cstr(self.statement) + cstr(self.sql) + INT16.pack(len(self.param_types))
        body += b"".join(UINT32.pack(t) for t in self.param_types)
        return frame(self.code, body)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        name, sql = r.cstring(), r.cstring()
        types = tuple(r.uint32() for _ in range(r.count16("parameter type")))
        r.end()
        return cls(name, sql, types)


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind a statement's parameters into a portal. Formats: 0 text, 1 binary."""

    code: ClassVar[bytes] = b"B"
    portal: str
    statement: str
    param_formats: tuple[int, ...] = ()
    params: tuple[bytes | None, ...] = ()
    result_formats: tuple[int, ...] = ()

    def encode(self) -> bytes:
        parts = [cstr(self.portal), cstr(self.statement), INT16.pack(len(self.param_formats))]
        parts += [INT16.pack(f) for f in self.param_formats]
        parts.append(INT16.pack(len(self.params)))
        for p in self.params:
            parts.append(INT32.pack(-1) if p is None else INT32.pack(len(p)) + p)
        parts.append(INT16.pack(len(self.result_formats)))
        parts += [INT16.pack(f) for f in self.result_formats]
        return frame(self.code, b"".join(parts))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        portal, statement = r.cstring(), r.cstring()
        pformats = tuple(_format(r) for _ in range(r.count16("parameter format")))
        params: list[bytes | None] = []
        for _ in range(r.count16("parameter")):
            n = r.int32()
            if n < -1:
                raise ProtocolViolation(f"invalid message format: parameter length {n}")
            params.append(None if n == -1 else r.raw(n))
        rformats = tuple(_format(r) for _ in range(r.count16("result format")))
        r.end()
        return cls(portal, statement, pformats, tuple(params), rformats)


def _format(r: Reader) -> int:
    f = r.int16()
    if f not in (0, 1):
        raise ProtocolViolation(f"unsupported format code: {f}", hint="use 0 (text) or 1 (binary)")
    return f


@dataclass(frozen=True, slots=True)
class _Target:
    """A message naming a prepared statement (kind 'S') or a portal (kind 'P')."""

    code: ClassVar[bytes] = b"?"
    kind: str
    name: str

    def encode(self) -> bytes:
        return frame(self.code, self.kind.encode("ascii") + cstr(self.name))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        kind = r.byte()
        if kind not in (ord("S"), ord("P")):
            raise ProtocolViolation(f"invalid DESCRIBE/CLOSE message subtype {kind}")
        name = r.cstring()
        r.end()
        return cls(chr(kind), name)


@dataclass(frozen=True, slots=True)
class Describe(_Target):
    """Describe a prepared statement (kind 'S') or a portal (kind 'P')."""

    code: ClassVar[bytes] = b"D"


@dataclass(frozen=True, slots=True)
class Execute:
    """Run a portal; ``max_rows`` 0 means all rows."""

    code: ClassVar[bytes] = b"E"
    portal: str
    max_rows: int = 0

    def encode(self) -> bytes:
        return frame(self.code, cstr(self.portal) + INT32.pack(self.max_rows))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        portal, n = r.cstring(), r.int32()
        r.end()
        return cls(portal, max(n, 0))


@dataclass(frozen=True, slots=True)
class Close(_Target):
    """Close a prepared statement (kind 'S') or a portal (kind 'P')."""

    code: ClassVar[bytes] = b"C"


@dataclass(frozen=True, slots=True)
class Sync(Empty):
    code: ClassVar[bytes] = b"S"


@dataclass(frozen=True, slots=True)
class Flush(Empty):
    code: ClassVar[bytes] = b"H"


@dataclass(frozen=True, slots=True)
class Terminate(Empty):
    code: ClassVar[bytes] = b"X"


@dataclass(frozen=True, slots=True)
class CopyDone(Empty):
    code: ClassVar[bytes] = b"c"


@dataclass(frozen=True, slots=True)
class PasswordMessage:
    """A cleartext (or md5) password response."""

    code: ClassVar[bytes] = b"p"
    password: str

    def encode(self) -> bytes:
        return frame(self.code, cstr(self.password))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(one_string(body))


@dataclass(frozen=True, slots=True)
class SASLInitialResponse:
    """The client's first SASL message: the chosen mechanism and its initial data."""

    code: ClassVar[bytes] = b"p"
    mechanism: str
    data: bytes | None

    def encode(self) -> bytes:
        tail = INT32.pack(-1) if self.data is None else INT32.pack(len(self.data)) + self.data
        return frame(self.code, cstr(self.mechanism) + tail)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        mech, n = r.cstring(), r.int32()
        if n < -1:
            raise ProtocolViolation(f"invalid SASL initial response length {n}")
        data = None if n == -1 else r.raw(n)
        r.end()
        return cls(mech, data)


@dataclass(frozen=True, slots=True)
class SASLResponse(Opaque):
    code: ClassVar[bytes] = b"p"


@dataclass(frozen=True, slots=True)
class CopyData(Opaque):
    code: ClassVar[bytes] = b"d"


@dataclass(frozen=True, slots=True)
class CopyFail:
    code: ClassVar[bytes] = b"f"
    message: str

    def encode(self) -> bytes:
        return frame(self.code, cstr(self.message))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(one_string(body))


@dataclass(frozen=True, slots=True)
class FunctionCall(Opaque):
    """The legacy fast-path function call; dpsql refuses it (the body is kept opaque)."""

    code: ClassVar[bytes] = b"F"


FrontendMessage = (
    Query
    | Parse
    | Bind
    | Describe
    | Execute
    | Close
    | Sync
    | Flush
    | Terminate
    | CopyData
    | CopyDone
    | CopyFail
    | FunctionCall
)

# 'p' is not here: its meaning depends on the authentication step (see dpsql.wire.auth).
_BY_CODE: dict[bytes, type[FrontendMessage]] = {
    c.code: c
    for c in (
        Query,
        Parse,
        Bind,
        Describe,
        Execute,
        Close,
        Sync,
        Flush,
        Terminate,
        CopyData,
        CopyDone,
        CopyFail,
        FunctionCall,
    )
}


def decode_frontend(code: bytes, body: bytes) -> FrontendMessage:
    """Decode a typed client message after authentication.

    Raises:
        ProtocolViolation: unknown type byte or malformed body.
    """
    cls = _BY_CODE.get(code)
    if cls is None:
        raise ProtocolViolation(
            f"invalid frontend message type {code[0]}", hint="the client is not speaking protocol 3"
        )
    return cls.decode(body)

"""Messages a client sends, one class each, named as in the PostgreSQL protocol documentation.

Each class declares its type byte and the wire type of each field (its ``layout``);
:class:`dpsql.wire.messages._base.Message` gives it ``encode() -> bytes`` (the whole message, type
byte and length included) and ``decode(body) -> message`` (the body after the length word), so
``decode(encode()[5:])`` round-trips. Startup packets (:class:`StartupMessage`, :class:`SSLRequest`, :class:`GSSENCRequest`,
:class:`CancelRequest`) have no type byte: their body starts after the length word and begins with a
request code.
"""

from __future__ import annotations

from dataclasses import field
from typing import Self, get_args

from dpsql.errors import ProtocolViolation
from dpsql.wire.messages._base import (
    STRING,
    U32,
    Codec,
    KeyData,
    Message,
    Opaque,
    array,
    nullable,
)
from dpsql.wire.messages._buffer import INT16, INT32, Reader, cstr

PROTOCOL_3_0 = 196608  # 3 << 16
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102


def _put_parameters(v: dict[str, str]) -> bytes:
    return b"".join([cstr(k) + cstr(v) for k, v in v.items()]) + b"\x00"


def _get_parameters(r: Reader) -> dict[str, str]:
    params: dict[str, str] = {}
    while (key := r.cstring()) != "":
        params[key] = r.cstring()
    return params


def _format(r: Reader) -> int:
    f = r.int16()
    if f not in (0, 1):
        raise ProtocolViolation(f"unsupported format code: {f}", hint="use 0 (text) or 1 (binary)")
    return f


def _target_kind(r: Reader) -> str:
    kind = r.byte()
    if kind not in (ord("S"), ord("P")):
        raise ProtocolViolation(f"invalid DESCRIBE/CLOSE message subtype {kind}")
    return chr(kind)


def _row_limit(r: Reader) -> int:
    return max(r.int32(), 0)


# Name=value pairs ended by an empty name (a startup packet's parameters).
PARAMETERS: Codec[dict[str, str]] = Codec(_put_parameters, _get_parameters)
FORMAT: Codec[int] = Codec(INT16.pack, _format)  # 0 text, 1 binary
TARGET_KIND: Codec[str] = Codec(lambda v: v.encode("ascii"), _target_kind)  # 'S' or 'P'
ROW_LIMIT: Codec[int] = Codec(INT32.pack, _row_limit)  # a negative one is read as 0 (all rows)


class StartupMessage(Message, code=b"", layout=(U32, PARAMETERS)):
    """The first packet of a session: protocol version and parameters (user, database, ...)."""

    protocol: int = PROTOCOL_3_0
    parameters: dict[str, str] = field(default_factory=dict)


class SSLRequest(Message, code=b"", head=SSL_REQUEST_CODE): ...


class GSSENCRequest(Message, code=b"", head=GSSENC_REQUEST_CODE): ...


class CancelRequest(KeyData, code=b"", head=CANCEL_REQUEST_CODE):
    """Sent on a fresh connection: cancel the query running in session (process_id, secret_key)."""

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


class Query(Message, code=b"Q", layout=(STRING,)):
    sql: str


class Parse(Message, code=b"P", layout=(STRING, STRING, array(U32, "parameter type"))):
    statement: str
    sql: str
    param_types: tuple[int, ...] = ()


class Bind(
    Message,
    code=b"B",
    layout=(
        STRING,
        STRING,
        array(FORMAT, "parameter format"),
        array(nullable("invalid message format: parameter length {}"), "parameter"),
        array(FORMAT, "result format"),
    ),
):
    """Bind a statement's parameters into a portal. Formats: 0 text, 1 binary."""

    portal: str
    statement: str
    param_formats: tuple[int, ...] = ()
    params: tuple[bytes | None, ...] = ()
    result_formats: tuple[int, ...] = ()


class _Target(Message, layout=(TARGET_KIND, STRING)):
    """A message naming a prepared statement (kind 'S') or a portal (kind 'P')."""

    kind: str
    name: str


class Describe(_Target, code=b"D"):
    """Describe a prepared statement (kind 'S') or a portal (kind 'P')."""


class Execute(Message, code=b"E", layout=(STRING, ROW_LIMIT)):
    """Run a portal; ``max_rows`` 0 means all rows."""

    portal: str
    max_rows: int = 0


class Close(_Target, code=b"C"):
    """Close a prepared statement (kind 'S') or a portal (kind 'P')."""


class Sync(Message, code=b"S"): ...


class Flush(Message, code=b"H"): ...


class Terminate(Message, code=b"X"): ...


class CopyDone(Message, code=b"c"): ...


class PasswordMessage(Message, code=b"p", layout=(STRING,)):
    """A cleartext (or md5) password response."""

    password: str


class SASLInitialResponse(
    Message, code=b"p", layout=(STRING, nullable("invalid SASL initial response length {}"))
):
    """The client's first SASL message: the chosen mechanism and its initial data."""

    mechanism: str
    data: bytes | None


class SASLResponse(Opaque, code=b"p"): ...


class CopyData(Opaque, code=b"d"): ...


class CopyFail(Message, code=b"f", layout=(STRING,)):
    message: str


class FunctionCall(Opaque, code=b"F"):
    """The legacy fast-path function call; dpsql refuses it (the body is kept opaque)."""


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
_BY_CODE: dict[bytes, type[FrontendMessage]] = {c.code: c for c in get_args(FrontendMessage)}


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

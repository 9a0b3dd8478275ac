"""Messages the server sends, one class each, named as in the PostgreSQL protocol documentation.

Same shape as :mod:`dpsql.wire.messages.frontend`: ``encode()`` gives the whole message,
``decode(body)`` reads the body back. :class:`DataRow` is the hot path and encodes its values
(already-encoded ``bytes`` or None for NULL) with one join.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from dpsql.errors import ProtocolViolation
from dpsql.wire.messages._base import Empty, one_string
from dpsql.wire.messages._buffer import INT16, INT32, UINT32, Reader, cstr, frame

_NULL = INT32.pack(-1)


@dataclass(frozen=True, slots=True)
class AuthenticationOk:
    code: ClassVar[bytes] = b"R"
    subtype: ClassVar[int] = 0

    def encode(self) -> bytes:
        return frame(self.code, INT32.pack(self.subtype))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls()


@dataclass(frozen=True, slots=True)
class AuthenticationCleartextPassword(AuthenticationOk):
    subtype: ClassVar[int] = 3


@dataclass(frozen=True, slots=True)
class AuthenticationMD5Password:
    code: ClassVar[bytes] = b"R"
    subtype: ClassVar[int] = 5
    salt: bytes

    def encode(self) -> bytes:
        return frame(self.code, INT32.pack(self.subtype) + self.salt)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(bytes(body[4:8]))


@dataclass(frozen=True, slots=True)
class AuthenticationSASL:
    code: ClassVar[bytes] = b"R"
    subtype: ClassVar[int] = 10
    mechanisms: tuple[str, ...]

    def encode(self) -> bytes:
        body = INT32.pack(self.subtype) + b"".join(cstr(m) for m in self.mechanisms) + b"\x00"
        return frame(self.code, body)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body[4:])
        mechs = []
        while (m := r.cstring()) != "":
            mechs.append(m)
        return cls(tuple(mechs))


@dataclass(frozen=True, slots=True)
class AuthenticationSASLContinue:
    code: ClassVar[bytes] = b"R"
    subtype: ClassVar[int] = 11
    data: bytes

    def encode(self) -> bytes:
        return frame(self.code, INT32.pack(self.subtype) + self.data)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(bytes(body[4:]))


@dataclass(frozen=True, slots=True)
class AuthenticationSASLFinal(AuthenticationSASLContinue):
    subtype: ClassVar[int] = 12


_AUTH: dict[int, Any] = {
    c.subtype: c
    for c in (
        AuthenticationOk,
        AuthenticationCleartextPassword,
        AuthenticationMD5Password,
        AuthenticationSASL,
        AuthenticationSASLContinue,
        AuthenticationSASLFinal,
    )
}


@dataclass(frozen=True, slots=True)
class ParameterStatus:
    code: ClassVar[bytes] = b"S"
    name: str
    value: str

    def encode(self) -> bytes:
        return frame(self.code, cstr(self.name) + cstr(self.value))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        return cls(r.cstring(), r.cstring())


@dataclass(frozen=True, slots=True)
class BackendKeyData:
    code: ClassVar[bytes] = b"K"
    process_id: int
    secret_key: int

    def encode(self) -> bytes:
        return frame(self.code, INT32.pack(self.process_id) + INT32.pack(self.secret_key))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        return cls(r.int32(), r.int32())


@dataclass(frozen=True, slots=True)
class ReadyForQuery:
    """Transaction status: 'I' idle, 'T' in a transaction block, 'E' in a failed block."""

    code: ClassVar[bytes] = b"Z"
    status: str = "I"

    def encode(self) -> bytes:
        return frame(self.code, self.status.encode("ascii"))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(chr(Reader(body).byte()))


@dataclass(frozen=True, slots=True)
class FieldDescription:
    """One column of a RowDescription."""

    name: str
    type_oid: int
    typmod: int = -1
    type_size: int = -1
    format: int = 0
    table_oid: int = 0
    column_number: int = 0


@dataclass(frozen=True, slots=True)
class RowDescription:
    code: ClassVar[bytes] = b"T"
    fields: tuple[FieldDescription, ...]

    def encode(self) -> bytes:
        parts = [INT16.pack(len(self.fields))]
        for f in self.fields:
            parts.append(cstr(f.name))
            parts.append(UINT32.pack(f.table_oid) + INT16.pack(f.column_number))
            parts.append(UINT32.pack(f.type_oid) + INT16.pack(f.type_size))
            parts.append(INT32.pack(f.typmod) + INT16.pack(f.format))
        return frame(self.code, b"".join(parts))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        out = []
        for _ in range(r.count16("field")):
            name, table, col = r.cstring(), r.uint32(), r.int16()
            oid, size, mod, fmt = r.uint32(), r.int16(), r.int32(), r.int16()
            out.append(FieldDescription(name, oid, mod, size, fmt, table, col))
        r.end()
        return cls(tuple(out))


@dataclass(frozen=True, slots=True)
class DataRow:
    code: ClassVar[bytes] = b"D"
    values: tuple[bytes | None, ...]

    def encode(self) -> bytes:
        parts = [INT16.pack(len(self.values))]
        for v in self.values:
            parts.append(_NULL if v is None else INT32.pack(len(v)) + v)
        return frame(self.code, b"".join(parts))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        vals: list[bytes | None] = []
        for _ in range(r.count16("column")):
            n = r.int32()
            if n < -1:
                raise ProtocolViolation(f"invalid DataRow value length {n}")
            vals.append(None if n == -1 else r.raw(n))
        r.end()
        return cls(tuple(vals))


def raw_data_row(row: Sequence[bytes | None]) -> bytes:
    """The DataRow of values already in their wire format (PostgreSQL's bytes, passed through).

    >>> raw_data_row((b"1", None)) == DataRow((b"1", None)).encode()
    True
    """
    parts = [INT16.pack(len(row))]
    for v in row:
        if v is None:
            parts.append(_NULL)
        else:
            parts.append(INT32.pack(len(v)))
            parts.append(v)
    body = b"".join(parts)
    return b"D" + UINT32.pack(len(body) + 4) + body


def data_row(row: Sequence[Any], encoders: Sequence[Callable[[Any], bytes]]) -> bytes:
    """``DataRow(encode_row(row, encoders)).encode()`` without the intermediate objects (the hot
    path of large results).

    >>> data_row((1, None), (lambda v: str(v).encode(), str)) == DataRow((b"1", None)).encode()
    True
    """
    parts = [INT16.pack(len(row))]
    for v, enc in zip(row, encoders, strict=True):
        if v is None:
            parts.append(_NULL)
        else:
            b = enc(v)
            parts.append(INT32.pack(len(b)))
            parts.append(b)
    body = b"".join(parts)
    return b"D" + UINT32.pack(len(body) + 4) + body


@dataclass(frozen=True, slots=True)
class CommandComplete:
    code: ClassVar[bytes] = b"C"
    tag: str

    def encode(self) -> bytes:
        return frame(self.code, cstr(self.tag))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(one_string(body))


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """Fields by PostgreSQL field code: S severity, C SQLSTATE, M message, D detail, H hint, ..."""

    code: ClassVar[bytes] = b"E"
    fields: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = b"".join(k.encode("ascii") + cstr(v) for k, v in self.fields.items())
        return frame(self.code, body + b"\x00")

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        out: dict[str, str] = {}
        while (k := r.byte()) != 0:
            out[chr(k)] = r.cstring()
        r.end()
        return cls(out)


@dataclass(frozen=True, slots=True)
class NoticeResponse(ErrorResponse):
    code: ClassVar[bytes] = b"N"


@dataclass(frozen=True, slots=True)
class ParameterDescription:
    code: ClassVar[bytes] = b"t"
    type_oids: tuple[int, ...]

    def encode(self) -> bytes:
        body = INT16.pack(len(self.type_oids)) + b"".join(UINT32.pack(t) for t in self.type_oids)
        return frame(self.code, body)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        oids = tuple(r.uint32() for _ in range(r.count16("parameter")))
        r.end()
        return cls(oids)


@dataclass(frozen=True, slots=True)
class NegotiateProtocolVersion:
    """The newest minor version we support and the protocol options (_pq_.*) we don't."""

    code: ClassVar[bytes] = b"v"
    newest_minor: int
    unsupported: tuple[str, ...] = ()

    def encode(self) -> bytes:
        body = INT32.pack(self.newest_minor) + INT32.pack(len(self.unsupported))
        return frame(self.code, body + b"".join(cstr(o) for o in self.unsupported))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        minor, n = r.int32(), r.int32()
        opts = tuple(r.cstring() for _ in range(n))
        r.end()
        return cls(minor, opts)


@dataclass(frozen=True, slots=True)
class EmptyQueryResponse(Empty):
    code: ClassVar[bytes] = b"I"


@dataclass(frozen=True, slots=True)
class ParseComplete(Empty):
    code: ClassVar[bytes] = b"1"


@dataclass(frozen=True, slots=True)
class BindComplete(Empty):
    code: ClassVar[bytes] = b"2"


@dataclass(frozen=True, slots=True)
class CloseComplete(Empty):
    code: ClassVar[bytes] = b"3"


@dataclass(frozen=True, slots=True)
class NoData(Empty):
    code: ClassVar[bytes] = b"n"


@dataclass(frozen=True, slots=True)
class PortalSuspended(Empty):
    code: ClassVar[bytes] = b"s"


_BY_CODE: dict[bytes, Any] = {
    c.code: c
    for c in (
        ParameterStatus,
        BackendKeyData,
        ReadyForQuery,
        RowDescription,
        DataRow,
        CommandComplete,
        ErrorResponse,
        NoticeResponse,
        ParameterDescription,
        NegotiateProtocolVersion,
        EmptyQueryResponse,
        ParseComplete,
        BindComplete,
        CloseComplete,
        NoData,
        PortalSuspended,
    )
}


def decode_backend(code: bytes, body: bytes) -> object:
    """Decode a server message (used by tests and the benchmark's client side)."""
    if code == b"R":
        sub = Reader(body).int32()
        cls = _AUTH.get(sub)
        if cls is None:
            raise ProtocolViolation(f"unknown authentication request {sub}")
        return cls.decode(body)
    cls = _BY_CODE.get(code)
    if cls is None:
        raise ProtocolViolation(f"unknown backend message type {code!r}")
    return cls.decode(body)


SSL_ACCEPT = b"S"
SSL_REFUSE = b"N"

"""Messages the server sends, one class each, named as in the PostgreSQL protocol documentation.

Declared as in :mod:`dpsql.wire.messages.frontend` (a type byte and a layout each, see
:mod:`dpsql.wire.messages._base`). The rows of large results are the hot path: they are written by
:func:`raw_data_row` and :func:`data_row` without a :class:`DataRow` object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from dpsql.errors import ProtocolViolation
from dpsql.wire.messages._base import (
    CHAR,
    I32,
    NULL,
    REST,
    STRING,
    STRINGS,
    U32,
    Codec,
    KeyData,
    Message,
    array,
    nullable,
)
from dpsql.wire.messages._buffer import INT16, INT32, UINT32, Reader, cstr


class AuthenticationOk(Message, code=b"R", head=0): ...


class AuthenticationCleartextPassword(AuthenticationOk, head=3): ...


def _salt(r: Reader) -> bytes:
    return r.raw(4)


class AuthenticationMD5Password(Message, code=b"R", head=5, layout=(Codec(bytes, _salt),)):
    salt: bytes


class AuthenticationSASL(Message, code=b"R", head=10, layout=(STRINGS,)):
    mechanisms: tuple[str, ...]


class AuthenticationSASLContinue(Message, code=b"R", head=11, layout=(REST,)):
    data: bytes


class AuthenticationSASLFinal(AuthenticationSASLContinue, head=12): ...


class ParameterStatus(Message, code=b"S", layout=(STRING, STRING)):
    name: str
    value: str


class BackendKeyData(KeyData, code=b"K"): ...


class ReadyForQuery(Message, code=b"Z", layout=(CHAR,)):
    """Transaction status: 'I' idle, 'T' in a transaction block, 'E' in a failed block."""

    status: str = "I"


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


def _put_field(f: FieldDescription) -> bytes:
    return b"".join(
        [
            cstr(f.name),
            UINT32.pack(f.table_oid) + INT16.pack(f.column_number),
            UINT32.pack(f.type_oid) + INT16.pack(f.type_size),
            INT32.pack(f.typmod) + INT16.pack(f.format),
        ]
    )


def _get_field(r: Reader) -> FieldDescription:
    name, table, col = r.cstring(), r.uint32(), r.int16()
    oid, size, mod, fmt = r.uint32(), r.int16(), r.int32(), r.int16()
    return FieldDescription(name, oid, mod, size, fmt, table, col)


class RowDescription(Message, code=b"T", layout=(array(Codec(_put_field, _get_field), "field"),)):
    fields: tuple[FieldDescription, ...]


class DataRow(
    Message, code=b"D", layout=(array(nullable("invalid DataRow value length {}"), "column"),)
):
    """One row: each value already encoded, or None for NULL."""

    values: tuple[bytes | None, ...]


def raw_data_row(row: Sequence[bytes | None]) -> bytes:
    """The DataRow of values already in their wire format (PostgreSQL's bytes, passed through).

    >>> raw_data_row((b"1", None)) == DataRow((b"1", None)).encode()
    True
    """
    parts = [INT16.pack(len(row))]
    for v in row:
        if v is None:
            parts.append(NULL)
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
            parts.append(NULL)
        else:
            b = enc(v)
            parts.append(INT32.pack(len(b)))
            parts.append(b)
    body = b"".join(parts)
    return b"D" + UINT32.pack(len(body) + 4) + body


class CommandComplete(Message, code=b"C", layout=(STRING,)):
    tag: str


def _put_fields(v: dict[str, str]) -> bytes:
    return b"".join([k.encode("ascii") + cstr(s) for k, s in v.items()]) + b"\x00"


def _get_fields(r: Reader) -> dict[str, str]:
    out: dict[str, str] = {}
    while (k := r.byte()) != 0:
        out[chr(k)] = r.cstring()
    return out


class ErrorResponse(Message, code=b"E", layout=(Codec(_put_fields, _get_fields),)):
    """Fields by PostgreSQL field code: S severity, C SQLSTATE, M message, D detail, H hint, ..."""

    fields: dict[str, str] = field(default_factory=dict)


class NoticeResponse(ErrorResponse, code=b"N"): ...


class ParameterDescription(Message, code=b"t", layout=(array(U32, "parameter"),)):
    type_oids: tuple[int, ...]


def _put_options(v: tuple[str, ...]) -> bytes:
    return INT32.pack(len(v)) + b"".join([cstr(o) for o in v])


def _get_options(r: Reader) -> tuple[str, ...]:
    return tuple([r.cstring() for _ in range(r.int32())])


# layout: Int32 count, then Strings
class NegotiateProtocolVersion(Message, code=b"v", layout=(I32, Codec(_put_options, _get_options))):
    """The newest minor version we support and the protocol options (_pq_.*) we don't."""

    newest_minor: int
    unsupported: tuple[str, ...] = ()


class EmptyQueryResponse(Message, code=b"I"): ...


class ParseComplete(Message, code=b"1"): ...


class BindComplete(Message, code=b"2"): ...


class CloseComplete(Message, code=b"3"): ...


class NoData(Message, code=b"n"): ...


class PortalSuspended(Message, code=b"s"): ...


BackendMessage = (
    AuthenticationOk
    | AuthenticationCleartextPassword
    | AuthenticationMD5Password
    | AuthenticationSASL
    | AuthenticationSASLContinue
    | AuthenticationSASLFinal
    | ParameterStatus
    | BackendKeyData
    | ReadyForQuery
    | RowDescription
    | DataRow
    | CommandComplete
    | ErrorResponse
    | NoticeResponse
    | ParameterDescription
    | NegotiateProtocolVersion
    | EmptyQueryResponse
    | ParseComplete
    | BindComplete
    | CloseComplete
    | NoData
    | PortalSuspended
)

# Authentication requests share the type byte 'R' and differ by their subtype (``head``).
_AUTH: dict[int | None, type[BackendMessage]] = {
    c.head: c for c in get_args(BackendMessage) if c.code == b"R"
}
_BY_CODE: dict[bytes, type[BackendMessage]] = {
    c.code: c for c in get_args(BackendMessage) if c.code != b"R"
}


def decode_backend(code: bytes, body: bytes) -> BackendMessage:
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

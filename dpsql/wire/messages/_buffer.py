"""Reading and writing the protocol's primitive types (Int16, Int32, String, Byte_n).

A :class:`Reader` never reads past the body it was given: every shortfall, a missing string
terminator, invalid UTF-8 or unread trailing bytes raise :class:`ProtocolViolation` (08P01), so a
malformed message is an error for the session, never an exception that escapes it.
"""

from __future__ import annotations

import struct

from dpsql.errors import CharacterNotInRepertoire, ProtocolViolation

INT16 = struct.Struct("!h")
UINT16 = struct.Struct("!H")
INT32 = struct.Struct("!i")
UINT32 = struct.Struct("!I")


class Reader:
    """Sequential reader over one message body.

    >>> r = Reader(b"ab\\x00\\x00\\x07")
    >>> (r.cstring(), r.int16(), r.at_end())
    ('ab', 7, True)
    """

    __slots__ = ("_body", "_pos")

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._pos = 0

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self._pos + n > len(self._body):
            raise ProtocolViolation(
                f"invalid message format: {what} runs past the end of the message",
                hint="the client sent a truncated or malformed message",
            )

    def byte(self) -> int:
        self._need(1, "a byte")
        b = self._body[self._pos]
        self._pos += 1
        return b

    def _number(self, fmt: struct.Struct, what: str) -> int:
        self._need(fmt.size, what)
        (v,) = fmt.unpack_from(self._body, self._pos)
        self._pos += fmt.size
        return int(v)

    def int16(self) -> int:
        return self._number(INT16, "an Int16")

    def count16(self, what: str) -> int:
        """An Int16 element count, which may not be negative."""
        v = self.int16()
        if v < 0:
            raise ProtocolViolation(f"invalid message format: negative {what} count {v}")
        return v

    def int32(self) -> int:
        return self._number(INT32, "an Int32")

    def uint32(self) -> int:
        return self._number(UINT32, "an Int32")

    def raw(self, n: int) -> bytes:
        self._need(n, f"a {n}-byte value")
        v = self._body[self._pos : self._pos + n]
        self._pos += n
        return bytes(v)

    def rest(self) -> bytes:
        v = self._body[self._pos :]
        self._pos = len(self._body)
        return bytes(v)

    def cstring(self) -> str:
        end = self._body.find(b"\x00", self._pos)
        if end < 0:
            raise ProtocolViolation(
                "invalid message format: a string is missing its terminating zero byte"
            )
        raw = self._body[self._pos : end]
        self._pos = end + 1
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CharacterNotInRepertoire(
                f'invalid byte sequence for encoding "UTF8" at byte {e.start}',
                hint="dpsql speaks UTF8 only; set client_encoding to UTF8",
            ) from None

    def at_end(self) -> bool:
        return self._pos == len(self._body)

    def end(self) -> None:
        """Check the whole body was consumed (PostgreSQL's pq_getmsgend)."""
        if self._pos != len(self._body):
            raise ProtocolViolation(
                f"invalid message format: {len(self._body) - self._pos} unexpected trailing bytes"
            )


def cstr(s: str) -> bytes:
    """A protocol String: UTF-8 bytes with a terminating zero; refuses embedded zeros."""
    b = s.encode("utf-8")
    if b"\x00" in b:
        raise ValueError("a protocol string cannot contain a zero byte")
    return b + b"\x00"


def frame(code: bytes, body: bytes) -> bytes:
    """A typed message: Byte1(code) Int32(len(body) + 4) body."""
    return code + UINT32.pack(len(body) + 4) + body

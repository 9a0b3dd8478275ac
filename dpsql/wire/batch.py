"""The messages drivers send to run a prepared statement, decoded in one go.

libpq (psycopg, psql), node-postgres and JDBC send Bind / Describe portal / Execute / Sync for
every run of a prepared statement, asyncpg Bind / Execute / Sync, all in one packet. For the usual
shape (the unnamed portal, no row limit) the bytes after the Bind are always the same, so they are
recognised by one comparison, and the Bind is decoded with ``struct`` directly. Anything else, and
any malformed message, is left to the general decoders (:mod:`dpsql.wire.messages`), which report
it exactly as before.

>>> from dpsql.wire import messages as m
>>> b = m.Bind("", "s1", (0,), (b"N", None), (1,))
>>> m.Bind(*decode_bind(b.encode()[5:])) == b
True
>>> decode_bind(b"\\x00s1\\x00\\x00\\x01\\x00\\x07\\x00\\x00\\x00\\x00") is None   # format code 7
True
"""

from __future__ import annotations

import struct

from dpsql.wire.framing import FrameDecoder
from dpsql.wire.messages.frontend import Describe, Execute, Sync

# Describe portal "" / Execute portal "" with no row limit / Sync, as framed on the wire.
DESCRIBE_EXECUTE_SYNC = (
    b"D\x00\x00\x00\x06P\x00" + b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00" + b"S\x00\x00\x00\x04"
)
EXECUTE_SYNC = b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00" + b"S\x00\x00\x00\x04"
DESCRIBE = Describe("P", "")
EXECUTE = Execute("", 0)
SYNC = Sync()
_TAILS: tuple[tuple[bytes, tuple[Describe | Execute | Sync, ...]], ...] = (
    (DESCRIBE_EXECUTE_SYNC, (DESCRIBE, EXECUTE, SYNC)),
    (EXECUTE_SYNC, (EXECUTE, SYNC)),
)

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")


# One format code for all (text or binary), as its 4 bytes (count and code).
_ONE_FORMAT = {b"\x00\x01\x00\x00": (0,), b"\x00\x01\x00\x01": (1,)}


def _format_list(body: bytes, pos: int) -> tuple[tuple[int, ...], int] | None:
    """The format codes at ``pos`` and the position after them (None: malformed)."""
    if body[pos] == 0 and body[pos + 1] == 0:
        return (), pos + 2
    one = _ONE_FORMAT.get(body[pos : pos + 4])
    if one is not None:
        return one, pos + 4
    return _formats(body, pos)


def _formats(body: bytes, pos: int) -> tuple[tuple[int, ...], int] | None:
    (n,) = _I16.unpack_from(body, pos)
    pos += 2
    if n == 0:
        return (), pos
    if n == 1:  # one code for all: the usual case after none
        f = body[pos] << 8 | body[pos + 1]
        return ((f,), pos + 2) if f == 0 or f == 1 else None
    if n < 0:
        return None
    got = struct.unpack_from(f"!{n}h", body, pos)
    for f in got:
        if f != 0 and f != 1:
            return None
    return got, pos + 2 * n


BindParts = tuple[str, str, tuple[int, ...], tuple[bytes | None, ...], tuple[int, ...]]


def decode_bind(body: bytes) -> BindParts | None:
    """``Bind.decode(body)``'s fields (portal, statement, parameter formats, parameters, result
    formats) for a well-formed Bind; None for anything else (then ``Bind.decode`` says what is
    wrong)."""
    try:
        e1 = body.index(0)
        e2 = body.index(0, e1 + 1)
        portal, statement = body[:e1].decode(), body[e1 + 1 : e2].decode()
        got = _format_list(body, e2 + 1)
        if got is None:
            return None
        pformats, pos = got
        (count,) = _I16.unpack_from(body, pos)
        pos += 2
        if count < 0:
            return None
        params: list[bytes | None] = []
        size = len(body)
        for _ in range(count):
            (n,) = _I32.unpack_from(body, pos)
            pos += 4
            if n == -1:
                params.append(None)
            elif n < 0 or pos + n > size:
                return None
            else:
                params.append(body[pos : pos + n])
                pos += n
        got = _format_list(body, pos)
        if got is None or got[1] != size:
            return None
        return portal, statement, pformats, tuple(params), got[0]
    except (ValueError, IndexError, struct.error, UnicodeDecodeError):
        return None


def batch(
    bind: bytes, decoder: FrameDecoder
) -> tuple[BindParts, tuple[Describe | Execute | Sync, ...]] | None:
    """The fields of a Bind (its body ``bind``) of the unnamed portal and the [Describe,]
    Execute, Sync of it that ``decoder`` holds right behind it, consumed from ``decoder``; None,
    with nothing consumed, for any other shape (then each message is decoded on its own)."""
    parts = decode_bind(bind)
    if parts is None or parts[0]:
        return None
    for wire, tail in _TAILS:
        if decoder.take(wire):
            return parts, tail
    return None

"""Splitting a byte stream into protocol messages, with a maximum size, without doing I/O.

Two framings exist: during startup a packet is ``Int32 length`` + body (the body starts with a request
code); afterwards a message is ``Byte1 type`` + ``Int32 length`` + body. The length counts itself, so
it is at least 4. A length above the limit is refused as soon as the length word arrives, before any
of the body is buffered, so a client cannot make the server hold more than one maximum-size message.

A framing error cannot be recovered from (the stream has lost sync): the session answers FATAL and
closes. A well-framed message whose body is malformed is a per-statement error instead.

>>> d = FrameDecoder(max_message_size=1024)
>>> d.feed(b"\\x00\\x00\\x00\\x08\\x04\\xd2\\x16\\x2f")   # SSLRequest
>>> d.next()
Frame(code=None, body=b'\\x04\\xd2\\x16/')
>>> d.startup = False
>>> d.feed(b"Q\\x00\\x00\\x00\\x05")
>>> d.next() is None        # body not here yet
True
>>> d.feed(b"\\x00")
>>> d.next()
Frame(code=b'Q', body=b'\\x00')
"""

from __future__ import annotations

from typing import NamedTuple

from dpsql.errors import ProtocolViolation
from dpsql.wire.messages._buffer import UINT32

DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
# PostgreSQL's MAX_STARTUP_PACKET_LENGTH.
MAX_STARTUP_PACKET = 10_000


class Frame(NamedTuple):
    """One message: ``code`` is the type byte (None for startup packets), ``body`` the payload."""

    code: bytes | None
    body: bytes


_new_frame = tuple.__new__
_CODES = tuple(bytes([i]) for i in range(256))  # type bytes without a slice and copy each


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes, take complete frames with ``next``.

    Args:
        max_message_size: the largest length word accepted (body + 4) after startup.
    """

    __slots__ = ("_buf", "_peeked", "_pos", "max_message_size", "startup")

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._peeked: tuple[int, Frame, int] | None = None  # (from, frame, to) of the last peek
        self.max_message_size = max_message_size
        self.startup = True

    def feed(self, data: bytes) -> None:
        pos = self._pos
        if pos:
            if pos == len(self._buf):  # all consumed (the usual case): nothing to move
                self._buf.clear()
            else:
                del self._buf[:pos]
            self._pos = 0
            peeked = self._peeked
            if peeked is not None:  # still valid, shifted with the bytes
                self._peeked = (peeked[0] - pos, peeked[1], peeked[2] - pos)
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def peek(self) -> Frame | None:
        """The next complete frame without consuming it (None if not all here, or invalid)."""
        pos = self._pos
        try:
            frame = self.next()
        except ProtocolViolation:
            return None
        if frame is not None:
            self._peeked = (pos, frame, self._pos)  # next() returns this same object
        self._pos = pos
        return frame

    def peek_frames(self, n: int) -> tuple[list[Frame], int] | None:
        """The next ``n`` complete frames without consuming them, and the position after them
        (for :meth:`consume_to`); None unless all ``n`` are here and well framed."""
        pos, frames = self._pos, []
        try:
            for _ in range(n):
                frame = self.next()
                if frame is None:
                    return None
                frames.append(frame)
            return frames, self._pos
        except ProtocolViolation:
            return None
        finally:
            self._pos = pos

    def take(self, expected: bytes) -> bool:
        """Consume ``expected`` when the buffered bytes continue with exactly it."""
        pos = self._pos
        end = pos + len(expected)
        if self._buf[pos:end] != expected:
            return False
        self._pos = end
        self._peeked = None
        return True

    def consume_to(self, pos: int) -> None:
        """Consume the frames :meth:`peek_frames` returned (``pos``: the position it gave)."""
        self._pos = pos
        self._peeked = None

    def next(self) -> Frame | None:
        """The next complete frame, or None until more bytes arrive.

        Raises:
            ProtocolViolation: an invalid or oversized length word (the stream is lost).
        """
        peeked = self._peeked
        if peeked is not None:
            self._peeked = None
            if peeked[0] == self._pos:
                self._pos = peeked[2]
                return peeked[1]
        buf, pos = self._buf, self._pos
        if not self.startup:  # after startup: every message but the first
            if len(buf) - pos < 5:
                return None
            (length,) = UINT32.unpack_from(buf, pos + 1)
            if 4 <= length <= self.max_message_size:
                end = pos + 1 + length
                if len(buf) < end:
                    return None
                self._pos = end
                return _new_frame(Frame, (_CODES[buf[pos]], bytes(memoryview(buf)[pos + 5 : end])))
        head = 4 if self.startup else 5
        if len(buf) - pos < head:
            return None
        (length,) = UINT32.unpack_from(buf, pos + head - 4)
        limit = MAX_STARTUP_PACKET if self.startup else self.max_message_size
        if self.startup and length < 8:
            raise ProtocolViolation(f"invalid length of startup packet: {length}")
        if length < 4 or length > limit:
            raise ProtocolViolation(
                f"invalid message length {length} (the limit is {limit} bytes)",
                hint="send smaller statements or raise the server's max_message_size",
            )
        total = head - 4 + length
        if len(buf) - pos < total:
            return None
        code = None if self.startup else _CODES[buf[pos]]
        body = bytes(memoryview(buf)[pos + head : pos + total])  # one copy, not two
        self._pos = pos + total
        return _new_frame(Frame, (code, body))  # Frame(code, body) without its __new__

"""One client connection as frames in and bytes out, over asyncio streams (the only I/O layer)."""

from __future__ import annotations

import asyncio
import ssl

from dpsql.errors import ProtocolViolation
from dpsql.wire.framing import Frame, FrameDecoder

_READ_SIZE = 64 * 1024
_FLUSH_AT = 256 * 1024


class ConnectionClosed(Exception):
    """The client went away (EOF or a reset)."""


class Channel:
    """Reads whole frames, buffers outgoing messages until :meth:`flush`.

    Args:
        reader: the stream's reader.
        writer: the stream's writer.
        max_message_size: the largest message accepted after startup.
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_message_size: int
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(max_message_size)
        self._out: list[bytes] = []
        self._out_size = 0
        self.tls = False
        self.eof = False
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "local")

    async def recv(self, timeout: float | None = None) -> Frame:
        """The next frame.

        Raises:
            ConnectionClosed: EOF or reset before a whole frame arrived.
            ProtocolViolation: an invalid or oversized length word.
            TimeoutError: nothing complete within ``timeout`` seconds.
        """
        while True:
            frame = self.decoder.next()
            if frame is not None:
                return frame
            if self.eof:
                raise ConnectionClosed("EOF")
            try:
                if timeout is None:
                    data = await self.reader.read(_READ_SIZE)
                else:
                    data = await asyncio.wait_for(self.reader.read(_READ_SIZE), timeout)
            except (ConnectionError, ssl.SSLError) as e:
                raise ConnectionClosed(str(e)) from None
            if not data:
                raise ConnectionClosed("EOF")
            self.decoder.feed(data)

    async def watch_eof(self) -> None:
        """Read ahead (buffering pipelined messages) until the client goes away.

        Run during a long statement so that a vanished client is noticed and its query cancelled.
        Stops reading, leaving TCP back-pressure, once a couple of maximum messages are buffered.
        """
        limit = 2 * self.decoder.max_message_size
        while self.decoder.buffered < limit:
            try:
                data = await self.reader.read(_READ_SIZE)
            except (ConnectionError, ssl.SSLError):
                data = b""
            if not data:
                self.eof = True
                return
            self.decoder.feed(data)
        await asyncio.Event().wait()

    def has_pending_input(self) -> bool:
        return self.decoder.buffered > 0

    def send(self, data: bytes) -> None:
        self._out.append(data)
        self._out_size += len(data)

    def send_raw(self, data: bytes) -> None:
        """Write immediately, unbuffered (single-byte SSL answers)."""
        self.writer.write(data)

    @property
    def should_flush(self) -> bool:
        return self._out_size >= _FLUSH_AT

    async def flush(self) -> None:
        """Write what is buffered; wait while the client reads too slowly (back-pressure)."""
        if self._out:
            out = self._out
            self.writer.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
            self._out_size = 0
        transport = self.writer.transport
        if transport.get_write_buffer_size() == 0 and not transport.is_closing():
            return  # all written: nothing to wait for
        try:
            await self.writer.drain()
        except (ConnectionError, ssl.SSLError) as e:
            raise ConnectionClosed(str(e)) from None

    async def start_tls(self, context: ssl.SSLContext) -> None:
        """Upgrade to TLS after answering 'S' to an SSLRequest."""
        if self.decoder.buffered:
            # Bytes sent before the handshake would be read as if they came over TLS (CVE-2021-23214).
            raise ProtocolViolation("received unencrypted data after SSL request")
        await self.writer.drain()
        await self.writer.start_tls(context)
        self.tls = True

    async def close(self) -> None:
        try:
            if self._out:
                await self.flush()
        except ConnectionClosed:
            pass
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 2)
        except (ConnectionError, ssl.SSLError, TimeoutError, OSError):
            pass

"""One client connection as frames in and bytes out: an asyncio protocol (the only I/O layer).

The transport hands received bytes straight to the frame decoder (no stream reader between, no
copy out of one), and buffered replies go to the transport in one write per flush. Both
directions have back-pressure: reading pauses once two maximum-size messages are buffered (and
resumes as soon as the session wants a frame that is not all here; EOF is still seen, and
told to the session, while it runs a statement), and :meth:`Channel.flush`
waits while the transport's write buffer is above its high-water mark (a slow client only slows
its own session).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

from dpsql.errors import ProtocolViolation
from dpsql.wire.framing import Frame, FrameDecoder

_FLUSH_AT = 256 * 1024


class ConnectionClosed(Exception):
    """The client went away (EOF or a reset)."""


class Channel(asyncio.Protocol):
    """Reads whole frames, buffers outgoing messages until :meth:`flush`.

    Args:
        max_message_size: the largest message accepted after startup.
        on_connect: called with the channel once its transport is there (the server starts the
            session's task).
    """

    def __init__(
        self, max_message_size: int, on_connect: Callable[[Channel], None] | None = None
    ) -> None:
        self.decoder = FrameDecoder(max_message_size)
        self._on_connect = on_connect
        self._read_limit = 2 * max_message_size
        self.transport: Any = None
        self._out: list[bytes] = []
        self._out_size = 0
        self._waiter: asyncio.Future[None] | None = None  # recv waiting for bytes
        self._drain: asyncio.Future[None] | None = None  # flush waiting for the client to read
        self._closed: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._lost: str | None = None  # why the connection is lost (None: it is not)
        self.tls = False
        self.eof = False
        self.on_eof: Callable[[], None] | None = None  # told once when the client goes away
        self.peer = "local"

    # ---- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._closed = asyncio.get_running_loop().create_future()
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "local")
        if self._on_connect is not None:
            self._on_connect(self)

    def data_received(self, data: bytes) -> None:
        decoder = self.decoder
        decoder.feed(data)
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)
        if decoder.buffered >= self._read_limit and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._ended()
        return not self.tls  # keep the socket open for the last answer (asyncio streams do)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = str(exc) if exc is not None else "connection closed"
        self._ended()
        d, self._drain = self._drain, None
        if d is not None and not d.done():
            d.set_exception(ConnectionClosed(self._lost))
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        d, self._drain = self._drain, None
        if d is not None and not d.done():
            d.set_result(None)

    def _ended(self) -> None:
        first = not self.eof
        self.eof = True
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.set_result(None)
        if first and self.on_eof is not None:
            self.on_eof()

    # ---- the session's side ------------------------------------------------------------------
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
                if self._reading_paused and self.decoder.buffered < self._read_limit:
                    self._resume_reading()
                return frame
            if self.eof:
                raise ConnectionClosed(self._lost or "EOF")
            if self._reading_paused:
                self._resume_reading()  # a frame is only partly here: it needs its bytes
            fut = self._waiter = asyncio.get_running_loop().create_future()
            if timeout is None:
                await fut
            else:
                await asyncio.wait_for(fut, timeout)

    def _resume_reading(self) -> None:
        self._reading_paused = False
        if self._lost is None:
            self.transport.resume_reading()

    def has_pending_input(self) -> bool:
        return self.decoder.buffered > 0

    def send(self, data: bytes) -> None:
        self._out.append(data)
        self._out_size += len(data)

    def send_raw(self, data: bytes) -> None:
        """Write immediately, unbuffered (single-byte SSL answers)."""
        if self._lost is None:
            self.transport.write(data)

    @property
    def should_flush(self) -> bool:
        return self._out_size >= _FLUSH_AT

    async def flush(self) -> None:
        """Write what is buffered; wait while the client reads too slowly (back-pressure)."""
        if self._lost is not None:
            self._out.clear()
            self._out_size = 0
            raise ConnectionClosed(self._lost)
        out = self._out
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
            self._out_size = 0
        if not self._writing_paused:
            return  # below the high-water mark: nothing to wait for
        fut = self._drain = asyncio.get_running_loop().create_future()
        await fut

    async def start_tls(self, context: ssl.SSLContext) -> None:
        """Upgrade to TLS after answering 'S' to an SSLRequest."""
        if self.decoder.buffered:
            # Bytes sent before the handshake would be read as if they came over TLS (CVE-2021-23214).
            raise ProtocolViolation("received unencrypted data after SSL request")
        loop = asyncio.get_running_loop()
        try:
            self.transport = await loop.start_tls(self.transport, self, context, server_side=True)
        except (ConnectionError, ssl.SSLError, OSError) as e:
            raise ConnectionClosed(str(e)) from None
        self.tls = True

    async def close(self) -> None:
        try:
            if self._out:
                await self.flush()
        except ConnectionClosed:
            pass
        if self.transport is None:
            return
        self.transport.close()
        if self._closed is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._closed), 2)
            except (TimeoutError, ConnectionError, ssl.SSLError, OSError):
                pass

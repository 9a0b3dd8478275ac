"""A do-nothing PostgreSQL proxy: bytes client <-> upstream, no parsing (a benchmark reference).

Every proxy adds two socket hops (client -> proxy, proxy -> PostgreSQL) whose CPU time comes out
of the same cores as PostgreSQL's and the clients'. This relay does only that, with uvloop
protocols (no streams, no copies beyond the kernel's), so its throughput is the floor of any
Python proxy on the machine: ``bench/proxy_latency.py`` measures dpsql against it in the same run.

Usage: ``python bench/null_relay.py LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT`` (listens on
127.0.0.1; prints ``ready`` once listening; SIGTERM stops it).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import cast

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dpsql dependency off Windows
    uvloop = None  # type: ignore[assignment]


class _Upstream(asyncio.Protocol):
    """PostgreSQL's side: whatever arrives goes to the client."""

    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    """The client's side: connects upstream, buffers until connected, then relays."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.address = upstream
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self.transport = client
        self.task = asyncio.get_running_loop().create_task(self._connect(client))

    async def _connect(self, client: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(lambda: _Upstream(client), *self.address)
        except OSError:
            client.close()
            return
        if client.is_closing():
            upstream.close()
            return
        self.upstream = upstream
        for data in self.pending:
            upstream.write(data)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.pending.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


async def serve(port: int, upstream: tuple[str, int]) -> None:
    """Relay connections to 127.0.0.1:``port`` to ``upstream`` until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    server = await loop.create_server(lambda: _Client(upstream), "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await stop


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit(__doc__)
    coro = serve(int(argv[0]), (argv[1], int(argv[2])))
    if uvloop is not None:
        uvloop.run(coro)
    else:
        asyncio.run(coro)


if __name__ == "__main__":
    main(sys.argv[1:])

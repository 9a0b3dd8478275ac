"""Running the wire server: in the foreground with signal handling (``dpsql serve``, ``dpsql demo
--serve``), or in a background thread (tests, benchmarks, notebooks); with its ``/metrics``
endpoint when the configuration asks for one."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from types import TracebackType

from dpsql.errors import InvalidParameter
from dpsql.policy.model import Policy
from dpsql.policy.settings import parse_listen
from dpsql.server.observe import start_metrics
from dpsql.wire.engine_api import EngineAPI
from dpsql.wire.server import Server, ServerConfig

log = logging.getLogger("dpsql.serve")


def ensure_port_free(host: str, port: int) -> None:
    """Refuse at once, in words, a listen address another process holds (``dpsql serve`` before
    its start-up checks, ``dpsql demo --serve`` before it starts PostgreSQL and runs its
    examples), instead of a traceback when the server binds. Port 0 (any free port) passes."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise InvalidParameter(f"can't listen on {host}:{port}: {e.strerror}") from None
            raise InvalidParameter(
                f"{host}:{port} is already in use by another process",
                hint=f"stop that process, or give --listen {host}:PORT with another port "
                f"(--listen {host}:0 takes any free port; --port-file FILE writes it down)",
            ) from None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The server's event loop: uvloop's when installed (a dependency on Linux and macOS: 1.2-1.6x
    the statements per second of asyncio's on the public fast path at 8 clients in
    bench/proxy_latency.py), unless ``DPSQL_UVLOOP=0``; else asyncio's own."""
    if os.environ.get("DPSQL_UVLOOP", "1") != "0":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def write_port_file(path: str, port: int) -> None:
    """Write ``port`` (and a newline) to ``path`` atomically: a reader sees the whole number or no
    file (``dpsql serve --port-file``, for scripts and tests that listen on port 0)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


async def start(server: Server) -> int | None:
    """Start ``server`` (it accepts connections on return), then its ``/metrics`` endpoint when
    ``config.metrics_listen`` is set; returns the metrics port (None: no endpoint)."""
    await server.start()
    if server.config.metrics_listen is None:
        return None
    return start_metrics(server, server.config.metrics_listen)


async def _serve(
    server: Server,
    port_file: str | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await start(server)
    if on_ready is not None:
        on_ready(server.port)
    if port_file:  # last: a script that waits for the file finds on_ready's output written
        write_port_file(port_file, server.port)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await server.shutdown()


def serve(
    server: Server,
    port_file: str | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Run ``server`` until SIGTERM or SIGINT, then shut it down gracefully; once it accepts
    connections, ``on_ready`` is called with the bound port (the kernel's pick when listening on
    port 0) and ``port_file`` written with it."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(_serve(server, port_file, on_ready))


def serve_engine(
    engine: EngineAPI,
    policy: Policy,
    listen: str,
    port_file: str | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> int:
    """Serve ``engine`` on ``listen`` (host:port) until SIGTERM/SIGINT (used by ``dpsql demo
    --serve``), its upstream database under its own name."""
    host, port = parse_listen(listen)
    config = ServerConfig(host=host, port=port, database="")
    serve(Server(engine, policy, config), port_file, on_ready)
    return 0


class ServerThread:
    """A server on its own event loop in a daemon thread; ``port`` is the bound port,
    ``metrics_port`` that of its ``/metrics`` endpoint (None: none configured).

    >>> # with ServerThread(engine, policy, ServerConfig(port=0)) as srv: connect to srv.port
    """

    def __init__(self, engine: EngineAPI, policy: Policy, config: ServerConfig) -> None:
        self.server = Server(engine, policy, config)
        self.loop = new_event_loop()
        self.metrics_port: int | None = None
        self._thread = threading.Thread(
            target=self.loop.run_forever, daemon=True, name="dpsql-wire"
        )

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> ServerThread:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(start(self.server), self.loop)
        self.metrics_port = started.result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

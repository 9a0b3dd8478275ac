"""The asyncio server: accepts connections, runs startup and authentication, enforces session
limits, routes CancelRequests, and shuts down gracefully.

Shutdown (SIGTERM/SIGINT through :func:`dpsql.server.run.serve`): stop listening, let running queries
finish for ``shutdown_grace_s`` seconds, cancel the rest, then end every session with FATAL 57P01.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
import secrets
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dpsql.errors import (
    AdminShutdown,
    CannotConnectNow,
    DpsqlError,
    InternalError,
    TooManyConnections,
)
from dpsql.policy.model import Policy
from dpsql.session import Activity, SessionContext
from dpsql.wire import messages as m
from dpsql.wire.auth import AuthConfig, Authenticator, LoginLimiter
from dpsql.wire.conn import Channel, ConnectionClosed
from dpsql.wire.engine_api import EngineAPI, UpstreamEngine
from dpsql.wire.framing import DEFAULT_MAX_MESSAGE_SIZE
from dpsql.wire.limits import SessionLimits
from dpsql.wire.relay import SIGNAL as relay_signal
from dpsql.wire.relay import CancelRelay
from dpsql.wire.session import Session
from dpsql.wire.startup import Startup, negotiate
from dpsql.wire.startup_options import parse_options
from dpsql.wire.state import SessionState
from dpsql.wire.upstream import AsyncUpstream
from dpsql.wire.upstream_identity import (
    FALLBACK_VERSION,
    UpstreamIdentity,
    check_database,
    read_identity,
)

log = logging.getLogger("dpsql.wire.server")

# Startup parameters taken over as session settings (others are ignored, as a pooler would).
_STARTUP_SETTINGS = ("application_name", "TimeZone", "timezone", "extra_float_digits",
                     "search_path", "DateStyle", "datestyle")  # fmt: skip


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``dpsql serve`` can be told (from flags, the policy's config or environment)."""

    host: str = "127.0.0.1"
    port: int = 6543
    tls_cert: str | None = None
    tls_key: str | None = None
    require_tls: bool = False
    auth: AuthConfig = field(default_factory=AuthConfig)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_sessions: int = 200
    max_sessions_per_analyst: int = 20
    shutdown_grace_s: float = 10.0
    worker_threads: int = 32
    reuse_port: bool = False  # SO_REUSEPORT: several worker processes listen on one port
    fast_path: bool = True  # public/catalog statements on the event loop (dpsql.wire.upstream)
    server_version: str | None = None  # None: the upstream's (dpsql.wire.upstream_identity)
    # The database clients must name (others: 3D000); "" the upstream's own name; None any name
    # (in-process servers of tests and embedders). `dpsql serve` serves the upstream's.
    database: str | None = None
    metrics_listen: str | None = None  # host:port of /metrics (dpsql.server.observe); None: off


def tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    if not (config.tls_cert and config.tls_key):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(config.tls_cert, config.tls_key)
    return ctx


class Server:
    """A dpsql wire server around one engine.

    Args:
        engine: the (synchronous) engine every statement goes through.
        policy: analysts and their verifiers.
        config: listening address, TLS, limits.
    """

    def __init__(
        self,
        engine: EngineAPI,
        policy: Policy,
        config: ServerConfig,
        limits: SessionLimits | None = None,
        relay: CancelRelay | None = None,
        logins: LoginLimiter | None = None,
    ) -> None:
        self.engine = engine
        self.policy = policy
        self.config = config
        self.tls = tls_context(config)
        if config.require_tls and self.tls is None:
            raise ValueError("require_tls needs tls_cert and tls_key")
        pem = None
        if self.tls is not None and config.tls_cert:
            with open(config.tls_cert, encoding="ascii") as f:
                pem = f.read()
        self.auth = Authenticator(policy, config.auth, pem, logins)  # logins: shared by workers
        self.executor = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="dpsql-q")
        self.sessions: dict[int, Session] = {}
        self.limits = limits or SessionLimits(policy.analysts)
        self.relay = relay
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._stopping = False
        self._logins = 0  # connections authenticating now (this process)
        self.upstream: AsyncUpstream | None = None
        self.identity = UpstreamIdentity(None, *FALLBACK_VERSION)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.identity = await loop.run_in_executor(self.executor, read_identity, self.engine)
        self.upstream = _async_upstream(self.engine) if self.config.fast_path else None
        if self.upstream is not None:
            await self.upstream.open()
        if self.relay is not None:
            asyncio.get_running_loop().add_signal_handler(relay_signal, self._relayed)
            self.relay.ready()
        size = self.config.max_message_size
        self._server = await asyncio.get_running_loop().create_server(
            lambda: Channel(size, self._connected),
            self.config.host,
            self.config.port,
            reuse_port=self.config.reuse_port,
        )
        log.info("listening on %s:%d (worker %d)", self.config.host, self.port, self.limits.worker)

    def _connected(self, ch: Channel) -> None:
        task = asyncio.get_running_loop().create_task(self._handle(ch))
        self._tasks.add(task)

    async def _handle(self, ch: Channel) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.limits.connect()
        session: Session | None = None
        try:
            if self._stopping:
                raise CannotConnectNow("the server is shutting down")
            got = await negotiate(ch, self.tls, self.config.require_tls)
            if isinstance(got, m.CancelRequest):
                self._cancel(got)
                return
            session = await self._open(ch, got)
            session.task = task
            await session.serve()
        except (ConnectionClosed, TimeoutError):
            pass
        except asyncio.CancelledError:
            # shutdown, or pg_terminate_backend from another of the analyst's sessions
            await _fatal(ch, AdminShutdown("terminating connection due to administrator command"))  # fmt: skip
        except DpsqlError as e:
            await _fatal(ch, e)
        except Exception:
            log.exception("session crashed peer=%s", ch.peer)
            await _fatal(ch, InternalError("internal error in dpsql"))
        finally:
            self.limits.disconnect()
            if session is not None:
                self.sessions.pop(session.process_id, None)
                if self.relay is not None:
                    self.relay.unregister(session.process_id)
                self.limits.remove_session(session.ctx.analyst)
                session.cancel()
                self._track(session.retry_task)
            await ch.close()
            self._tasks.discard(task)

    async def _open(self, ch: Channel, startup: Startup) -> Session:
        # sessions count once authenticated (admit); logins in progress up to as many again
        if self._logins >= self.config.max_sessions:
            raise _too_many()
        self._logins += 1
        try:
            analyst = await self.auth.authenticate(ch, startup.user)
        finally:
            self._logins -= 1
        served = self.config.database
        check_database(startup.database, self.identity.database if served == "" else served)
        full = self.limits.admit(analyst, self.config.max_sessions_per_analyst,
                                 self.config.max_sessions)  # fmt: skip
        if full is not None:
            raise _too_many(None if full == "total" else analyst)
        try:
            session = self._session(ch, startup, analyst)
        except BaseException:
            self.limits.remove_session(analyst)
            raise
        try:
            await session.check_startup_zone()
        except BaseException:
            self.sessions.pop(session.process_id, None)
            self.limits.remove_session(analyst)
            raise
        return session

    def _session(self, ch: Channel, startup: Startup, analyst: str) -> Session:
        pid = self._new_pid()
        ctx = SessionContext(analyst=analyst, database=startup.database, backend_pid=pid)
        ctx.directory = self
        params = {k: v for k, v in startup.parameters.items() if k in _STARTUP_SETTINGS}
        params["server_version"] = self.config.server_version or self.identity.server_version
        if not self.config.server_version:
            params["server_version_num"] = self.identity.server_version_num
        check = self.engine.check_epsilon if isinstance(self.engine, UpstreamEngine) else None
        state = SessionState(ctx, params, check, self.policy)
        state.apply_startup(self._initial_settings(analyst, startup))
        secret = secrets.randbits(32) - 2**31
        session = Session(ch, self.engine, self.executor, ctx, state, pid, secret, self.upstream)
        self.sessions[pid] = session
        if self.relay is not None:  # listed for the other workers (pg_stat_activity)
            self.relay.register(pid, analyst, int(time.time() * 1000))
        session.closing = self._stopping
        log.info("session opened analyst=%s pid=%d peer=%s tls=%s worker=%d", analyst, pid,
                 ch.peer, ch.tls, self.limits.worker)  # fmt: skip
        return session

    def _initial_settings(self, analyst: str, startup: Startup) -> tuple[tuple[str, str], ...]:
        """The analyst's settings from the policy, then the client's ``options`` (PGOPTIONS),
        then ``dpsql.*`` settings sent as startup parameters of their own (asyncpg's
        ``server_settings``), which PostgreSQL also applies after ``options``: each applied or
        the connection refused, never ignored."""
        own = self.policy.analysts.get(analyst)
        from_policy = tuple(own.settings.items()) if own is not None else ()
        own_params = tuple(
            (k, v) for k, v in startup.parameters.items() if k.lower().startswith("dpsql.")
        )
        return from_policy + parse_options(startup.parameters.get("options", "")) + own_params

    def _new_pid(self) -> int:
        while True:
            pid = secrets.randbits(31) or 1
            if self.relay is not None:
                pid = self.relay.new_process_id(pid)
            if pid not in self.sessions:
                return pid

    def _cancel(self, req: m.CancelRequest) -> None:
        s = self.sessions.get(req.process_id)
        ok = s is not None and hmac.compare_digest(
            s.secret_key.to_bytes(4, "big", signed=True),
            req.secret_key.to_bytes(4, "big", signed=True),
        )
        if ok and s is not None:
            log.info("cancel request pid=%d", req.process_id)
            s.cancel(by_client=True)
        elif (
            s is None
            and self.relay is not None
            and self.relay.owner(req.process_id) != (self.relay.worker)
        ):
            if not self.relay.forward(req.process_id, req.secret_key):
                log.warning("cancel request for pid=%d could not be relayed", req.process_id)
        else:
            log.warning("cancel request with a wrong key for pid=%d", req.process_id)

    # ---- SessionDirectory (dpsql.session): an analyst's own sessions, for pg_stat_activity
    # and pg_cancel_backend / pg_terminate_backend. Called from the engine's threads.
    def activity(self, analyst: str) -> tuple[Activity, ...]:
        """The analyst's sessions on this server; with ``--workers``, those of the other
        worker processes too (their state and application_name unknown here: NULL)."""
        own = tuple(
            Activity(
                s.process_id,
                s.ctx.database,
                s.state.settings.get("application_name", ""),
                "active" if s.busy else "idle",
                s.started,
            )
            for s in list(self.sessions.values())
            if s.ctx.analyst == analyst
        )
        if self.relay is None:
            return own
        others = tuple(
            Activity(pid, "", None, None, datetime.fromtimestamp(ms / 1000, UTC).isoformat())
            for pid, ms in self.relay.sessions_of(analyst)
        )
        return own + others

    def signal(self, analyst: str, pid: int, terminate: bool) -> bool:
        """Cancel the running statement of the analyst's session ``pid`` (as its CancelRequest
        would) and, ``terminate``, end the session (FATAL 57P01, as pg_terminate_backend)."""
        s = self.sessions.get(pid)
        loop = self._loop
        if s is None and self.relay is not None and self.relay.owner(pid) != self.relay.worker:
            return self.relay.forward_signal(pid, analyst, terminate)  # another worker's
        if s is None or s.ctx.analyst != analyst or loop is None:
            return False
        loop.call_soon_threadsafe(self._signal, s, terminate)
        return True

    def _signal(self, s: Session, terminate: bool) -> None:
        log.info("%s pid=%d by the analyst's own session",
                 "terminate" if terminate else "cancel", s.process_id)  # fmt: skip
        s.cancel(by_client=True)
        if terminate and s.task is not None:
            s.task.cancel()

    def _relayed(self) -> None:
        """Cancel requests other workers received for this worker's sessions (SIGUSR1)."""
        assert self.relay is not None
        for pid, key in self.relay.take():
            self._cancel(m.CancelRequest(pid, key))
        for pid, analyst_key, terminate in self.relay.take_signals():
            s = self.sessions.get(pid)  # signalled from the analyst's session on another worker
            if s is not None and self.relay.analyst_key(s.ctx.analyst) == analyst_key:
                self._signal(s, terminate)

    def _track(self, task: asyncio.Task[None] | None) -> None:
        """Keep a session's cancel-retry task until it ends, so shutdown can cancel it."""
        if task is not None and not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        """Stop accepting, let running queries finish (then cancel them), close every session."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for s in self.sessions.values():
            s.closing = True  # statements sent from now on are refused (57P01), not run
        busy = [s for s in self.sessions.values() if s.busy]
        if busy:
            waits = [asyncio.create_task(s.idle.wait()) for s in busy]
            _, pending = await asyncio.wait(waits, timeout=self.config.shutdown_grace_s)
            for s in busy:
                if s.busy:
                    s.cancel()
                    s.abandon_delivery()
            if pending:
                await asyncio.wait(pending, timeout=5)
            for t in pending:
                t.cancel()
        for s in list(self.sessions.values()):
            self._track(s.retry_task)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        late = [t for t in self._tasks if not t.done()]  # cancel retries of sessions closed above
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=5)
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.upstream is not None:
            await self.upstream.close()
        log.info("server stopped")


def freeze_startup_heap() -> None:
    """Move everything made so far (modules, the policy, the engine: objects the server keeps for
    its whole life) out of the cyclic garbage collector's generations (``gc.freeze``), after
    collecting what is already garbage. Collections while serving then look at the objects
    statements make, not at the whole startup heap again: about 3% fewer instructions per public
    prepared statement (callgrind, 270k vs 279k). For ``dpsql serve`` processes, not for servers
    started inside another program (tests, notebooks), whose heap is not theirs to freeze."""
    gc.collect()
    gc.freeze()


def _async_upstream(engine: EngineAPI) -> AsyncUpstream | None:
    """The fast path's pool, configured as the engine's backend (None for engines without one)."""
    if not isinstance(engine, UpstreamEngine):
        return None
    backend = engine.backend
    return AsyncUpstream(backend.dsn, statement_timeout_ms=backend.timeout_ms,
                         max_size=backend.pool.max_size)  # fmt: skip


def _too_many(analyst: str | None = None) -> TooManyConnections:
    if analyst is None:
        return TooManyConnections("sorry, too many clients already", hint="try again later")
    return TooManyConnections(f'too many connections for role "{analyst}"',
                              hint="close some of your other sessions")  # fmt: skip


async def _fatal(ch: Channel, e: DpsqlError) -> None:
    fields = e.fields()
    fields["S"] = fields["V"] = "FATAL"
    try:
        ch.send(m.ErrorResponse(fields).encode())
        await asyncio.wait_for(ch.flush(), 2)
    except (ConnectionClosed, TimeoutError, OSError):
        pass

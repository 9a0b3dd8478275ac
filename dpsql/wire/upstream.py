"""The wire server's own asynchronous connections to the upstream, for the fast path.

Public and catalog statements whose runnable SQL is cheap to get are answered on the event loop:
no hop to a worker thread and back, no contention for the GIL with it. The connections are
configured exactly as the engine's (:class:`dpsql.execute.backend.Backend`): autocommit, read-only,
the policy's statement timeout; errors are mapped the same way (public and catalog errors keep
their text).

A statement is run with libpq's asynchronous API directly (:mod:`dpsql.wire.upstream_conn`), as a
server-side prepared statement from its second run on a connection, with its parameters passed
as values. The pool is a free list: taking and returning a connection is a list pop and append.

Why not psycopg's ``AsyncConnection`` and ``psycopg_pool`` here, as everywhere else: this is the
public fast path's hot loop. ``bench/upstream_client.py`` measured one public lookup at 27 us of
CPU through this client against 54-63 us with psycopg's generators on its connection and 94-134 us
with ``psycopg_pool`` + ``AsyncRawCursor`` (the bytes passed through); in the proxy, that
psycopg-only client raised the CPU per public statement from 222 to 324 us (1 client) and from
162 to 276 us (8 clients). Connecting, configuring, cancelling and errors are psycopg's (numbers
and what exactly is hand-written: docs/architecture.md, "Upstream connections").
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dpsql.errors import AdminShutdown
from dpsql.execute.backend import Rows
from dpsql.result import Result
from dpsql.upstream.faults import connection_lost, lost, upstream_error
from dpsql.upstream.settings import session_settings
from dpsql.wire.upstream_conn import RawRows, UpstreamConn

log = logging.getLogger("dpsql.wire.upstream")


class AsyncCancel:
    """Cancels the upstream query it is attached to; ``cancel()`` is called on the event loop
    (a CancelRequest, a client that went away, shutdown).

    PostgreSQL ignores a cancel request that arrives while the backend is between protocol
    messages, so the request is repeated every ``RETRY_S`` until the statement has ended.
    """

    RETRY_S = 0.25
    __slots__ = ("_conn", "_task", "cancelled")

    def __init__(self) -> None:
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self.cancelled = False

    def attach(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        self._conn = conn
        if conn is not None and self.cancelled:
            self._start()

    def cancel(self) -> None:
        self.cancelled = True
        if self._conn is not None:
            self._start()

    def detach(self) -> bool:
        """The statement has ended: stop cancelling. True when a cancel request is in flight:
        then await :meth:`sent` before the connection runs anything else, so that the request
        cannot reach the connection's next statement (another session's)."""
        self._conn = None
        return self._task is not None and not self._task.done()

    async def sent(self) -> None:
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task], timeout=6)

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._cancel_until_done())

    async def _cancel_until_done(self) -> None:
        conn = self._conn
        while conn is not None and self._conn is conn:
            try:
                await conn.cancel_safe(timeout=5)
            except psycopg.Error as e:
                log.warning("cancel request to the upstream failed: %s", e)
                return
            await asyncio.sleep(self.RETRY_S)


class AsyncUpstream:
    """A small pool of asynchronous connections to the upstream, used on the server's event loop.

    Args:
        dsn: the upstream's DSN (the engine's backend's).
        statement_timeout_ms: as the engine's backend.
        max_size: the most connections this pool opens.
        local_socket: when the DSN names this machine over TCP, connect through the upstream's
            Unix socket instead if it has a safe one (see :func:`local_socket_dsn`).
    """

    def __init__(
        self, dsn: str, *, statement_timeout_ms: int, max_size: int = 16, local_socket: bool = True
    ) -> None:
        self.dsn = dsn
        self.timeout_ms = statement_timeout_ms
        self.max_size = max_size
        self.statements = 0  # statements run (tests and benchmarks read it)
        self.lost = 0  # connections found dead (the upstream restarted)
        # (SQL, parameter types) PostgreSQL could not prepare as typed: run with literals instead
        self.literal_only: set[tuple[str, tuple[int, ...]]] = set()
        self._idle: list[UpstreamConn] = []
        self._size = 0  # connections open or opening
        self._waiters: deque[asyncio.Future[UpstreamConn | None]] = deque()
        self._closed = False
        self._probe = local_socket  # look for the upstream's Unix socket at the first connect

    async def open(self) -> None:
        """Open the first connection, so a misconfigured upstream shows in the log at start. An
        upstream that is not up yet is not fatal (as for the engine's pool): statements connect
        when they run."""
        self._closed = False
        try:
            self._release(await self._acquire(), ok=True)
        except (psycopg.Error, OSError) as e:
            log.warning("fast path: no upstream connection yet (%s); connecting per statement", e)

    def stats(self) -> dict[str, int]:
        """Connections open, idle, statements waiting for one (as psycopg_pool names them)."""
        return {"pool_size": self._size, "pool_available": len(self._idle),
                "requests_waiting": len(self._waiters), "connections_lost": self.lost}  # fmt: skip

    async def close(self) -> None:
        self._closed = True
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
        idle, self._idle = self._idle, []
        for c in idle:
            self._size -= 1
            await c.close()

    async def _connect(self) -> UpstreamConn:
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        try:
            for statement in (*session_settings(self.timeout_ms), _NO_JIT):
                await conn.execute(statement)
            if self._probe:
                self._probe = False
                self.dsn = await local_socket_dsn(conn, self.dsn)
        except BaseException:
            await conn.close()
            raise
        return UpstreamConn(conn, asyncio.get_running_loop())

    async def _acquire(self) -> UpstreamConn:
        if self._idle:
            return self._idle.pop()
        if self._closed:
            raise AdminShutdown("the server is shutting down")
        if self._size < self.max_size:
            self._size += 1
            try:
                return await self._connect()
            except BaseException:
                self._size -= 1
                self._wake_one()
                raise
        fut: asyncio.Future[UpstreamConn | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            got = await fut
        except BaseException:
            handed = fut.result() if fut.done() and not fut.cancelled() else None
            if handed is not None:
                self._release(handed, ok=True)  # handed over as we were cancelled
            raise
        return got if got is not None else await self._acquire()

    def _release(self, c: UpstreamConn, *, ok: bool) -> None:
        """Give ``c`` back (to a waiter first), or close it when it is not reusable."""
        if not ok or self._closed or not c.healthy():
            self._size -= 1
            c.abandon()
            self._wake_one()
            return
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(c)
                return
        self._idle.append(c)

    def _wake_one(self) -> None:
        """A connection slot came free: let one waiter open a connection of its own."""
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    async def run(
        self,
        query: str,
        params: Sequence[bytes | None] = (),
        types: Sequence[int] = (),
        *,
        cancel: AsyncCancel | None = None,
        fmt: int | None = None,
        zone: str = "UTC",
    ) -> Rows:
        """Run one read-only public/catalog statement and fetch all its rows.

        Args:
            query: the statement (one), with ``$n`` placeholders for ``params``.
            params: the parameter values in text format (None for NULL).
            types: the parameters' type OIDs (0: PostgreSQL infers it, as for an untyped literal).
            cancel: cancelled from the event loop (CancelRequest, client gone, shutdown).
            fmt: 0 or 1 to get the values as PostgreSQL sent them in that format (bytes, to
                pass through: see :class:`RawRows`), None to load them as Python values.
            zone: the session's time zone (PostgreSQL's text of it), set on the connection
                for the statement.

        Raises:
            QueryCanceled: 57014, cancelled or timed out.
            UpstreamError: PostgreSQL refused it (its text kept: no private data here).
        """
        retry = True  # a dead connection (the upstream restarted) is retried once
        while True:  # one coroutine: this runs once per public statement
            try:
                c = self._idle.pop() if self._idle else await self._acquire()
            except psycopg.OperationalError as e:  # could not connect
                raise lost(e) from None
            ok = False
            if cancel is not None:
                cancel.attach(c.conn)
            try:
                self.statements += 1
                res, columns = await c.execute(query, params, types, fmt or 0, zone)
                ok = True
                return c.rows(res, columns, fmt)
            except psycopg.Error as e:
                ok = True  # an error result leaves the connection usable (checked on release)
                if not connection_lost(e, broken=not c.healthy()):
                    raise upstream_error(e, False) from None
                if not retry or (cancel is not None and cancel.cancelled):
                    raise lost(e) from None
            finally:
                if cancel is not None and cancel.detach():
                    await cancel.sent()
                self._release(c, ok=ok)
            # the connection was dead: drop the idle ones (opened before it), run it again
            self.lost += 1
            self._sweep()
            retry = False

    def _sweep(self) -> None:
        """Close every idle connection: they were opened before the one that just died."""
        idle, self._idle = self._idle, []
        for c in idle:
            self._size -= 1
            c.abandon()
            self._wake_one()


_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
# the server's start as a number: its text form depends on the probing connection's DateStyle
_STARTED = "SELECT extract(epoch FROM pg_postmaster_start_time())"
# The fast path runs public lookups and catalog statements: JIT compilation (hundreds of ms once a
# plan's estimated cost passes jit_above_cost) does not pay for either, and the catalog filters
# dpsql adds can push a client's introspection query past that threshold.
_NO_JIT = "SET jit = off"


async def local_socket_dsn(conn: psycopg.AsyncConnection[Any], dsn: str) -> str:
    """``dsn`` to reach the same server through its Unix socket, when ``conn`` (made with
    ``dsn``) reached it over TCP on this machine: a local socket costs both sides less CPU per
    round trip than loopback TCP. Else ``dsn`` unchanged.

    The socket is used only in a directory that only its owner (and group) can write to, never in
    a shared one such as ``/tmp`` (where another local user could have put a socket first), only
    if it reaches the server ``conn`` reached (same postmaster start time), and never when the
    DSN asks to verify the server's certificate (no TLS on a Unix socket).
    """
    info = conn.info
    params = info.get_parameters()
    if info.host not in _LOOPBACK or params.get("sslmode", "").startswith("verify"):
        return dsn
    try:
        cur = await conn.execute(
            "SELECT extract(epoch FROM pg_postmaster_start_time()), "
            "current_setting('unix_socket_directories')"
        )
        started, dirs = await cur.fetchone() or (None, "")
    except psycopg.Error:  # unix_socket_directories is readable by superusers only
        await conn.rollback()
        cur = await conn.execute(_STARTED)
        started, dirs = (await cur.fetchone() or (None,))[0], "/var/run/postgresql"
    for d in (x.strip() for x in str(dirs).split(",")):
        if d and not d.startswith("@") and _private_socket(d, info.port):
            candidate = _with_host(dsn, d)
            try:
                async with await psycopg.AsyncConnection.connect(candidate) as probe:
                    same = (await (await probe.execute(_STARTED)).fetchone() or (None,))[0]
            except psycopg.Error:
                continue
            if same is not None and same == started:
                log.info("fast path: connecting to the upstream through its socket in %s", d)
                return candidate
    return dsn


def _with_host(dsn: str, host: str) -> str:
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if k != "hostaddr"}
    params["host"] = host
    return make_conninfo("", **params)


def _private_socket(directory: str, port: int) -> bool:
    try:
        if os.stat(directory).st_mode & stat.S_IWOTH:
            return False
        return stat.S_ISSOCK(os.stat(os.path.join(directory, f".s.PGSQL.{port}")).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class RawResult(Result):
    """A :class:`~dpsql.result.Result` whose rows are :class:`RawRows` values in ``raw_format``."""

    raw_format: int = 0


_RAW_DEFAULTS = {f.name: f.default for f in fields(RawResult) if f.default is not MISSING}
_new = object.__new__


def raw_result(columns: Any, rows: Any, status: str, fmt: int) -> RawResult:
    """``RawResult(columns, rows, status, raw_format=fmt)`` for the hot path: the same object,
    its fields set without a frozen dataclass's ``object.__setattr__`` call per field.

    >>> raw_result((), [], "SELECT 0", 1) == RawResult((), [], "SELECT 0", raw_format=1)
    True
    """
    res: RawResult = _new(RawResult)
    d = res.__dict__
    d.update(_RAW_DEFAULTS)
    d["columns"], d["rows"], d["command_tag"], d["raw_format"] = columns, rows, status, fmt
    return res


def raw_format_of(res: object) -> int | None:
    """The format of a result's pass-through rows, or None when they are Python values."""
    return res.raw_format if isinstance(res, RawResult) else None


__all__ = ["AsyncCancel", "AsyncUpstream", "RawResult", "RawRows", "raw_format_of", "raw_result"]

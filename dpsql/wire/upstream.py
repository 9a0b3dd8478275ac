"""The wire server's own asynchronous connections to the upstream, for the fast path.

Public and catalog statements whose runnable SQL is cheap to get (memoized by the engine, or a
public statement's template filled in) are answered on the event loop: no hop to a worker thread
and back, no contention for the GIL with it. The connections are configured exactly as the
engine's (:class:`dpsql.execute.backend.Backend`): autocommit, read-only, the policy's statement
timeout; errors are mapped the same way (public and catalog errors keep their text).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from psycopg.adapt import Transformer
from psycopg.pq import ExecStatus
from psycopg.pq.abc import PGresult
from psycopg_pool import AsyncConnectionPool

from dpsql.execute.backend import Rows, session_settings, upstream_error
from dpsql.result import Result, ResultColumn

log = logging.getLogger("dpsql.wire.upstream")
_PREPARED_MAX = 256  # statements remembered per connection


class AsyncCancel:
    """Cancels the upstream query it is attached to; ``cancel()`` is called on the event loop
    (a CancelRequest, a client that went away, shutdown).

    PostgreSQL ignores a cancel request that arrives while the backend is between protocol
    messages, so the request is repeated every ``RETRY_S`` until the statement has ended.
    """

    RETRY_S = 0.25

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

    async def detach(self) -> None:
        """The statement has ended: stop cancelling, and wait for a cancel request in flight, so
        that it cannot reach the connection's next statement (another session's)."""
        self._conn = None
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
    """An async psycopg pool to the upstream, opened on the server's event loop.

    Args:
        dsn: the upstream's DSN (the engine's backend's).
        statement_timeout_ms: as the engine's backend.
        max_size: the most connections this pool opens.
    """

    def __init__(self, dsn: str, *, statement_timeout_ms: int, max_size: int = 16) -> None:
        self.timeout_ms = statement_timeout_ms
        self.pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=max_size,
            kwargs={"autocommit": True},
            configure=self._configure,
            open=False,
            name="dpsql-upstream-async",
        )
        self._states: WeakKeyDictionary[Any, _ConnState] = WeakKeyDictionary()
        self._names = 0

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.set_autocommit(True)
        for statement in session_settings(self.timeout_ms):
            await conn.execute(statement)

    async def open(self) -> None:
        await self.pool.open()

    async def close(self) -> None:
        await self.pool.close(timeout=5)

    async def run(
        self, query: str, cancel: AsyncCancel | None = None, fmt: int | None = None
    ) -> Rows:
        """Run one read-only public/catalog statement and fetch all its rows.

        Args:
            query: the statement (one; parameters already bound by the engine).
            cancel: cancelled from the event loop (CancelRequest, client gone, shutdown).
            fmt: 0 or 1 to get the values as PostgreSQL sent them in that format (bytes, to
                pass through: see :class:`RawRows`), None to load them as Python values.

        Raises:
            QueryCanceled: 57014, cancelled or timed out.
            UpstreamError: PostgreSQL refused it (its text kept: no private data here).
        """
        async with self.pool.connection() as conn:
            if cancel is not None:
                cancel.attach(conn)
            try:
                st, name = self._prepared(conn, query)
                res = await _execute(conn.pgconn, st, name, query.encode(), fmt or 0)
                return _rows(res, fmt)
            except psycopg.Error as e:
                raise upstream_error(e, False) from None
            finally:
                if cancel is not None:
                    await cancel.detach()

    def _prepared(
        self, conn: psycopg.AsyncConnection[Any], query: str
    ) -> tuple[_ConnState, bytes | None]:
        """This connection's state, and the name of ``query``'s server-side prepared statement
        from its second run on (as psycopg's prepare threshold: later runs skip planning)."""
        st = self._states.get(conn)
        if st is None:
            st = self._states[conn] = _ConnState()
        n = st.seen.get(query)
        if n is None:
            st.seen[query] = 0
            if len(st.seen) > _PREPARED_MAX:
                _, old = st.seen.popitem(last=False)
                if old:
                    st.closing.append(b"_dpsql_%d" % old)
            return st, None
        st.seen.move_to_end(query)
        if n == 0:
            self._names += 1
            st.seen[query] = n = self._names
        return st, b"_dpsql_%d" % n


@dataclass
class _ConnState:
    seen: OrderedDict[str, int] = field(default_factory=OrderedDict)  # query -> name number
    prepared: set[bytes] = field(default_factory=set)
    closing: list[bytes] = field(default_factory=list)  # evicted: DEALLOCATE before next use


@dataclass(frozen=True)
class RawRows(Rows):
    """Rows whose values are PostgreSQL's own bytes in format ``fmt`` (None for NULL): sent to
    the client as they are, with no decoding and re-encoding."""

    fmt: int = 0


@dataclass(frozen=True)
class RawResult(Result):
    """A :class:`~dpsql.result.Result` whose rows are :class:`RawRows` values in ``raw_format``."""

    raw_format: int = 0


def raw_format_of(res: object) -> int | None:
    """The format of a result's pass-through rows, or None when they are Python values."""
    return res.raw_format if isinstance(res, RawResult) else None


async def _execute(pg: Any, st: _ConnState, name: bytes | None, query: bytes, fmt: int) -> PGresult:
    """Run ``query`` with libpq's asynchronous API (one statement, extended protocol), preparing
    it as ``name`` first when given and not prepared yet on this connection."""
    while st.closing:
        old = st.closing.pop()
        if old in st.prepared:
            st.prepared.discard(old)
            pg.send_close_prepared(old)
            _check(await _results(pg))
    if name is not None and name not in st.prepared:
        pg.send_prepare(name, query)
        _check(await _results(pg))
        st.prepared.add(name)
    if name is not None:
        pg.send_query_prepared(name, None, result_format=fmt)
    else:
        pg.send_query_params(query, None, result_format=fmt)
    return _check(await _results(pg))


async def _results(pg: Any) -> list[PGresult]:
    loop = asyncio.get_running_loop()
    fd = pg.socket
    while pg.flush():
        await _wait(loop, fd, write=True)
    out = []
    while True:
        while pg.is_busy():
            await _wait(loop, fd, write=False)
            pg.consume_input()
        res = pg.get_result()
        if res is None:
            return out
        out.append(res)


def _wait(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> asyncio.Future[None]:
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        (loop.remove_writer if write else loop.remove_reader)(fd)
        if not fut.done():
            fut.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, ready)
    fut.add_done_callback(lambda _: (loop.remove_writer if write else loop.remove_reader)(fd))
    return fut


def _check(results: list[PGresult]) -> PGresult:
    for res in results:
        if res.status == ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(res)
    if not results:
        raise psycopg.OperationalError("the upstream sent no result")
    return results[-1]


def _rows(res: PGresult, fmt: int | None) -> Rows:
    nf, nt = res.nfields, res.ntuples
    columns = tuple(
        ResultColumn(res.fname(i).decode(), res.ftype(i), res.fmod(i))  # type: ignore[union-attr]
        for i in range(nf)
    )
    status = (res.command_status or b"").decode()
    if fmt is not None:
        get = res.get_value
        raw = [tuple(get(r, c) for c in range(nf)) for r in range(nt)]
        return RawRows(columns, raw, status, fmt)
    tx = Transformer()
    tx.set_pgresult(res)
    return Rows(columns, tx.load_rows(0, nt, tuple) if nf else [], status)

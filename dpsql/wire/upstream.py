"""The wire server's own asynchronous connections to the upstream, for the fast path.

Public and catalog statements whose runnable SQL is cheap to get (memoized by the engine, or a
public statement's template filled in) are answered on the event loop: no hop to a worker thread
and back, no contention for the GIL with it. The connections are configured exactly as the
engine's (:class:`dpsql.execute.backend.Backend`): autocommit, read-only, the policy's statement
timeout; errors are mapped the same way (public and catalog errors keep their text).
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg_pool import AsyncConnectionPool

from dpsql.errors import QueryCanceled
from dpsql.execute.backend import Rows, columns_of, upstream_error


class AsyncCancel:
    """Cancels the upstream query it is attached to; ``cancel()`` is called on the event loop
    (a CancelRequest, a client that went away, shutdown)."""

    def __init__(self) -> None:
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.cancelled = False

    def attach(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        self._conn = conn
        if conn is not None and self.cancelled:
            self._send(conn)

    def cancel(self) -> None:
        self.cancelled = True
        if self._conn is not None:
            self._send(self._conn)

    def _send(self, conn: psycopg.AsyncConnection[Any]) -> None:
        task = asyncio.get_running_loop().create_task(conn.cancel_safe())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


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

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.set_autocommit(True)
        await conn.execute("SET default_transaction_read_only = on")
        await conn.execute(
            pgsql.SQL("SET statement_timeout = {}").format(pgsql.Literal(self.timeout_ms))
        )
        await conn.execute("SET application_name = 'dpsql'")

    async def open(self) -> None:
        await self.pool.open()

    async def close(self) -> None:
        await self.pool.close(timeout=5)

    async def run(self, query: str, cancel: AsyncCancel | None = None) -> Rows:
        """Run one read-only public/catalog statement and fetch all its rows.

        Raises:
            QueryCanceled: 57014, cancelled or timed out.
            UpstreamError: PostgreSQL refused it (its text kept: no private data here).
        """
        async with self.pool.connection() as conn:
            if cancel is not None:
                cancel.attach(conn)
            try:
                async with conn.cursor() as cur:
                    await cur.execute(query)
                    rows = await cur.fetchall() if cur.description is not None else []
                    return Rows(columns_of(cur), rows, cur.statusmessage or "")
            except psycopg.errors.QueryCanceled as e:
                raise QueryCanceled(
                    "canceling statement due to user request or statement timeout",
                    hint="narrow the query or raise the policy's statement_timeout_ms",
                ) from e
            except psycopg.Error as e:
                raise upstream_error(e, False) from None
            finally:
                if cancel is not None:
                    cancel.attach(None)

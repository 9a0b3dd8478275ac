"""One asynchronous upstream connection of the fast path, driven with libpq's asynchronous API.

The connection's socket stays registered with the event loop for the connection's whole life (one
``add_reader``, not one per query): its callback reads what PostgreSQL sent and wakes the statement
waiting for it. A statement is prepared server-side from its second run on the connection (as
psycopg's prepare threshold: later runs skip parsing and planning), keyed by its text and parameter
types, so a public statement run with new values reuses one prepared statement. Its result columns
are remembered with it (PostgreSQL refuses to change a prepared statement's result type).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.adapt import Transformer
from psycopg.pq import ConnStatus, ExecStatus, TransactionStatus
from psycopg.pq.abc import PGresult

from dpsql.execute.backend import Rows
from dpsql.result import ResultColumn
from dpsql.sql.prescan import kept_text

PREPARED_MAX = 256  # statements remembered per connection
# (text, parameter types, time zone): PostgreSQL reads a timestamptz constant in the zone the
# statement is prepared in, and keeps that reading for every run of it
_Key = tuple[str, tuple[int, ...], str]
_SET_ZONE = b"SELECT pg_catalog.set_config('TimeZone', $1, false)"
# psycopg's status enums as module constants: on Python 3.11 reading an Enum class's attribute
# (``ExecStatus.FATAL_ERROR``) takes EnumType.__getattr__'s slow hook; these run per statement.
_FATAL_ERROR = ExecStatus.FATAL_ERROR
_CONN_OK = ConnStatus.OK
_IDLE = TransactionStatus.IDLE
_counter = [0]  # prepared-statement name numbers, unique in the process
_new = object.__new__


@dataclass(frozen=True)
class RawRows(Rows):
    """Rows whose values are PostgreSQL's own bytes in format ``fmt`` (None for NULL): sent to
    the client as they are, with no decoding and re-encoding."""

    fmt: int = 0


class UpstreamConn:
    """A configured autocommit connection (``conn``) and its prepared statements.

    Args:
        conn: a connected, configured psycopg connection, no longer used through psycopg (only
            for cancel requests and closing).
        loop: the event loop every statement runs on.
    """

    __slots__ = ("_broken", "_closing", "_columns", "_seen", "_waiter", "conn", "fd", "loop", "pg",
                 "zone")  # fmt: skip

    def __init__(self, conn: psycopg.AsyncConnection[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.pg = conn.pgconn
        self.fd = self.pg.socket
        self.loop = loop
        self._waiter: asyncio.Future[None] | None = None
        self._broken = False
        self._seen: OrderedDict[_Key, bytes | None] = OrderedDict()  # None: seen once
        self._columns: dict[bytes, tuple[ResultColumn, ...]] = {}  # prepared name -> columns
        self._closing: list[bytes] = []  # evicted: closed before the next statement
        self.zone = "UTC"  # the connection's TimeZone (dpsql.upstream.settings pins UTC)
        loop.add_reader(self.fd, self._readable)

    # ---- I/O ----------------------------------------------------------------------------------
    def _readable(self) -> None:
        try:
            self.pg.consume_input()
        except psycopg.Error as e:  # the connection is lost
            self._broken = True
            self.loop.remove_reader(self.fd)
            w, self._waiter = self._waiter, None
            if w is not None and not w.done():
                w.set_exception(e)
            return
        w = self._waiter
        if w is not None and not self.pg.is_busy():
            self._waiter = None
            if not w.done():
                w.set_result(None)

    async def _results(self) -> list[PGresult]:
        """Every result of the statement just sent (libpq's get_result until None)."""
        pg = self.pg
        while pg.flush():
            await self._writable()
        out: list[PGresult] = []
        while True:
            if pg.is_busy():
                await self._readable_and_done()
            res = pg.get_result()
            if res is None:
                return out
            out.append(res)

    async def _result(self) -> PGresult:
        """The result of the one statement just sent (:meth:`_results` and :func:`_check`, with
        the usual case, one result and the end of it read together, written out)."""
        pg = self.pg
        while pg.flush():
            await self._writable()
        if pg.is_busy():
            await self._readable_and_done()
        res = pg.get_result()
        if res is None or res.status == _FATAL_ERROR or pg.is_busy():
            return _check([res, *await self._results()] if res is not None else [])
        end = pg.get_result()
        return res if end is None else _check([res, end, *await self._results()])

    def _readable_and_done(self) -> asyncio.Future[None]:
        """Done when PostgreSQL's answer is all read (libpq no longer busy). A wait that is
        cancelled leaves the waiter set: the connection, mid-statement, is then not reused."""
        if self._broken:
            raise psycopg.OperationalError("the upstream connection was lost")
        fut = self._waiter = self.loop.create_future()
        return fut

    def _writable(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self.loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self.loop.add_writer(self.fd, ready)
        fut.add_done_callback(lambda _: self.loop.remove_writer(self.fd))
        return fut

    # ---- statements ---------------------------------------------------------------------------
    async def execute(
        self,
        query: str,
        params: Sequence[bytes | None],
        types: Sequence[int],
        fmt: int,
        zone: str = "UTC",
    ) -> tuple[PGresult, tuple[ResultColumn, ...]]:
        """Run ``query`` with ``params`` (text format) in time zone ``zone`` (the session's)
        and return its result and columns.

        Raises:
            psycopg.Error: PostgreSQL's error (the connection stays usable).
        """
        pg = self.pg
        while self._closing:
            pg.send_close_prepared(self._closing.pop())
            _check(await self._results())
        if zone != self.zone:
            pg.send_query_params(_SET_ZONE, [zone.encode()])
            _check(await self._results())
            self.zone = zone
        key = (query, tuple(types), zone)
        name = self._name(key)
        if name is not None and name not in self._columns:
            pg.send_prepare(name, query.encode(), param_types=types or None)
            _check(await self._results())
            self._columns[name] = ()
        if name is None:
            pg.send_query_params(
                query.encode(), params or None, param_types=types or None, result_format=fmt
            )
        else:
            pg.send_query_prepared(name, params or None, result_format=fmt)
        try:
            res = await self._result()
        except psycopg.Error as e:
            # After a schema change PostgreSQL re-plans a prepared statement with its parameter
            # and result types fixed: "cached plan must not change result type" (0A000), or a
            # parameter type that no longer fits (class 42). Prepare it anew next time.
            if name is not None and (e.sqlstate or "")[:2] in ("0A", "42"):
                self._forget(key, name)
            raise
        if name is None:
            return res, _columns(res)
        cols = self._columns[name]
        if len(cols) != res.nfields:
            cols = self._columns[name] = _columns(res)
        return res, cols

    def _name(self, key: _Key) -> bytes | None:
        """The server-side name of ``key``'s prepared statement from its second run on (never
        for a text over :data:`~dpsql.sql.prescan.MEMO_TEXT_MAX`: neither kept here nor held by
        PostgreSQL)."""
        seen = self._seen
        if key not in seen:
            if not kept_text(key[0]):
                return None
            seen[key] = None
            if len(seen) > PREPARED_MAX:
                _, old = seen.popitem(last=False)
                if old is not None and self._columns.pop(old, None) is not None:
                    self._closing.append(old)
            return None
        seen.move_to_end(key)
        name = seen[key]
        if name is None:
            _counter[0] += 1
            name = seen[key] = b"_dpsql_%d" % _counter[0]
        return name

    def _forget(self, key: _Key, name: bytes) -> None:
        self._seen.pop(key, None)
        if self._columns.pop(name, None) is not None:
            self._closing.append(name)

    def rows(self, res: PGresult, columns: tuple[ResultColumn, ...], fmt: int | None) -> Rows:
        status = (res.command_status or b"").decode()
        nf, nt = res.nfields, res.ntuples
        if fmt is not None:
            get = res.get_value
            raw: list[tuple[bytes | None, ...]]
            if nf == 1:
                raw = [(get(r, 0),) for r in range(nt)]
            else:
                raw = [tuple(get(r, c) for c in range(nf)) for r in range(nt)]
            rows: RawRows = _new(RawRows)  # RawRows(columns, raw, status, fmt), cheaper
            rows.__dict__.update(columns=columns, rows=raw, status=status, fmt=fmt)
            return rows
        tx = Transformer()
        tx.set_pgresult(res)
        return Rows(columns, tx.load_rows(0, nt, tuple) if nf else [], status)

    # ---- life ---------------------------------------------------------------------------------
    def healthy(self) -> bool:
        """Idle, connected, outside any transaction, no statement half-read: reusable."""
        pg = self.pg
        return (
            not self._broken
            and self._waiter is None
            and pg.status == _CONN_OK
            and pg.transaction_status == _IDLE
        )

    def abandon(self) -> None:
        """Close at once (the statement on it, if any, ends when PostgreSQL sees the close)."""
        if not self._broken:
            self._broken = True
            self.loop.remove_reader(self.fd)
        self.pg.finish()

    async def close(self) -> None:
        if not self._broken:
            self._broken = True
            self.loop.remove_reader(self.fd)
        await self.conn.close()


def _check(results: list[PGresult]) -> PGresult:
    for res in results:
        if res.status == _FATAL_ERROR:
            raise psycopg.errors.error_from_result(res)
    if not results:
        raise psycopg.OperationalError("the upstream sent no result")
    return results[-1]


def _columns(res: PGresult) -> tuple[ResultColumn, ...]:
    return tuple(
        ResultColumn(res.fname(i).decode(), res.ftype(i), res.fmod(i))  # type: ignore[union-attr]
        for i in range(res.nfields)
    )

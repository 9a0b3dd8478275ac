"""The upstream PostgreSQL: a psycopg pool, read-only transactions, timeouts, sanitized errors.

Private queries run with a statement timeout in read-only transactions; their errors keep only the
SQLSTATE class (the text may contain row values). Public and catalog queries pass errors through.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql as pgsql
from psycopg_pool import ConnectionPool

from dpsql.errors import InvalidParameter
from dpsql.result import ResultColumn
from dpsql.upstream.faults import (
    CONNECT_TIMEOUT_S,
    connection_lost,
    lost,
    timed_out,
    upstream_error,
    user_cancel,
)
from dpsql.upstream.loaders import register_lossless
from dpsql.upstream.settings import session_settings
from dpsql.upstream.zone import UTC_NAME, wanted

_SET_ZONE = "SELECT pg_catalog.set_config('TimeZone', %s, false)"
_CHECK_ZONE = "SELECT pg_catalog.set_config('TimeZone', %s, true)"


def use_zone(conn: psycopg.Connection[Any], zone: str | None) -> bool:
    """Set the pooled connection ``conn`` to ``zone`` (None: UTC, every connection's own) when
    it is in another (a round trip only then: PostgreSQL reports the zone it is in). True when
    the statement may be prepared on the connection: only in UTC, as PostgreSQL reads a
    timestamptz constant in the zone it is prepared in, and a statement psycopg prepared in one
    zone would keep that zone's reading when run in another."""
    want = zone or UTC_NAME
    if conn.info.parameter_status("TimeZone") != want:
        conn.execute(_SET_ZONE, (want,), prepare=False)
    return zone is None


class CancelToken:
    """Cancels the statement it belongs to, from any thread: its upstream query while one is
    attached, and any query it has not sent yet (:meth:`Backend.run` refuses to start one once
    cancelled).

    PostgreSQL drops a cancel request that reaches a backend between statements, so a cancel
    that came before the statement's query was sent (the engine still planning, waiting for a
    pooled connection, or between two of its queries) must not be sent then and forgotten:
    :meth:`Backend.run` checks :attr:`cancelled` once the connection is attached, before the
    query goes out (57014, nothing run). The caller repeats :meth:`cancel` until
    :attr:`finished` (the few milliseconds between that check and the query's start upstream).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self.cancelled = False
        self.finished = False  # the statement's engine call has returned (set by its caller)
        # a padded statement's arrival (monotonic_ns), from which its delivery moment counts
        # (dpsql.execute.in_flight: a statement waiting for it goes on at that moment)
        self.pad_start_ns: int | None = None

    def attach(self, conn: psycopg.Connection[Any] | None) -> None:
        with self._lock:
            self._conn = conn

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._conn is not None:
                self._conn.cancel_safe()


@dataclass(frozen=True)
class Rows:
    columns: tuple[ResultColumn, ...]
    rows: list[tuple[Any, ...]]
    status: str
    then: list[tuple[Any, ...]] | None = None  # the rows of :meth:`Backend.run`'s ``then``


def _columns(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> tuple[ResultColumn, ...]:
    return _described(cur.description)


def _described(desc: list[psycopg.Column] | None) -> tuple[ResultColumn, ...]:
    """Result columns of a cursor's ``description`` (read it once: psycopg builds its Column
    objects again at every read)."""
    if desc is None:
        return ()
    return tuple(ResultColumn(c.name, int(c.type_code), int(getattr(c, "_fmod", -1))) for c in desc)


def type_name(oid: int) -> str:
    """The SQL name of a built-in type OID (text for anything unknown)."""
    info = psycopg.postgres.types.get(oid)
    return info.name if info is not None else "text"


def key_type_name(oid: int) -> str | None:
    """A group key's type name as :mod:`dpsql.execute.key_texts` checks it: ``name[]`` for an
    array type (:func:`type_name` names an array by its element), ``None`` for a type psycopg
    doesn't know (the caller reads its kind from the catalog)."""
    info = psycopg.postgres.types.get(oid)
    if info is None:
        return None
    return f"{info.name}[]" if info.array_oid == oid else info.name


OWN_TIMEOUT_MS = 30_000  # dpsql's own reads (Backend.run_own)


class Backend:
    def __init__(self, dsn: str, *, statement_timeout_ms: int = 30_000, max_size: int = 16) -> None:
        self.dsn = dsn
        self.timeout_ms = statement_timeout_ms
        self.pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max_size,
            kwargs={"autocommit": True},
            configure=self._configure,
            open=True,
            name="dpsql-upstream",
        )

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True
        register_lossless(conn)  # 'infinity', dates after 9999...: PostgreSQL's text, not a failure
        for statement in session_settings(self.timeout_ms):
            conn.execute(statement)

    def close(self) -> None:
        self.pool.close()

    def run_own(self, query: str) -> Rows:
        """A read dpsql makes for itself, not within an analyst's statement (the upstream's
        identity at start-up): under :data:`OWN_TIMEOUT_MS`, not the policy's statement timeout,
        which may be far shorter than a busy machine needs for even a trivial query."""
        with self.pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
            try:
                use_zone(conn, None)
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute(
                        pgsql.SQL("SET LOCAL statement_timeout = {}").format(
                            pgsql.Literal(OWN_TIMEOUT_MS)
                        )
                    )
                    cur.execute(query)
                    return Rows(_columns(cur), cur.fetchall(), cur.statusmessage or "")
            except psycopg.Error as e:
                raise upstream_error(e, False, conn) from None

    def time_zone(self, value: str) -> str:
        """``value`` as PostgreSQL names the time zone it sets for it (``america/new_york`` ->
        ``America/New_York``, ``-5`` -> ``<-05>+05``), read on a pooled connection and left
        unset there (``set_config`` local to its one-statement transaction).

        Raises:
            InvalidParameter: 22023 with PostgreSQL's words, for a zone it doesn't know.
        """
        with self.pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
            try:
                row = conn.execute(_CHECK_ZONE, (value,), prepare=False).fetchone()
            except psycopg.errors.InvalidParameterValue:
                raise InvalidParameter(
                    f'invalid value for parameter "TimeZone": "{value}"',
                    hint="give a time zone name, e.g. 'America/New_York', 'Europe/Berlin' or "
                    "'UTC' (SELECT name FROM pg_timezone_names lists them)",
                ) from None
            except psycopg.Error as e:
                raise upstream_error(e, False, conn) from None
        return str(row[0]) if row is not None else value

    def run(
        self,
        query: str,
        params: Sequence[object] | Mapping[str, Any] | None = None,
        *,
        private: bool,
        cancel: CancelToken | None = None,
        binary: bool = False,
        then: str | None = None,
    ) -> Rows:
        """Run one read-only statement and fetch everything (private results are one row/group).

        ``then``: a statement of dpsql's own (a catalog read, no parameters) run right after
        ``query`` (which then has no parameters either) in the same round trip, its rows in
        :attr:`Rows.then`: the two go as one simple-protocol message, so they run in one implicit
        transaction, ``then`` only once ``query`` has completed, and an error of either fails
        both (as ``query``'s: sanitized when ``private``).

        A statement that meets a dead pooled connection (the upstream restarted) is run once more
        on a fresh one, after the pool's other dead connections are swept
        (:mod:`dpsql.upstream.faults`): it is a read, so running it again is safe.

        It runs in the time zone of the statement this thread runs
        (:data:`dpsql.upstream.zone.ZONE`, the session's ``TimeZone``).
        """
        zone = wanted()
        for attempt in (1, 2):
            try:
                with self.pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
                    if cancel is not None:
                        cancel.attach(conn)
                    try:
                        if cancel is not None and cancel.cancelled:
                            raise user_cancel()  # before its query: sent now, it'd be dropped
                        prepare = None if use_zone(conn, zone) else False
                        with conn.cursor(binary=binary) as cur:
                            if then is None:
                                cur.execute(query, params or None, prepare=prepare)
                            else:
                                assert not params and not binary, "then: one simple message"
                                cur.execute(f"{query}\n;\n{then}", prepare=prepare)
                            desc = cur.description  # built at every read: once
                            rows = cur.fetchall() if desc is not None else []
                            status = cur.statusmessage or ""
                            after = None
                            if then is not None:
                                assert cur.nextset(), "no result of then"
                                after = cur.fetchall()
                            return Rows(_described(desc), rows, status, after)
                    except psycopg.Error as e:
                        if then is not None and _timeout_as_user_request(e, cancel):
                            raise timed_out() from None
                        again = attempt == 1 and connection_lost(e, conn)
                        if not again or (cancel is not None and cancel.cancelled):
                            raise upstream_error(e, private, conn) from None
                    finally:
                        if cancel is not None:
                            cancel.attach(None)
            except psycopg_pool.PoolTimeout as e:
                raise lost(e) from None
            self.pool.check()  # the other idle connections died with this one: replace them now
        raise AssertionError("unreachable")


def _timeout_as_user_request(e: psycopg.Error, cancel: CancelToken | None) -> bool:
    """A 57014 'due to user request' of a two-statement message (``run``'s ``then``) that dpsql
    did not cancel: PostgreSQL's own statement timeout. PostgreSQL ends the timeout between the
    statements of a multi-statement message and resets its indicator, so a timeout that fires as
    the first statement ends is taken in the second, where nothing says it was the timeout
    (measured: 27 of 600 two-statement messages under statement_timeout = 1 ms said 'user
    request', none of 1,200 single statements). Which one the statement got depended on its run
    time (private rows): the answer is the timeout's, as PostgreSQL's would be."""
    return (
        isinstance(e, psycopg.errors.QueryCanceled)
        and "user request" in (e.diag.message_primary or "")
        and not (cancel is not None and cancel.cancelled)
    )


def describe_statement(
    backend: Backend, query: str, param_oids: Sequence[int]
) -> tuple[ResultColumn, ...]:
    """Result columns of ``query`` ($n parameters unbound) from PostgreSQL's Parse/Describe.

    Nothing is executed: PostgreSQL only parses and plans the statement.
    """
    from psycopg.pq import ExecStatus

    with backend.pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
        try:
            use_zone(conn, wanted())
            pg = conn.pgconn
            res = pg.prepare(b"", query.encode(), list(param_oids) or None)
            if res.status != ExecStatus.COMMAND_OK:
                code = res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) or b"XX000"
                raise psycopg.errors.lookup(code.decode())((res.error_message or b"").decode())
            res = pg.describe_prepared(b"")
            return tuple(
                ResultColumn((res.fname(i) or b"").decode(), res.ftype(i), res.fmod(i))
                for i in range(res.nfields)
            )
        except psycopg.Error as e:
            if connection_lost(e, conn):
                backend.pool.check()
            raise upstream_error(e, False, conn) from None
        finally:
            if not conn.closed:
                conn.rollback()

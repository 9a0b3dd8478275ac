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

from dpsql.errors import DpsqlError, QueryCanceled, UpstreamError, sanitized_upstream
from dpsql.result import ResultColumn
from dpsql.upstream.faults import CONNECT_TIMEOUT_S, connection_lost, lost
from dpsql.upstream.settings import output_statements


class CancelToken:
    """Cancels the upstream query it is attached to, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self.cancelled = False

    def attach(self, conn: psycopg.Connection[Any] | None) -> None:
        with self._lock:
            self._conn = conn
            if conn is not None and self.cancelled:
                conn.cancel_safe()

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


def _columns(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> tuple[ResultColumn, ...]:
    if cur.description is None:
        return ()
    return tuple(
        ResultColumn(c.name, int(c.type_code), int(getattr(c, "_fmod", -1)))
        for c in cur.description
    )


def type_name(oid: int) -> str:
    """The SQL name of a built-in type OID (text for anything unknown)."""
    info = psycopg.postgres.types.get(oid)
    return info.name if info is not None else "text"


def session_settings(timeout_ms: int) -> tuple[pgsql.SQL | pgsql.Composed, ...]:
    """What every upstream connection (the engine's pool and the wire fast path's) runs first.

    Autocommit with read-only transactions by default: each statement is its own read-only
    transaction, one round trip instead of BEGIN READ ONLY / query / ROLLBACK. Clients never reach
    these settings (dpsql never forwards SET).

    The search path is pinned to ``public`` (``pg_catalog`` is searched first implicitly, and
    ``current_schema()`` stays ``public`` for clients that ask): dpsql classifies an unqualified
    table name as ``public.<name>`` (:func:`dpsql.sql.tables.referenced_tables`) and public
    statements run as written, so PostgreSQL must resolve names the same way. With the server's
    default (``"$user", public``) or a role's own ``search_path``, a schema named after the
    upstream role would shadow a public table and an unqualified ``SELECT * FROM regions`` would
    return the raw rows of a table the policy never declared. ``standard_conforming_strings`` is
    pinned ``on`` for the same reason: dpsql's parser reads string literals that way. How values
    are written as text is pinned to what dpsql reports to its clients
    (:data:`dpsql.upstream.settings.OUTPUT_SETTINGS`).
    """
    return (
        pgsql.SQL("SET search_path = public"),
        # dpsql parses and writes string literals as standard strings (a backslash is an
        # ordinary character): with standard_conforming_strings = off (a database's or role's
        # setting) a backslash before a quote escapes it, and a literal ending in a backslash would
        # let the rest of the statement run as SQL (tests/redteam/test_string_settings.py)
        pgsql.SQL("SET standard_conforming_strings = on"),
        pgsql.SQL("SET default_transaction_read_only = on"),
        pgsql.SQL("SET statement_timeout = {}").format(pgsql.Literal(timeout_ms)),
        pgsql.SQL("SET application_name = 'dpsql'"),
        *output_statements(),
    )


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
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute(
                        pgsql.SQL("SET LOCAL statement_timeout = {}").format(
                            pgsql.Literal(OWN_TIMEOUT_MS)
                        )
                    )
                    cur.execute(query)
                    return Rows(_columns(cur), cur.fetchall(), cur.statusmessage or "")
            except psycopg.Error as e:
                raise _upstream(e, False, conn) from None

    def run(
        self,
        query: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        private: bool,
        cancel: CancelToken | None = None,
        binary: bool = False,
    ) -> Rows:
        """Run one read-only statement and fetch everything (private results are one row/group).

        A statement that meets a dead pooled connection (the upstream restarted) is run once more
        on a fresh one, after the pool's other dead connections are swept
        (:mod:`dpsql.upstream.faults`): it is a read, so running it again is safe.
        """
        for attempt in (1, 2):
            try:
                with self.pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
                    if cancel is not None:
                        cancel.attach(conn)
                    try:
                        with conn.cursor(binary=binary) as cur:
                            cur.execute(query, params or None)
                            rows = cur.fetchall() if cur.description is not None else []
                            status = cur.statusmessage or ""
                            return Rows(_columns(cur), rows, status)
                    except psycopg.Error as e:
                        again = attempt == 1 and connection_lost(e, conn)
                        if not again or (cancel is not None and cancel.cancelled):
                            raise _upstream(e, private, conn) from None
                    finally:
                        if cancel is not None:
                            cancel.attach(None)
            except psycopg_pool.PoolTimeout as e:
                raise lost(e) from None
            self.pool.check()  # the other idle connections died with this one: replace them now
        raise AssertionError("unreachable")


def describe_statement(
    backend: Backend, query: str, param_oids: Sequence[int]
) -> tuple[ResultColumn, ...]:
    """Result columns of ``query`` ($n parameters unbound) from PostgreSQL's Parse/Describe.

    Nothing is executed: PostgreSQL only parses and plans the statement.
    """
    from psycopg.pq import ExecStatus

    with backend.pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
        try:
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
            raise _upstream(e, False, conn) from None
        finally:
            if not conn.closed:
                conn.rollback()


def _upstream(e: psycopg.Error, private: bool, conn: Any = None) -> DpsqlError:
    """The dpsql error for an upstream failure: 08006 / 57P01 for a lost connection (retryable,
    without libpq's text), 57014 for a cancel or timeout (same text whatever the data), the
    sanitized class of a private query's error, or a public one's own text."""
    if connection_lost(e, conn):
        return lost(e)
    if isinstance(e, psycopg.errors.QueryCanceled):
        return QueryCanceled(
            "canceling statement due to user request or statement timeout",
            hint="narrow the query or raise the policy's statement_timeout_ms",
        )
    if private:
        return sanitized_upstream(e.sqlstate)
    diag = e.diag
    return UpstreamError(
        diag.message_primary or str(e),
        detail=diag.message_detail,
        hint=diag.message_hint,
        sqlstate=e.sqlstate or "XX000",
    )


# Public names for the wire server's asynchronous fast path (dpsql.wire.upstream).
upstream_error = _upstream

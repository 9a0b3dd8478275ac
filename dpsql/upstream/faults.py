"""Upstream connections that died under the pool: telling them from query errors, retrying a
read once on a fresh connection, sweeping the pool's other dead ones, and the error clients see.

A restart of PostgreSQL kills every pooled connection at once. Without care each dead connection
fails one client statement (with libpq's text as XX000), and a pool that pings before use sleeps
its growing backoff (1 s, 2 s, 4 s ...) once per dead connection. Here the first statement to
meet a dead connection sweeps all the idle ones (``pool.check()``: dead ones replaced at once) and
is retried once; what still fails is :class:`~dpsql.errors.ConnectionFailure` (08006, or the
57P01-57P03 PostgreSQL sent), which clients and poolers treat as retryable.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool

from dpsql.errors import ConnectionFailure, DpsqlError, InternalError, QueryCanceled, UpstreamError
from dpsql.errors.upstream import no_such_object, sanitized_upstream

log = logging.getLogger("dpsql.upstream")

SHUTDOWN_STATES = frozenset({"57P01", "57P02", "57P03"})
CONNECT_TIMEOUT_S = 10.0
"""How long a statement waits for a pooled connection (the pool reconnecting) before 08006."""


def connection_lost(e: BaseException, conn: Any = None, *, broken: bool | None = None) -> bool:
    """Whether ``e`` says the connection itself failed (not the statement): a connection-class
    SQLSTATE (08), PostgreSQL shutting down (57P01-57P03), no pooled connection within the pool's
    timeout, or an error without SQLSTATE on a connection now closed or broken (``conn``'s flags,
    or ``broken`` when the caller knows)."""
    if isinstance(e, psycopg_pool.PoolTimeout):
        return True
    if not isinstance(e, psycopg.OperationalError):
        return False
    state = e.sqlstate
    if state in SHUTDOWN_STATES or (state or "").startswith("08"):
        return True
    if state is not None:
        return False
    if broken is None:
        broken = conn is not None and bool(conn.closed or conn.broken)
    return broken


def lost(e: BaseException, what: str = "the database") -> ConnectionFailure:
    """The client's error for a lost connection: PostgreSQL's own shutdown SQLSTATE if it sent
    one, else 08006; never libpq's text (it names hosts and sockets)."""
    state = getattr(e, "sqlstate", None)
    log.warning("connection to %s lost: %s: %s", what, type(e).__name__, str(e).strip()[:300])
    if state in SHUTDOWN_STATES:
        return ConnectionFailure(
            f"{what} is restarting or shutting down",
            hint="retry the statement in a moment",
            sqlstate=state,
        )
    return ConnectionFailure(
        f"the connection to {what} was lost",
        detail="no connection within the timeout"
        if isinstance(e, psycopg_pool.PoolTimeout)
        else None,
        hint="retry the statement; dpsql reconnects by itself",
    )


def quiet(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle pooled connection is open with nothing waiting on its socket: no round
    trip, one ``poll()``. A connection the server closed (a restart, ``pg_terminate_backend``:
    PostgreSQL sends its FATAL and closes) has something to read (the error, or the end of the
    stream), and so has one with an asynchronous message (a NOTICE, a parameter change): those
    get a real check. A server that vanished without closing (a network partition) is not seen
    here; the statement then fails as a lost connection (a ping would have waited as long)."""
    if conn.closed or conn.broken or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
        return False
    try:
        p = select.poll()
        p.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        return not p.poll(0)
    except (OSError, ValueError, psycopg.Error):
        return False


def sweeping_check(
    pool: Callable[[], psycopg_pool.ConnectionPool | None],
) -> Callable[[psycopg.Connection[Any]], None]:
    """A pool ``check=`` callback run on every checkout: a :func:`quiet` connection is used as
    it is (no round trip); any other is pinged, and when it is dead the pool's other idle ones
    are swept too (so the pool's backoff between failed checks is paid once, not once per dead
    connection). ``pool``: returns the pool (made after the callback)."""

    def check(conn: psycopg.Connection[Any]) -> None:
        if quiet(conn):
            return
        try:
            psycopg_pool.ConnectionPool.check_connection(conn)
        except Exception:
            p = pool()
            if p is not None:
                p.check()
            raise

    return check


CANCEL_HINT = (
    "a private statement is charged when it starts: a cancel does not give its budget back "
    "(SELECT * FROM dpsql.history shows the charge)"
)


def user_cancel() -> QueryCanceled:
    """57014 of a cancel (the client's CancelRequest, psql's Ctrl-C, an administrator's
    pg_cancel_backend), in PostgreSQL's words, with what it costs."""
    return QueryCanceled("canceling statement due to user request", hint=CANCEL_HINT)


def timed_out() -> QueryCanceled:
    """57014 of the policy's statement timeout, in PostgreSQL's words."""
    return QueryCanceled(
        "canceling statement due to statement timeout",
        hint="narrow the query or ask the data owner to raise the policy's statement_timeout_ms",
    )


def upstream_error(e: psycopg.Error, private: bool, conn: Any = None) -> DpsqlError:
    """The dpsql error for an upstream failure: 08006 / 57P01 for a lost connection (retryable,
    without libpq's text), 57014 for a cancel or timeout, the
    sanitized class of a private query's error, or a public one's own text. A cancel and the
    policy's timeout are told apart as PostgreSQL tells them (neither is the analyst's choice of
    time: the session says "user request" whenever its client asked to cancel, see
    :meth:`dpsql.wire.session.Session.cancel`)."""
    if connection_lost(e, conn):
        return lost(e)
    if isinstance(e, psycopg.errors.QueryCanceled):
        if "statement timeout" in (e.diag.message_primary or ""):
            return timed_out()
        return user_cancel()
    if private:
        return sanitized_upstream(e.sqlstate)
    diag = e.diag
    missing = no_such_object(e.sqlstate, diag.message_primary or "")
    if missing is not None:  # a catalog lookup of a missing or hidden name (dpsql.catalog)
        return missing
    return UpstreamError(
        diag.message_primary or str(e),
        detail=diag.message_detail,
        hint=diag.message_hint,
        sqlstate=e.sqlstate or InternalError.sqlstate,
    )

"""The ledger's storage: its connection pool, schema and transactions, and the policy's budgets.

:class:`LedgerStore` is what every step of the ledger works on (:mod:`dpsql.budget.charging`,
:mod:`dpsql.budget.answers`, :mod:`dpsql.budget.views`, :mod:`dpsql.budget.admin`,
:mod:`dpsql.budget.reconcile`); :class:`dpsql.budget.ledger.Ledger` adds the protocol on top
(reserve, commit, refund, free repeats). The steps import this module, never the ledger, so the
ledger can import them without a circle.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Self, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql

from dpsql.budget import limits as policy_limits
from dpsql.budget import schema as ledger_schema
from dpsql.budget.records import Limit
from dpsql.errors import ConnectionFailure, DpsqlError, ExternalSystemError, InternalError
from dpsql.errors.upstream import first_line
from dpsql.policy.model import Policy
from dpsql.upstream.faults import (
    CONNECT_TIMEOUT_S,
    SHUTDOWN_STATES,
    connection_lost,
    sweeping_check,
)
from dpsql.upstream.settings import output_statements

log = logging.getLogger("dpsql.budget.ledger")
T = TypeVar("T")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_RETRY = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def _unavailable(e: Exception) -> ExternalSystemError | ConnectionFailure:
    """58000 naming what failed: the ledger database's own message for connection, resource,
    system and configuration errors (classes 08, 53, 57, 58, 28, 3D, 42: about the ledger
    database, never a value of anyone's data); only the SQLSTATE for the others. A lost
    connection is a retryable :class:`ConnectionFailure` instead: 08006, or PostgreSQL's own
    57P01-57P03. The full text goes to the server's log."""
    log.warning("privacy ledger unavailable: %s: %s", type(e).__name__, str(e).strip()[:500])
    message = "the privacy ledger is unavailable"
    detail = ledger_cause(e)
    hint = "the query was not answered; retry when the ledger database is reachable"
    if connection_lost(e, broken=True):
        sqlstate = getattr(e, "sqlstate", None)
        shutdown = sqlstate if sqlstate in SHUTDOWN_STATES else None
        return ConnectionFailure(message, detail=detail, hint=hint, sqlstate=shutdown)
    return ExternalSystemError(message, detail=detail, hint=hint)


_SAFE_CLASSES = ("08", "53", "57", "58", "28", "3D", "42")


def ledger_cause(e: BaseException) -> str:
    """What failed in the ledger database, for a client's DETAIL.

    >>> ledger_cause(psycopg_pool.PoolTimeout("couldn't get a connection after 10.00 sec"))
    "PoolTimeout: no connection to the ledger database: couldn't get a connection after 10.00 sec"
    """
    if isinstance(e, psycopg_pool.PoolTimeout):
        return f"PoolTimeout: no connection to the ledger database: {e}"
    state = getattr(e, "sqlstate", None)
    name = type(e).__name__
    if state is None and isinstance(e, psycopg.OperationalError):
        return f"{name}: the connection to the ledger database failed"
    if state and state[:2] in _SAFE_CLASSES and isinstance(e, psycopg.Error):
        primary = e.diag.message_primary or first_line(e)
        return f"{name} ({state}): {primary}"
    return f"{name} ({state})" if state else name


class LedgerStore:
    """The durable privacy budget of one dataset (``policy.dataset``): pool, schema, transactions."""

    def __init__(self, pool: psycopg_pool.ConnectionPool, policy: Policy, schema: str) -> None:
        self._pool = pool
        self.policy = policy
        self.schema = schema
        self._texts: dict[str, sql.Composed] = {}  # q()'s statements, composed once each

    @classmethod
    def open(cls, dsn: str, policy: Policy, schema: str = "dpsql", *, pool_size: int = 8) -> Self:
        """Connect, create or migrate the ledger schema, and return a ready ledger."""
        if not _SCHEMA_NAME.match(schema):
            raise InternalError(
                f"invalid ledger schema name {schema!r}",
                hint="use lower-case letters, digits and underscores",
            )
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                ledger_schema.migrate(conn, schema)
            holder: list[psycopg_pool.ConnectionPool] = []
            pool = psycopg_pool.ConnectionPool(
                dsn,
                min_size=1,
                max_size=pool_size,
                kwargs={"autocommit": True},
                configure=_configure,
                check=sweeping_check(lambda: holder[0] if holder else None),
                timeout=CONNECT_TIMEOUT_S,
                open=True,
            )
            holder.append(pool)
        except psycopg.Error as e:  # e.g. no CREATE privilege, plpgsql missing: say which
            raise _unavailable(e) from e
        return cls(pool, policy, schema)

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pool(self) -> psycopg_pool.ConnectionPool:
        """The ledger's connection pool (its statistics are reported on /metrics)."""
        return self._pool

    @property
    def dataset(self) -> str:
        return self.policy.dataset

    def q(self, text: str) -> sql.Composed:
        """An internal statement with ``{s}`` bound to the ledger schema (composed once per text:
        the same object each time, so psycopg converts it once and prepares it on each
        connection after a few runs)."""
        hit = self._texts.get(text)
        if hit is None:
            hit = self._texts[text] = sql.SQL(text).format(s=sql.Identifier(self.schema))
        return hit

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection (reads, or explicit ``conn.transaction()``)."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except _RETRY:
            raise
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as e:
            raise _unavailable(e) from e

    def transact(
        self, fn: Callable[[psycopg.Connection], T], attempts: int = 5, *, single: bool = False
    ) -> T:
        """Run ``fn(conn)`` in one transaction, retrying deadlocks and serialization failures.

        ``single``: ``fn`` runs one statement, atomic by itself on the pool's autocommit
        connection, so no BEGIN and COMMIT (two round trips) are sent around it."""
        restarts = 0
        for attempt in range(attempts):
            try:
                with self.connection() as conn:
                    if single:
                        return fn(conn)
                    with conn.transaction():
                        return fn(conn)
            except _RETRY as e:
                if attempt == attempts - 1:
                    raise _unavailable(e) from e
            except DpsqlError as e:
                # A pooled connection the server terminated (a restart, pg_terminate_backend:
                # 57P01-57P03) can look idle until its FATAL arrives, and is then used: the server
                # ran nothing of fn (or rolled it back), so fn runs again once the pool has
                # checked its idle connections (the others were likely terminated too). A
                # connection lost without the server's word (08006) is not retried: a COMMIT
                # may have happened.
                cause = e.__cause__
                if restarts == 3 or getattr(cause, "sqlstate", None) not in SHUTDOWN_STATES:
                    raise
                restarts += 1
                log.info("ledger connection terminated by the server; running the step again")
                self._pool.check()
            except psycopg.Error as e:
                raise InternalError(
                    "the privacy ledger failed", detail=f"{type(e).__name__}: {e}"
                ) from e
        raise AssertionError("unreachable")

    # --- policy (see dpsql.budget.limits) ---------------------------------------------------

    def limits(self, analyst: str) -> tuple[Limit, ...]:
        """The budgets a release by ``analyst`` is charged to, in locking order."""
        return policy_limits.limits(self.policy, analyst)

    def dataset_limit(self) -> Limit | None:
        """The dataset's global budget (the sum over all analysts), if the policy sets one."""
        return policy_limits.dataset_limit(self.policy)


def _configure(conn: psycopg.Connection) -> None:
    conn.execute("SET statement_timeout = '30s'")
    conn.execute("SET lock_timeout = '20s'")
    conn.execute("SET idle_in_transaction_session_timeout = '60s'")
    for statement in output_statements():  # timestamps as psycopg reads them
        conn.execute(statement)

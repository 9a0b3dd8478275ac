"""The privacy budget ledger: durable, transactional reservations, confirmations and free repeats.

Protocol for one private query (the engine drives it)::

    res = ledger.reserve(analyst, cost, fingerprint)   # before the query runs; may refuse (53400)
    ...run the query, add noise...
    ledger.commit(res, cache_key, payload)             # BEFORE any noisy row leaves dpsql
    # or, only if it failed before any result was computed:
    ledger.refund(res)

``reserve`` locks the budget rows it charges (the analyst's and the dataset's, for the current
period) with ``INSERT ... ON CONFLICT DO UPDATE`` (a row lock), always in the same order, checks
that the new totals pass each budget's privacy filter (:mod:`dpsql.budget.filter`), adds the cost
and appends a ``reserved`` release, all in one transaction. Sessions and processes sharing the
ledger therefore serialize on these rows and can never overspend. A reservation is spent from the
moment it exists: if dpsql dies before ``commit`` it stays counted; only an explicit ``refund``
gives it back.

The jobs live apart: :mod:`dpsql.budget.limits` (what the policy charges a release to),
:mod:`dpsql.budget.charging` (the budget-row steps inside a transaction),
:mod:`dpsql.budget.answers` (the store of noisy answers for free repeats),
:mod:`dpsql.budget.schema` (tables and migrations), :mod:`dpsql.budget.views` and
:mod:`dpsql.budget.admin`. This class holds the connection pool and runs each step in one
transaction.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from fractions import Fraction
from typing import TYPE_CHECKING, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql

from dpsql.budget import answers, charging
from dpsql.budget import limits as policy_limits
from dpsql.budget import schema as ledger_schema
from dpsql.budget.format import fmt_down, fmt_up
from dpsql.budget.records import BudgetRow, Limit, Reservation, refundable
from dpsql.dp.accounting import Cost
from dpsql.errors import BudgetExhausted, DpsqlError, InternalError
from dpsql.execute.upstream_faults import (
    CONNECT_TIMEOUT_S,
    SHUTDOWN_STATES,
    connection_lost,
    sweeping_check,
)
from dpsql.policy.model import Policy
from dpsql.upstream_settings import output_statements

if TYPE_CHECKING:
    from dpsql.budget.views import BudgetStatus, HistoryEntry

log = logging.getLogger("dpsql.budget.ledger")
T = TypeVar("T")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_RETRY = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def _unavailable(e: Exception) -> InternalError:
    """58000 naming what failed: the ledger database's own message for connection, resource,
    system and configuration errors (classes 08, 53, 57, 58, 28, 3D, 42: about the ledger
    database, never a value of anyone's data); only the SQLSTATE for the others. The full text
    goes to the server's log."""
    log.warning("privacy ledger unavailable: %s: %s", type(e).__name__, str(e).strip()[:500])
    state = "58000"
    if connection_lost(e, broken=True):  # retryable: 08006, or PostgreSQL's 57P01-57P03
        sqlstate = getattr(e, "sqlstate", None)
        state = sqlstate if sqlstate in SHUTDOWN_STATES else "08006"
    return InternalError(
        "the privacy ledger is unavailable",
        detail=ledger_cause(e),
        hint="the query was not answered; retry when the ledger database is reachable",
        sqlstate=state,
    )


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
        primary = e.diag.message_primary or str(e).strip().splitlines()[0]
        return f"{name} ({state}): {primary}"
    return f"{name} ({state})" if state else name


class Ledger:
    """The durable privacy budget of one dataset (``policy.dataset``), shared by processes."""

    def __init__(self, pool: psycopg_pool.ConnectionPool, policy: Policy, schema: str) -> None:
        self._pool = pool
        self.policy = policy
        self.schema = schema

    @classmethod
    def open(cls, dsn: str, policy: Policy, schema: str = "dpsql", *, pool_size: int = 8) -> Ledger:
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

    def __enter__(self) -> Ledger:
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
        """An internal statement with ``{s}`` bound to the ledger schema."""
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

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

    def transact(self, fn: Callable[[psycopg.Connection], T], attempts: int = 5) -> T:
        """Run ``fn(conn)`` in one transaction, retrying deadlocks and serialization failures."""
        for attempt in range(attempts):
            try:
                with self.connection() as conn, conn.transaction():
                    return fn(conn)
            except _RETRY as e:
                if attempt == attempts - 1:
                    raise _unavailable(e) from e
            except DpsqlError:
                raise
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

    def max_epsilon(self, analyst: str) -> Fraction:
        return policy_limits.max_epsilon(self.policy, analyst)

    def default_delta(self, analyst: str) -> Fraction:
        return policy_limits.default_delta(self.policy, analyst)

    def query_epsilon(self, analyst: str, cost: Cost, delta_for_rho: Fraction | None) -> Fraction:
        """The epsilon of one release on its own (its rho converted at ``delta_for_rho``)."""
        return policy_limits.query_epsilon(self.policy, analyst, cost, delta_for_rho)

    # --- the protocol (see dpsql.budget.charging) --------------------------------------------

    def reserve(
        self,
        analyst: str,
        cost: Cost,
        fingerprint: str,
        *,
        delta_for_rho: Fraction | None = None,
        mechanism: str = "",
        statement: str = "",
    ) -> Reservation:
        """Atomically check every budget the release is charged to, and reserve its cost.

        Args:
            analyst: who asks (charged to their budget and to the dataset's).
            cost: the release's total cost (already composed over its aggregates).
            fingerprint: the query's canonical fingerprint (for history and audit).
            delta_for_rho: the delta at which the query's rho was calibrated (display and the
                per-query maximum); the analyst's default delta when None.
            mechanism: a label for the audit log.
            statement: the statement's text (the analyst's own history shows it).

        Raises:
            BudgetExhausted: over the per-query maximum or any budget (nothing is charged).
        """
        if not isinstance(cost, Cost):
            raise InternalError(f"reserve() needs a Cost, got {type(cost).__name__}")
        limits = self.limits(analyst)
        qeps = self.query_epsilon(analyst, cost, delta_for_rho)
        cap = self.max_epsilon(analyst)
        if qeps > cap:
            raise BudgetExhausted(
                f"the query needs epsilon {fmt_up(qeps)}, more than the per-query maximum "
                f"{fmt_down(cap)} for analyst {analyst}",
                hint=f"SET dpsql.epsilon to at most {fmt_down(cap)}",
            )
        dfr = self.default_delta(analyst) if delta_for_rho is None else Fraction(delta_for_rho)
        return self.transact(
            lambda conn: charging.reserve(
                self, conn, analyst, cost, fingerprint, limits, dfr, mechanism, statement
            )
        )

    def reserve_together(
        self,
        analyst: str,
        parts: Sequence[tuple[Cost, str, Fraction | None]],
        fingerprint: str,
        *,
        statement: str = "",
    ) -> list[Reservation]:
        """:meth:`reserve` of several releases of one statement, all or none, in one transaction.

        ``parts``: (cost, mechanism, delta_for_rho) per release (each is checked against the
        per-query maximum as :meth:`reserve` does, then all are added to every budget in one
        transaction). A statement that chooses its ``auto`` bounds reserves the choices and its
        answer together before it reads any data: refused, it charges nothing; admitted, no
        other statement can take the budget its answer needs (one statement, one charge).

        Raises:
            BudgetExhausted: over the per-query maximum or any budget (nothing is charged).
        """
        limits = self.limits(analyst)
        cap = self.max_epsilon(analyst)
        dfrs = []
        for cost, _, dfr in parts:
            if not isinstance(cost, Cost):
                raise InternalError(f"reserve() needs a Cost, got {type(cost).__name__}")
            qeps = self.query_epsilon(analyst, cost, dfr)
            if qeps > cap:
                raise BudgetExhausted(
                    f"the query needs epsilon {fmt_up(qeps)}, more than the per-query maximum "
                    f"{fmt_down(cap)} for analyst {analyst}",
                    hint=f"SET dpsql.epsilon to at most {fmt_down(cap)}",
                )
            dfrs.append(self.default_delta(analyst) if dfr is None else Fraction(dfr))

        def run(conn: psycopg.Connection) -> list[Reservation]:
            return [
                charging.reserve(self, conn, analyst, cost, fingerprint, limits, d, m, statement)
                for (cost, m, _), d in zip(parts, dfrs, strict=True)
            ]

        return self.transact(run)

    def lock_budget(
        self, conn: psycopg.Connection, kind: str, name: str, start: datetime
    ) -> BudgetRow:
        """Create-or-lock one budget row (held until the transaction ends) and read it."""
        return charging.lock_budget(self, conn, kind, name, start)

    def commit(
        self, res: Reservation, cache_key: str | None = None, payload: bytes | None = None
    ) -> bytes | None:
        """Confirm the spend and store the noisy answer for free repeats, in one transaction.

        Call it BEFORE any noisy row leaves dpsql. Returns None, or, when a concurrent identical
        query stored its answer first, that stored payload (return it instead, so repeats agree).
        """

        def run(conn: psycopg.Connection) -> bytes | None:
            charging.settle(self, conn, res, "committed")
            if cache_key is None or payload is None or self.policy.repeats == "off":
                return None
            return answers.store(self, conn, res.analyst, res.id, cache_key, payload)

        return self.transact(run)

    def commit_answers(
        self, res: Reservation, stored: Sequence[tuple[str, bytes]]
    ) -> list[bytes | None]:
        """:meth:`commit` for a statement of several releases (a tree of DP leaves, one charge):
        confirm the spend and store each leaf's noisy answer under its own key, in one
        transaction. Returns, per key, None or the payload a concurrent query stored first."""

        def run(conn: psycopg.Connection) -> list[bytes | None]:
            charging.settle(self, conn, res, "committed")
            if self.policy.repeats == "off":
                return [None] * len(stored)
            return [answers.store(self, conn, res.analyst, res.id, k, p) for k, p in stored]

        return self.transact(run)

    def refund(self, res: Reservation, error: BaseException | None = None) -> bool:
        """Give a reservation back: only when the query failed before any result was computed.

        A failure that depends on the private data (a division by zero on some row, a timeout)
        is itself a release and must stay charged: pass the ``error`` and, unless it is
        :func:`refundable`, the reservation is confirmed as spent instead. Returns whether it
        was refunded.
        """
        if error is not None and not refundable(error):
            self.commit(res)
            return False

        def run(conn: psycopg.Connection) -> None:
            charging.settle(self, conn, res, "refunded")
            charging.give_back(self, conn, res)

        self.transact(run)
        return True

    # --- free repeats (see dpsql.budget.answers) ---------------------------------------------

    def lookup(self, analyst: str, cache_key: str) -> bytes | None:
        """A stored noisy answer for this key, free; the repeat is recorded in the history."""
        if self.policy.repeats == "off":
            return None
        return self.transact(lambda conn: answers.lookup(self, conn, analyst, cache_key))

    def peek(self, analyst: str, cache_key: str) -> bytes | None:
        """The stored payload for ``cache_key`` the analyst may reuse, read only (records nothing).

        For stored contribution bounds (:mod:`dpsql.execute.auto_bounds`), reused by every later
        statement over the same slice; None when ``repeats: off``.
        """
        if self.policy.repeats == "off":
            return None
        with self.connection() as conn:
            return answers.peek(self, conn, analyst, cache_key)

    def has_answer(self, analyst: str, cache_key: str) -> bool:
        """Whether a repeat of ``cache_key`` by ``analyst`` would be answered free from the store.

        Read only: unlike :meth:`lookup` it records nothing (EXPLAIN uses it).
        """
        if self.policy.repeats == "off":
            return False
        with self.connection() as conn:
            return answers.exists(self, conn, analyst, cache_key)

    # --- views and admin (see dpsql.budget.views) --------------------------------------------

    def remaining(self, analyst: str) -> list[BudgetStatus]:
        """Rows for ``SHOW dpsql.budget`` / ``SELECT * FROM dpsql.budget`` (see views)."""
        from dpsql.budget import views

        return views.remaining(self, analyst)

    def needs(self, analyst: str, cost: Cost) -> list[tuple[BudgetStatus, Fraction | None]]:
        """Each budget's status and what ``cost`` would use of its epsilon now (read only)."""
        from dpsql.budget import views

        return views.needs(self, analyst, cost)

    def history(self, analyst: str, limit: int = 1000) -> list[HistoryEntry]:
        """Rows for ``SELECT * FROM dpsql.history``: the analyst's own releases, newest first."""
        from dpsql.budget import views

        return views.history(self, analyst, limit)

    def grant(
        self,
        actor: str,
        analyst: str | None,
        epsilon: Fraction,
        delta: Fraction = Fraction(0),
        reason: str = "",
    ) -> None:
        """Add to a budget for its current period (``analyst`` None: the dataset's)."""
        from dpsql.budget import admin

        admin.grant(self, actor, analyst, epsilon, delta, reason)

    def reset(self, actor: str, analyst: str | None, reason: str = "") -> None:
        """Zero what a budget has spent in its current period (audited; releases stay)."""
        from dpsql.budget import admin

        admin.reset(self, actor, analyst, reason)


def _configure(conn: psycopg.Connection) -> None:
    conn.execute("SET statement_timeout = '30s'")
    conn.execute("SET lock_timeout = '20s'")
    conn.execute("SET idle_in_transaction_session_timeout = '60s'")
    for statement in output_statements():  # timestamps as psycopg reads them
        conn.execute(statement)


__all__ = [
    "BudgetExhausted",
    "BudgetRow",
    "DpsqlError",
    "Ledger",
    "Limit",
    "Reservation",
    "refundable",
]

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
:mod:`dpsql.budget.admin`; the connection pool, the schema and the transactions are
:class:`dpsql.budget.store.LedgerStore`, which this class extends with the protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction

import psycopg

from dpsql.budget import answers, charging, overcharge, views
from dpsql.budget import limits as policy_limits
from dpsql.budget.api import BudgetLedger, ReleasePart
from dpsql.budget.format import fmt_down, fmt_up
from dpsql.budget.records import (
    BudgetRow,
    BudgetStatus,
    HistoryEntry,
    Reservation,
    Stored,
    refundable,
    say_spent,
)
from dpsql.budget.store import LedgerStore
from dpsql.dp.accounting import Cost
from dpsql.errors import BudgetExhausted, InternalError

log = logging.getLogger("dpsql.budget.ledger")


class Ledger(LedgerStore, BudgetLedger):
    """The privacy budget ledger: reserve, commit, refund and free repeats over a
    :class:`LedgerStore`. The contract, and the docstrings of its methods, are
    :class:`dpsql.budget.api.BudgetLedger`'s."""

    # --- policy (see dpsql.budget.limits) ---------------------------------------------------

    def max_epsilon(self, analyst: str) -> Fraction:
        return policy_limits.max_epsilon(self.policy, analyst)

    def default_delta(self, analyst: str) -> Fraction:
        return policy_limits.default_delta(self.policy, analyst)

    def query_epsilon(self, analyst: str, cost: Cost, delta_for_rho: Fraction | None) -> Fraction:
        return policy_limits.query_epsilon(self.policy, analyst, cost, delta_for_rho)

    # --- the protocol (see dpsql.budget.charging) --------------------------------------------

    def reserve_together(
        self, analyst: str, parts: Sequence[ReleasePart], fingerprint: str, *, statement: str = ""
    ) -> list[Reservation]:
        limits = self.limits(analyst)
        cap = self.max_epsilon(analyst)
        dfrs = [self._per_query(analyst, cost, dfr, cap) for cost, _, dfr in parts]

        def run(conn: psycopg.Connection) -> list[Reservation]:
            if len(parts) > 1:  # a refusal names the whole statement's need
                charging.check_together(self, conn, analyst, [c for c, _, _ in parts], limits)
            return [
                charging.reserve(self, conn, analyst, cost, fingerprint, limits, d, m, statement)
                for (cost, m, _), d in zip(parts, dfrs, strict=True)
            ]

        got = self.transact(run)
        overcharge.seen(got)
        return got

    def _per_query(
        self, analyst: str, cost: Cost, delta_for_rho: Fraction | None, cap: Fraction
    ) -> Fraction:
        """Refuse a release whose epsilon on its own exceeds ``analyst``'s per-query maximum
        ``cap``; the delta its rho is converted at (the analyst's default when None).

        Raises:
            BudgetExhausted: over the per-query maximum (nothing is charged).
        """
        if not isinstance(cost, Cost):
            raise InternalError(f"reserve() needs a Cost, got {type(cost).__name__}")
        qeps = self.query_epsilon(analyst, cost, delta_for_rho)
        if qeps > cap:
            raise BudgetExhausted(
                f"the query needs epsilon {fmt_up(qeps)}, more than the per-query maximum "
                f"{fmt_down(cap)} for analyst {analyst}",
                hint=f"SET dpsql.epsilon to at most {fmt_down(cap)}",
            )
        return self.default_delta(analyst) if delta_for_rho is None else Fraction(delta_for_rho)

    def lock_budget(
        self, conn: psycopg.Connection, kind: str, name: str, start: datetime
    ) -> BudgetRow:
        """Create-or-lock one budget row (held until the transaction ends) and read it."""
        return charging.lock_budget(self, conn, kind, name, start)

    def commit_many(
        self, items: Sequence[tuple[Reservation, str | None, bytes | None]]
    ) -> list[bytes | None]:
        if len(items) == 1:  # one statement: no BEGIN and COMMIT round trips
            return [self._commit_one(*items[0])]

        def run(conn: psycopg.Connection) -> list[bytes | None]:
            out: list[bytes | None] = []
            for res, key, payload in items:
                charging.settle(self, conn, res, "committed")
                if key is None or payload is None or self.policy.repeats == "off":
                    out.append(None)
                else:
                    out.append(answers.store(self, conn, res, key, payload))
            return out

        return self.transact(run) if items else []

    def _commit_one(self, res: Reservation, key: str | None, payload: bytes | None) -> bytes | None:
        """:meth:`commit` of one reservation as one statement (settle, and store the answer
        only when it settled: :func:`~dpsql.budget.answers.settle_and_store`); a reservation
        that is not open raises as :func:`~dpsql.budget.charging.settle` does, nothing stored."""
        if key is None or payload is None or self.policy.repeats == "off":
            self.transact(lambda conn: charging.settle(self, conn, res, "committed"), single=True)
            return None
        settled, earlier = self.transact(
            lambda conn: answers.settle_and_store(self, conn, res, key, payload),
            single=True,
        )
        if not settled:
            raise InternalError(f"reservation {res.id} is not open (committed or refunded)")
        return earlier

    def commit_answers(
        self, res: Reservation, stored: Sequence[tuple[str, bytes]]
    ) -> list[bytes | None]:
        def run(conn: psycopg.Connection) -> list[bytes | None]:
            charging.settle(self, conn, res, "committed")
            if self.policy.repeats == "off":
                return [None] * len(stored)
            return [answers.store(self, conn, res, k, p) for k, p in stored]

        return self.transact(run)

    def refund(self, res: Reservation, error: BaseException | None = None) -> bool:
        if error is not None and not refundable(error):
            sqlstate = str(getattr(error, "sqlstate", None) or "XX000")

            def spent(conn: psycopg.Connection) -> None:  # charged, and known as failed
                charging.settle(self, conn, res, "committed")
                conn.execute(
                    self.q(
                        "INSERT INTO {s}.release_failure (release_id, sqlstate) VALUES (%s, %s)"
                    ),
                    [res.id, sqlstate],
                )

            self.transact(spent)
            say_spent(error)  # the analyst is told the budget stays spent, and why
            # an operator must see probing: a failure that may depend on the data is itself a
            # (noiseless) release, charged in full
            log.error(
                "a private query failed in a way that may depend on the private data "
                "(SQLSTATE %s): charged, not refunded; analyst %s, statement fingerprint %s, "
                "release %s",
                getattr(error, "sqlstate", type(error).__name__),
                res.analyst,
                res.fingerprint,
                res.id,
            )
            return False

        def run(conn: psycopg.Connection) -> None:
            charging.settle(self, conn, res, "refunded")
            charging.give_back(self, conn, res)

        self.transact(run)
        return True

    # --- free repeats (see dpsql.budget.answers) ---------------------------------------------

    def lookup(self, analyst: str, cache_key: str, statement: str | None = None) -> bytes | None:
        got = self.lookup_stored(analyst, cache_key, statement)
        return got.payload if got is not None else None

    def lookup_stored(
        self, analyst: str, cache_key: str, statement: str | None = None
    ) -> Stored | None:
        # One statement, hit or miss (dpsql.budget.answers.lookup: one round trip). An answer
        # stored concurrently just after it is found by the commit instead (commit returns the
        # earlier answer), as it would be if it were stored just after the read.
        if self.policy.repeats == "off":
            return None
        return self.transact(
            lambda conn: answers.lookup(self, conn, analyst, cache_key, statement), single=True
        )

    def peek(self, analyst: str, cache_key: str) -> bytes | None:
        if self.policy.repeats == "off":
            return None
        with self.connection() as conn:
            return answers.peek(self, conn, analyst, cache_key)

    def alias_answer(self, analyst: str, stored_key: str, cache_key: str) -> bool:
        """Keep the answer stored under ``stored_key`` under ``cache_key`` too (a statement
        that measures exactly that release: :mod:`dpsql.execute.fetch_stored`); whether
        ``cache_key`` has an answer now (an earlier one of its own stays)."""
        if self.policy.repeats == "off":
            return False
        return self.transact(lambda conn: answers.alias(self, conn, analyst, stored_key, cache_key))

    def has_answer(self, analyst: str, cache_key: str) -> bool:
        if self.policy.repeats == "off":
            return False
        with self.connection() as conn:
            return answers.exists(self, conn, analyst, cache_key)

    # --- views (see dpsql.budget.views; grants and resets: dpsql.budget.admin) --------------------------------------------

    def remaining(self, analyst: str) -> list[BudgetStatus]:
        return views.remaining(self, analyst)

    def needs(
        self, analyst: str, cost: Cost, *more: Cost
    ) -> list[tuple[BudgetStatus, Fraction | None]]:
        return views.needs(self, analyst, cost, *more)

    def history(self, analyst: str, limit: int = 1000) -> list[HistoryEntry]:
        return views.history(self, analyst, limit)

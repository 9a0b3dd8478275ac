"""The budget ledger as the engine and the analyst's ledger views use it.

:class:`BudgetLedger` is the contract; :class:`dpsql.budget.ledger.Ledger` (PostgreSQL-backed,
transactional) is the one implementation. The engine drives it for one private statement::

    res = ledger.reserve(analyst, cost, fingerprint)   # before the query runs; may refuse (53400)
    ...run the query, add noise...
    ledger.commit(res, cache_key, payload)             # BEFORE any noisy row leaves dpsql
    # or, only if it failed before any result was computed:
    ledger.refund(res)

The types it speaks are plain records (:mod:`dpsql.budget.records`) and
:class:`~dpsql.dp.accounting.Cost`; nothing here imports the implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol

from dpsql.budget.records import BudgetStatus, HistoryEntry, Reservation
from dpsql.dp.accounting import Cost


class BudgetLedger(Protocol):
    """Durable reservations, confirmations and stored answers (free repeats) of releases."""

    def query_epsilon(self, analyst: str, cost: Cost, delta_for_rho: Fraction | None) -> Fraction:
        """The epsilon of one release on its own (its rho converted at ``delta_for_rho``)."""
        ...

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
        """Check every budget the release is charged to and reserve its cost, atomically.

        Raises:
            BudgetExhausted: over the per-query maximum or any budget (nothing is charged).
        """
        ...

    def reserve_together(
        self,
        analyst: str,
        parts: Sequence[tuple[Cost, str, Fraction | None]],
        fingerprint: str,
        *,
        statement: str = "",
    ) -> list[Reservation]:
        """:meth:`reserve` of several releases of one statement, all or none."""
        ...

    def commit(
        self, res: Reservation, cache_key: str | None = None, payload: bytes | None = None
    ) -> bytes | None:
        """Confirm the spend and store the answer; the payload a concurrent twin stored, or None."""
        ...

    def commit_answers(
        self, res: Reservation, stored: Sequence[tuple[str, bytes]]
    ) -> list[bytes | None]:
        """:meth:`commit` of a statement of several releases, each answer under its own key."""
        ...

    def commit_many(
        self, items: Sequence[tuple[Reservation, str | None, bytes | None]]
    ) -> list[bytes | None]:
        """:meth:`commit` of several reservations (each with its key and payload, or None), all
        in one transaction; per item, the payload a concurrent twin stored first, or None."""
        ...

    def refund(self, res: Reservation, error: BaseException | None = None) -> bool:
        """Give a reservation back (when ``error`` cannot depend on private rows); whether it was."""
        ...

    def lookup(self, analyst: str, cache_key: str) -> bytes | None:
        """A stored answer of ``analyst`` for a free repeat (recorded as a repeat), or None."""
        ...

    def peek(self, analyst: str, cache_key: str) -> bytes | None:
        """A stored answer without recording a repeat (internal reads), or None."""
        ...

    def has_answer(self, analyst: str, cache_key: str) -> bool:
        """Whether a free repeat is stored for ``analyst`` under ``cache_key``."""
        ...

    def remaining(self, analyst: str) -> list[BudgetStatus]:
        """Each budget ``analyst`` is charged to, with what is left of it."""
        ...

    def needs(
        self, analyst: str, cost: Cost, *more: Cost
    ) -> list[tuple[BudgetStatus, Fraction | None]]:
        """Each budget with the epsilon ``cost`` (and ``more``, charged with it: a statement's
        releases) would take of it (None: it does not fit)."""
        ...

    def history(self, analyst: str, limit: int = 1000) -> list[HistoryEntry]:
        """``analyst``'s own releases, newest first."""
        ...

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

from dpsql.budget.records import BudgetStatus, HistoryEntry, Reservation, Stored
from dpsql.dp.accounting import Cost

ReleasePart = tuple[Cost, str, Fraction | None]  # (cost, mechanism, delta_for_rho) of a release


class BudgetLedger(Protocol):
    """Durable reservations, confirmations and stored answers (free repeats) of releases.

    The one place the contract is written: :class:`dpsql.budget.ledger.Ledger` declares that it
    implements it and inherits these docstrings (``help(Ledger.reserve)`` shows them).
    :meth:`reserve` and :meth:`commit` are written here, once for any implementation, as the
    one-release case of :meth:`reserve_together` and :meth:`commit_many`.
    """

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
        """Atomically check every budget the release is charged to, and reserve its cost.

        Args:
            analyst: who asks (charged to their budget and to the dataset's).
            cost: the release's total cost (already composed over its aggregates).
            fingerprint: the statement's fingerprint (for history and audit: the engine passes
                :func:`dpsql.execute.prepared.fingerprint`'s short id of its shape).
            delta_for_rho: the delta at which the query's rho was calibrated (display and the
                per-query maximum); the analyst's default delta when None.
            mechanism: a label for the audit log.
            statement: the statement's text (the analyst's own history shows it).

        Raises:
            BudgetExhausted: over the per-query maximum or any budget (nothing is charged).
        """
        part = (cost, mechanism, delta_for_rho)
        return self.reserve_together(analyst, [part], fingerprint, statement=statement)[0]

    def reserve_together(
        self, analyst: str, parts: Sequence[ReleasePart], fingerprint: str, *, statement: str = ""
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
        ...

    def commit(
        self, res: Reservation, cache_key: str | None = None, payload: bytes | None = None
    ) -> bytes | None:
        """Confirm the spend and store the noisy answer for free repeats, in one transaction.

        Call it BEFORE any noisy row leaves dpsql. Returns None, or, when a concurrent identical
        query stored its answer first, that stored payload (return it instead, so repeats agree).
        """
        return self.commit_many([(res, cache_key, payload)])[0]

    def commit_answers(
        self, res: Reservation, stored: Sequence[tuple[str, bytes]]
    ) -> list[bytes | None]:
        """:meth:`commit` for a statement of several releases (a tree of DP leaves, one charge):
        confirm the spend and store each leaf's noisy answer under its own key, in one
        transaction. Returns, per key, None or the payload a concurrent query stored first."""
        ...

    def commit_many(
        self, items: Sequence[tuple[Reservation, str | None, bytes | None]]
    ) -> list[bytes | None]:
        """:meth:`commit` of several reservations in one transaction (a statement's ``auto``
        bound choices): each confirmed, and its payload stored under its key when both are
        given. All or none: a crash leaves them all reserved (``dpsql budget reconcile``), as a
        crash between separate commits would leave the rest. Returns, per item, None or the
        payload a concurrent statement stored first."""
        ...

    def refund(self, res: Reservation, error: BaseException | None = None) -> bool:
        """Give a reservation back: only when the query failed before any result was computed.

        A failure that depends on the private data (a division by zero on some row, a timeout)
        is itself a release and must stay charged: pass the ``error`` and, unless it is
        :func:`~dpsql.budget.records.refundable`, the reservation is confirmed as spent instead.
        Returns whether it was refunded.
        """
        ...

    def lookup(self, analyst: str, cache_key: str, statement: str | None = None) -> bytes | None:
        """A stored noisy answer for this key, free (the repeat is recorded in the history, as
        ``statement`` when given: the text the analyst ran), or None."""
        ...

    def lookup_stored(
        self, analyst: str, cache_key: str, statement: str | None = None
    ) -> Stored | None:
        """:meth:`lookup`, with the release it repeats (its id, time, epsilon) for the
        notice that says so."""
        ...

    def peek(self, analyst: str, cache_key: str) -> bytes | None:
        """The stored payload for ``cache_key`` the analyst may reuse, read only (records
        nothing), or None; None when ``repeats: off``.

        For stored contribution bounds (:mod:`dpsql.execute.auto_bounds`), reused by every later
        statement over the same slice.
        """
        ...

    def alias_answer(self, analyst: str, stored_key: str, cache_key: str) -> bool:
        """Keep the answer stored under ``stored_key`` under ``cache_key`` too: a statement
        measuring exactly that release (:mod:`dpsql.execute.fetch_stored`) is then its free
        repeat. An answer already under ``cache_key`` stays. Whether ``cache_key`` has one now."""
        ...

    def has_answer(self, analyst: str, cache_key: str) -> bool:
        """Whether a repeat of ``cache_key`` by ``analyst`` would be answered free from the store.

        Read only: unlike :meth:`lookup` it records nothing (EXPLAIN uses it).
        """
        ...

    def remaining(self, analyst: str) -> list[BudgetStatus]:
        """Each budget ``analyst`` is charged to, with what is left of it (the rows of ``SHOW
        dpsql.budget`` / ``SELECT * FROM dpsql.budget``)."""
        ...

    def needs(
        self, analyst: str, cost: Cost, *more: Cost
    ) -> list[tuple[BudgetStatus, Fraction | None]]:
        """Each budget's status and the epsilon ``cost`` (and ``more``, charged with it: a
        statement's releases) would take of it now (None: it does not fit); read only."""
        ...

    def history(self, analyst: str, limit: int = 1000) -> list[HistoryEntry]:
        """``analyst``'s own releases, newest first (``SELECT * FROM dpsql.history``)."""
        ...

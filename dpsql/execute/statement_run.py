"""One private statement's run as the flat path (:mod:`dpsql.execute.private`) and the tree path
(:mod:`dpsql.execute.tree`) carry it: what the engine was asked (the prepared statement, the
session, the bound parameters, the cancel token) and the engine it runs on, in one frozen object,
with the stages both paths share for it: its in-flight slot, its charge, the settling of that
charge when the statement fails, and the free statement offered for a stored release when the
post-processing over it fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from dpsql.budget.records import say_spent
from dpsql.execute import fetch_stored
from dpsql.execute.backend import CancelToken
from dpsql.execute.in_flight import one_release
from dpsql.execute.prepared import PrivateQuery, TreeQuery
from dpsql.execute.repeat_keys import flat_key, slot
from dpsql.execute.timing import timing_of
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis

if TYPE_CHECKING:
    from dpsql.budget.api import BudgetLedger
    from dpsql.budget.records import Reservation
    from dpsql.dp.accounting import Cost
    from dpsql.execute.context import EngineContext

Q = TypeVar("Q", PrivateQuery, TreeQuery)


@dataclass(frozen=True)
class StatementRun(Generic[Q]):
    """A private statement being run: ``prepared`` with ``params`` bound, for ``session``."""

    engine: EngineContext
    prepared: Q
    session: SessionContext
    params: Sequence[object]
    cancel: CancelToken | None

    @property
    def ledger(self) -> BudgetLedger | None:
        return self.engine.ledger

    def one_release(self, key: str) -> AbstractContextManager[None]:
        """Hold the in-flight slot of the repeat key ``key`` (:mod:`dpsql.execute.in_flight`):
        an identical statement run at once waits, then finds this one's answer stored."""
        slot_key = slot(self.engine, self.session, key)
        return one_release(slot_key, self.cancel, timing_of(self.engine))

    def reserve(self, cost: Cost, mechanism: str, delta_for_rho: Fraction | None) -> Reservation:
        """Reserve ``cost`` for this statement's answer in the analyst's budget (nothing read
        yet); the caller checked there is a ledger."""
        assert self.ledger is not None
        return self.ledger.reserve(
            self.session.analyst,
            cost,
            self.prepared.fingerprint,
            delta_for_rho=delta_for_rho,
            mechanism=mechanism,
            statement=self.prepared.text,
        )

    def offer(
        self, text: str | None, released: Analysis, key: str, epsilon: Fraction
    ) -> str | None:
        """The statement returning the release stored under ``key`` (measured at ``epsilon``)
        free, when ``text`` measures exactly that release: what an error's hint names when the
        post-processing over the release failed (:func:`dpsql.execute.fetch_stored.offer`)."""
        key_of = partial(flat_key, self.engine)
        scope = self.prepared.scope
        return fetch_stored.offer(
            self.engine, self.session, scope, text, released, key, epsilon, key_of
        )


def settle(
    ledger: BudgetLedger | None,
    reservation: Reservation | None,
    error: BaseException,
    *,
    read: bool,
) -> None:
    """Settle the reservation of a statement that failed with ``error``. ``read``: the private
    rows were read: spent, whatever failed after (left open, the reservation would look like a
    crash to ``dpsql budget reconcile``, whose ``--refund`` would make it free); else refunded
    when the failure can't depend on the private rows (:func:`dpsql.budget.ledger.refundable`),
    confirmed as spent otherwise (a data error, a timeout: failing queries are no free probes)."""
    if ledger is None or reservation is None:
        return
    if read:
        ledger.commit(reservation)
        say_spent(error)
    else:
        ledger.refund(reservation, error)  # or confirmed as spent (history: committed), logged


__all__ = ["StatementRun", "settle"]

"""One release per answer in flight: identical private statements run at once (a dashboard's
sessions) wait for the first one's release and get it as a free repeat.

The ledger's repeat store answers a statement whose release was committed before it looked; two
identical statements that both looked before either committed were each charged for one shared
answer (:meth:`dpsql.budget.api.BudgetLedger.commit` returns the first's payload to the second).
:func:`one_release` serializes the look-up, charge, measurement and commit of one repeat key in
this process: the second looks up after the first committed (a free repeat, recorded as one in
its analyst's history, the dataset charged once) or, when the first released nothing (refused,
failed, refunded), is charged for a release of its own. Nothing free is ever an answer that was
not released before: the second only reads what the ledger stored.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from dpsql.errors import QueryCanceled
from dpsql.execute.backend import CancelToken

_WAIT_S = 0.05  # how often a waiter checks for its own cancel


@dataclass
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


_slots: dict[str, _Slot] = {}
_guard = threading.Lock()


@contextmanager
def one_release(key: str, cancel: CancelToken | None) -> Iterator[None]:
    """Hold ``key`` (a repeat key) for the block; waits while another session holds it.

    Raises:
        QueryCanceled: the waiting statement was cancelled (57014), nothing charged.
    """
    with _guard:
        slot = _slots.setdefault(key, _Slot())
        slot.users += 1
    try:
        while not slot.lock.acquire(timeout=_WAIT_S):
            if cancel is not None and cancel.cancelled:
                raise QueryCanceled(
                    "canceling statement due to user request",
                    hint="an identical statement was still being answered; run it again",
                )
        try:
            yield
        finally:
            slot.lock.release()
    finally:
        with _guard:
            slot.users -= 1
            if slot.users == 0:
                del _slots[key]

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

With ``dpsql serve --workers N`` the slot holds across the worker processes too: a worker that
got a key's in-process slot also takes the key in a shared table made before the fork
(:class:`SharedSlots`, by a hash of the key); a worker finding it taken waits, as a thread does.
A full table, or no table (one process), leaves it to the in-process slot.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dpsql.errors import QueryCanceled
from dpsql.execute.backend import CancelToken
from dpsql.policy.settings import Timing

_WAIT_S = 0.05  # how often a waiter checks for its own cancel
_MS = 1_000_000  # ns


@dataclass
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0
    # the holder's padded arrival (monotonic_ns; CancelToken.pad_start_ns), when padded
    anchor: int | None = None


_slots: dict[str, _Slot] = {}
_guard = threading.Lock()


class SharedSlots:
    """The keys in flight in any worker process: (hash of the key, owning worker + 1) pairs in
    shared memory, made in the parent before the fork (``dpsql.server.workers``)."""

    SIZE = 256

    def __init__(self) -> None:
        table = mp.get_context("fork").Array("q", self.SIZE * 2, lock=True)
        self._lock: Any = table.get_lock()
        self._table: Any = table.get_obj()
        self.worker = 0

    def for_worker(self, worker: int) -> SharedSlots:
        self.worker = worker
        return self

    def try_hold(self, h: int) -> bool | None:
        """Take ``h``: True, False when a worker holds it, None when the table is full."""
        with self._lock:
            free = None
            for i in range(0, self.SIZE * 2, 2):
                if self._table[i] == h:
                    return False
                if free is None and self._table[i] == 0:
                    free = i
            if free is None:
                return None
            self._table[free], self._table[free + 1] = h, self.worker + 1
            return True

    def release(self, h: int) -> None:
        with self._lock:
            for i in range(0, self.SIZE * 2, 2):
                if self._table[i] == h and self._table[i + 1] == self.worker + 1:
                    self._table[i] = self._table[i + 1] = 0

    def reset_worker(self, worker: int) -> None:
        """A worker died: the keys it held are free."""
        with self._lock:
            for i in range(0, self.SIZE * 2, 2):
                if self._table[i + 1] == worker + 1:
                    self._table[i] = self._table[i + 1] = 0


_shared: SharedSlots | None = None


def share(slots: SharedSlots) -> None:
    """This worker process's view of the slots shared with the other workers."""
    global _shared
    _shared = slots


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1 or 1


def _hold_shared(h: int, cancel: CancelToken | None) -> bool:
    """Wait until no other worker holds ``h``, then hold it; False: not held (no table, or a
    full one)."""
    shared = _shared
    if shared is None:
        return False
    while True:
        got = shared.try_hold(h)
        if got is not False:
            return bool(got)
        if cancel is not None and cancel.cancelled:
            raise QueryCanceled(
                "canceling statement due to user request",
                hint="an identical statement was still being answered; run it again",
            )
        time.sleep(_WAIT_S)


@contextmanager
def one_release(
    key: str, cancel: CancelToken | None, timing: Timing | None = None
) -> Iterator[None]:
    """Hold ``key`` (a repeat key) for the block; waits while another session holds it.

    With timing padding (``timing``), a statement that waited goes on only at the holder's
    delivery moment (the first moment of the holder's padding grid, counted from its arrival,
    not before the holder ended): the end of the wait is the end of the holder's work, and on
    the waiter's own grid, started whenever the analyst chose, a few waiters at staggered
    moments read the holder's run time finer than its padding shows (review22).

    Raises:
        QueryCanceled: the waiting statement was cancelled (57014), nothing charged.
    """
    with _guard:
        slot = _slots.setdefault(key, _Slot())
        slot.users += 1
    try:
        waited = False
        while not slot.lock.acquire(timeout=_WAIT_S):
            waited = True
            _check(cancel)
        try:
            holder, slot.anchor = slot.anchor, getattr(cancel, "pad_start_ns", None)
            h = _key_hash(key)
            held = _hold_shared(h, cancel)  # another worker's identical statement first
            try:
                if waited and timing is not None and holder is not None:
                    _until_delivered(timing, holder, cancel)
                yield
            finally:
                if held and _shared is not None:
                    _shared.release(h)
        finally:
            slot.lock.release()
    finally:
        with _guard:
            slot.users -= 1
            if slot.users == 0:
                del _slots[key]


def _check(cancel: CancelToken | None) -> None:
    if cancel is not None and cancel.cancelled:
        raise QueryCanceled(
            "canceling statement due to user request",
            hint="an identical statement was still being answered; run it again",
        )


def _until_delivered(timing: Timing, anchor_ns: int, cancel: CancelToken | None) -> None:
    """Wait (cancellable) until the delivery moment of a statement that arrived at
    ``anchor_ns`` and whose work has ended now (:func:`dpsql.execute.timing.delivery_delay_ns`)."""
    from dpsql.execute.timing import delivery_delay_ns

    now = time.monotonic_ns()
    until = now + delivery_delay_ns(max(0, now - anchor_ns), timing.quantum_ms, timing.min_ms)
    while (left := until - time.monotonic_ns()) > 0:
        _check(cancel)
        time.sleep(min(_WAIT_S, left / 1e9))
    _check(cancel)

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
    """The keys in flight in any worker process, in shared memory made in the parent before the
    fork (``dpsql.server.workers``). An entry is (hash of the key, owning worker + 1, the owner's
    padded arrival, its delivery moment): a holder that ends with timing padding leaves its entry
    unowned with its delivery moment (monotonic_ns: one clock for all processes), and the worker
    that waited for it takes the entry over and goes on at that moment, not when it saw the
    entry free (review23: it ended its wait when the holder's work ended, a timing channel)."""

    SIZE = 256
    _W = 4  # fields per entry

    def __init__(self) -> None:
        table = mp.get_context("fork").Array("q", self.SIZE * self._W, lock=True)
        self._lock: Any = table.get_lock()
        self._table: Any = table.get_obj()
        self.worker = 0

    def for_worker(self, worker: int) -> SharedSlots:
        self.worker = worker
        return self

    def try_hold(self, h: int, anchor: int | None = None) -> tuple[bool, int] | None:
        """Take ``h``: (True, the delivery moment its last holder left, or 0), (False, the
        holder's padded arrival, or 0) when a worker holds it, None when the table is full."""
        t, w = self._table, self._W
        with self._lock:
            mine = empty = unowned = None
            for i in range(0, self.SIZE * w, w):
                if t[i] == h:
                    if t[i + 1] != 0:
                        return False, t[i + 2]
                    mine = i
                elif t[i + 1] == 0:  # empty, or left by a holder of another key
                    if t[i] == 0 and empty is None:
                        empty = i
                    elif unowned is None:
                        unowned = i
            at = next((i for i in (mine, empty, unowned) if i is not None), None)
            if at is None:
                return None
            left = t[at + 3] if at == mine else 0
            t[at], t[at + 1], t[at + 2], t[at + 3] = h, self.worker + 1, anchor or 0, 0
            return True, left

    def release(self, h: int, deliver_ns: int = 0) -> None:
        """Leave ``h``: free, or, with ``deliver_ns``, left with the holder's delivery moment for
        the worker that waits for it."""
        t, w = self._table, self._W
        with self._lock:
            for i in range(0, self.SIZE * w, w):
                if t[i] == h and t[i + 1] == self.worker + 1:
                    t[i + 1], t[i + 2], t[i + 3] = 0, 0, deliver_ns
                    if not deliver_ns:
                        t[i] = 0

    def reset_worker(self, worker: int) -> None:
        """A worker died: the keys it held are free."""
        t, w = self._table, self._W
        with self._lock:
            for i in range(0, self.SIZE * w, w):
                if t[i + 1] == worker + 1:
                    t[i] = t[i + 1] = t[i + 2] = t[i + 3] = 0


_shared: SharedSlots | None = None


def share(slots: SharedSlots) -> None:
    """This worker process's view of the slots shared with the other workers."""
    global _shared
    _shared = slots


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1 or 1


def _hold_shared(
    h: int, cancel: CancelToken | None, timing: Timing | None, anchor: int | None
) -> bool:
    """Wait until no other worker holds ``h``, then hold it; False: not held (no table, or a
    full one). With timing padding, a statement that waited goes on at the delivery moment of
    the holder it waited for, as :func:`one_release` does for a holder in this process."""
    shared = _shared
    if shared is None:
        return False
    waited, seen = False, 0  # the padded arrival of the last holder seen
    while True:
        got = shared.try_hold(h, anchor)
        if got is None or got[0]:
            if waited and timing is not None:
                if got is not None and got[1]:  # the holder's delivery moment, as it left it
                    _sleep_until(got[1], cancel)
                elif seen:  # its entry was reused meanwhile: from its arrival and now
                    _until_delivered(timing, seen, cancel)
            return got is not None
        waited, seen = True, got[1] or seen
        _check(cancel)
        time.sleep(_WAIT_S)


def _delivery_ns(timing: Timing | None, anchor: int | None) -> int:
    """The delivery moment (monotonic_ns) of a statement that arrived at ``anchor`` and whose
    work ends now; 0 without padding."""
    from dpsql.execute.timing import delivery_delay_ns

    if timing is None or anchor is None:
        return 0
    now = time.monotonic_ns()
    return now + delivery_delay_ns(max(0, now - anchor), timing.quantum_ms, timing.min_ms)


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
            if waited and timing is not None and holder is not None:
                _until_delivered(timing, holder, cancel)
            h = _key_hash(key)
            # another worker's identical statement first
            held = _hold_shared(h, cancel, timing, slot.anchor)
            try:
                yield
            finally:
                if held and _shared is not None:
                    _shared.release(h, _delivery_ns(timing, slot.anchor))
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
    _sleep_until(_delivery_ns(timing, anchor_ns), cancel)


def _sleep_until(until: int, cancel: CancelToken | None) -> None:
    """Sleep (cancellable) until ``until`` (monotonic_ns)."""
    while (left := until - time.monotonic_ns()) > 0:
        _check(cancel)
        time.sleep(min(_WAIT_S, left / 1e9))
    _check(cancel)

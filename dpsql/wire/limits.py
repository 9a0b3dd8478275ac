"""Connection and per-analyst session counts, and failed-login times, in one process or shared by
``--workers`` processes.

With several worker processes the counts live in one shared-memory array created before the
workers are forked: a row per worker (its open connections, then its sessions per analyst), so the
limits are global (``max_sessions`` and ``max_sessions_per_analyst`` hold across all workers) and
the parent can zero the row of a worker that died without closing its sessions.

>>> lim = SessionLimits(["ana", "bob"])
>>> lim.connect(), lim.connections(), lim.add_session("ana", 1), lim.add_session("ana", 1)
(None, 1, True, False)

Failed logins (:class:`FailureLog`) are kept the same way: a fixed-size table in shared memory, so
the rate limit of :class:`dpsql.wire.auth.LoginLimiter` holds across all workers (an attacker
does not get N times the attempts by spreading connections over N workers).
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing as mp
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, MutableSequence
from contextlib import AbstractContextManager, contextmanager

log = logging.getLogger("dpsql.wire.limits")


class SessionLimits:
    """Counts open connections and sessions per analyst.

    Args:
        analysts: every analyst of the policy (sessions of others are not counted).
        workers: rows to keep (one per worker process).
        shared: keep the counts in shared memory (create before forking the workers).
    """

    def __init__(self, analysts: Iterable[str], workers: int = 1, *, shared: bool = False) -> None:
        self._col = {a: i + 1 for i, a in enumerate(sorted(set(analysts)))}
        self._width = len(self._col) + 1
        self._rows = workers
        size = workers * self._width
        self._lock: AbstractContextManager[object]
        self._arr: MutableSequence[int]
        if shared:
            arr = mp.get_context("fork").Array("q", size, lock=True)
            # typeshed types a ctypes array's items as c_longlong; a "q" array reads and writes int
            self._lock, self._arr = arr.get_lock(), arr.get_obj()  # type: ignore[assignment]
        else:
            self._lock, self._arr = threading.Lock(), [0] * size
        self.worker = 0

    def for_worker(self, worker: int) -> SessionLimits:
        """This object, counting into row ``worker`` (called in the worker after the fork)."""
        if not 0 <= worker < self._rows:
            raise ValueError(f"worker {worker} out of range")
        self.worker = worker
        return self

    def _total(self, col: int) -> int:
        return sum(self._arr[r * self._width + col] for r in range(self._rows))

    def _add(self, col: int, n: int) -> None:
        self._arr[self.worker * self._width + col] += n

    def connect(self) -> None:
        with self._lock:
            self._add(0, 1)

    def disconnect(self) -> None:
        with self._lock:
            self._add(0, -1)

    def connections(self) -> int:
        """Open connections (authenticated or not) in all workers."""
        with self._lock:
            return self._total(0)

    def add_session(self, analyst: str, limit: int) -> bool:
        """Count a session of ``analyst`` unless it already has ``limit`` (checked atomically)."""
        col = self._col.get(analyst)
        if col is None:
            return True
        with self._lock:
            if self._total(col) >= limit:
                return False
            self._add(col, 1)
            return True

    def admit(self, analyst: str, per_analyst: int, total: int) -> str | None:
        """Count an authenticated session of ``analyst`` unless that would pass ``total``
        sessions (all analysts, all workers) or ``per_analyst`` of its own; checked and counted
        atomically, so a burst of logins admits exactly the limit. Returns None when counted,
        else which limit is full ("total" or "analyst").

        >>> lim = SessionLimits(["ana", "bob"])
        >>> lim.admit("ana", 5, 2), lim.admit("bob", 5, 2), lim.admit("bob", 5, 2)
        (None, None, 'total')
        """
        col = self._col.get(analyst)
        if col is None:
            return None
        with self._lock:
            if self._sessions() >= total:
                return "total"
            if self._total(col) >= per_analyst:
                return "analyst"
            self._add(col, 1)
            return None

    def _sessions(self) -> int:
        return sum(self._total(col) for col in range(1, self._width))

    def sessions(self) -> int:
        """Authenticated sessions (of the policy's analysts) in all workers."""
        with self._lock:
            return self._sessions()

    def remove_session(self, analyst: str) -> None:
        col = self._col.get(analyst)
        if col is not None:
            with self._lock:
                self._add(col, -1)

    def reset_worker(self, worker: int) -> None:
        """Forget a dead worker's counts (its connections died with it)."""
        with self._lock:
            start = worker * self._width
            for i in range(start, start + self._width):
                self._arr[i] = 0


class FailureLog:
    """The times of the last ``limit`` failures per key, to tell whether ``limit`` of them fell
    within the last ``window_s`` seconds (a sliding window, exact per key).

    A fixed table of ``slots`` rows (a keyed 64-bit hash of the key, then ``limit`` times), found
    by linear probing over :attr:`PROBE` rows; a row whose failures all left the window is free
    again. With ``shared=True`` the table is in shared memory (create it before forking the
    workers): every worker counts into and reads the same rows. When every probed row is in use
    (more than ``slots`` keys failing within one window), the row failing least recently is
    reused and a warning logged.

    >>> f = FailureLog(limit=2, window_s=60)
    >>> f.add("u:ann"), f.full("u:ann"), f.add("u:ann"), f.full("u:ann"), f.full("u:bob")
    (None, False, None, True, False)
    >>> f.clear("u:ann"), f.full("u:ann")
    (None, False)
    """

    PROBE = 32

    def __init__(
        self,
        limit: int,
        window_s: float,
        slots: int = 4096,
        *,
        shared: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or slots < 1:
            raise ValueError("limit and slots must be positive")
        self.limit, self.window_s, self.slots = limit, window_s, slots
        self._secret = secrets.token_bytes(16)  # not noise: keys the row hash (copied by fork)
        self._clock = clock  # CLOCK_MONOTONIC: one clock for all processes of the machine
        # Times are stored as clock() - _base, always > window_s, so 0.0 means "none".
        self._base = clock() - window_s - 1.0
        self._warned = -float("inf")  # when this process last logged a full table
        self._lock: AbstractContextManager[object]
        self._keys: MutableSequence[int]
        self._times: MutableSequence[float]
        if shared:
            ctx = mp.get_context("fork")
            self._lock = ctx.Lock()
            self._keys = ctx.RawArray("q", slots)
            self._times = ctx.RawArray("d", slots * limit)
        else:
            self._lock = threading.Lock()
            self._keys, self._times = [0] * slots, [0.0] * (slots * limit)

    def _hash(self, key: str) -> int:
        digest = hashlib.blake2b(key.encode(), digest_size=8, key=self._secret).digest()
        return int.from_bytes(digest, "big", signed=True) or 1

    def _now(self) -> float:
        return self._clock() - self._base

    def _span(self, row: int) -> slice:
        """Where row ``row``'s ``limit`` times stand in ``_times``."""
        return slice(row * self.limit, (row + 1) * self.limit)

    def _newest(self, row: int) -> float:
        return max(self._times[self._span(row)])

    def _find(self, h: int) -> int | None:
        """The row of hash ``h``, if it has one (the cheap path: keys only)."""
        for i in range(self.PROBE):
            row = (h + i) % self.slots
            if self._keys[row] == h:
                return row
        return None

    def _claim(self, h: int, now: float) -> int:
        """A row for hash ``h``, which has none: a free one, else the one failing least recently."""
        stalest, stalest_t = 0, float("inf")
        for i in range(self.PROBE):
            row = (h + i) % self.slots
            newest = self._newest(row) if self._keys[row] else 0.0
            if newest <= now - self.window_s:
                stalest = row
                break
            if newest < stalest_t:
                stalest, stalest_t = row, newest
        else:
            if now - self._warned > self.window_s:  # once per window, not once per failure
                self._warned = now
                log.warning("failed-login table full: forgetting the failures of the keys "
                            "failing least recently")  # fmt: skip
        self._keys[stalest] = h
        self._times[self._span(stalest)] = [0.0] * self.limit
        return stalest

    @contextmanager
    def _row(self, key: str) -> Iterator[tuple[int, int | None]]:
        """Under the lock: the hash of ``key`` and its row, if it has one."""
        h = self._hash(key)
        with self._lock:
            yield h, self._find(h)

    def count(self, key: str) -> int:
        """Failures of ``key`` within the window (at most ``limit``)."""
        with self._row(key) as (_, row):
            if row is None:
                return 0
            recent = self._now() - self.window_s
            return sum(1 for t in self._times[self._span(row)] if t > recent)

    def full(self, key: str) -> bool:
        """Whether ``key`` had ``limit`` failures within the window."""
        return self.count(key) >= self.limit

    def add(self, key: str) -> None:
        """Record a failure of ``key`` now (replacing its oldest recorded one)."""
        with self._row(key) as (h, row):
            now = self._now()
            if row is None:
                row = self._claim(h, now)
            span = self._span(row)
            times = self._times[span]
            self._times[span.start + times.index(min(times))] = now

    def clear(self, key: str) -> None:
        """Forget the failures of ``key``."""
        with self._row(key) as (_, row):
            if row is not None:
                self._keys[row] = 0
                self._times[self._span(row)] = [0.0] * self.limit

"""Connection and per-analyst session counts, in one process or shared by ``--workers`` processes.

With several worker processes the counts live in one shared-memory array created before the
workers are forked: a row per worker (its open connections, then its sessions per analyst), so the
limits are global (``max_sessions`` and ``max_sessions_per_analyst`` hold across all workers) and
the parent can zero the row of a worker that died without closing its sessions.

>>> lim = SessionLimits(["ana", "bob"])
>>> lim.connect(), lim.connections(), lim.add_session("ana", 1), lim.add_session("ana", 1)
(None, 1, True, False)
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Iterable
from typing import Any


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
        self._lock: Any
        if shared:
            arr = mp.get_context("fork").Array("q", size, lock=True)
            self._lock, self._arr = arr.get_lock(), arr.get_obj()
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

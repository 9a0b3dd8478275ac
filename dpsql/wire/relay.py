"""Cancel requests across ``--workers`` processes.

A CancelRequest arrives on a new connection, which the kernel may give to any worker. Each worker
hands out process ids ``== its index (mod the number of workers)``, so the worker that receives
a request for another worker's session knows the owner: it puts the (process id, secret key) pair
in the owner's row of a shared-memory table and signals it (SIGUSR1); the owner checks the secret
key as for a local request (constant time) and cancels. Nothing else crosses processes.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
from typing import Any

log = logging.getLogger("dpsql.wire.relay")
SLOTS = 32  # pending forwarded requests per worker
SIGNAL = signal.SIGUSR1


class CancelRelay:
    """The shared table; create it in the parent before forking, then :meth:`for_worker`.

    Args:
        workers: the number of worker processes.
    """

    def __init__(self, workers: int) -> None:
        ctx = mp.get_context("fork")
        self.workers = workers
        self.worker = 0
        self._pids = ctx.Array("q", workers, lock=False)  # each worker's OS pid once ready
        table = ctx.Array("q", workers * SLOTS * 2, lock=True)
        self._lock: Any = table.get_lock()
        self._table: Any = table.get_obj()

    def for_worker(self, worker: int) -> CancelRelay:
        self.worker = worker
        return self

    def ready(self) -> None:
        """This worker handles :data:`SIGNAL` now: others may forward to it."""
        self._pids[self.worker] = os.getpid()

    def owner(self, process_id: int) -> int:
        """The worker whose session has ``process_id``."""
        return process_id % self.workers

    def new_process_id(self, random31: int) -> int:
        """A positive process id from 31 random bits, owned by this worker."""
        pid = random31 - random31 % self.workers + self.worker
        if pid >= 2**31:  # BackendKeyData's process id is an int32
            pid -= self.workers
        return pid if pid > 0 else self.workers + self.worker

    def forward(self, process_id: int, secret_key: int) -> bool:
        """Queue a request for its owner and signal it; False if it cannot be delivered."""
        owner = self.owner(process_id)
        os_pid = self._pids[owner]
        if not os_pid:
            return False
        base = owner * SLOTS * 2
        with self._lock:
            for i in range(base, base + SLOTS * 2, 2):
                if self._table[i] == 0:
                    self._table[i], self._table[i + 1] = process_id, secret_key
                    break
            else:
                log.warning("cancel relay full for worker %d; request dropped", owner)
                return False
        try:
            os.kill(os_pid, SIGNAL)
        except ProcessLookupError:
            return False
        return True

    def take(self) -> list[tuple[int, int]]:
        """This worker's forwarded requests (emptied)."""
        base = self.worker * SLOTS * 2
        out = []
        with self._lock:
            for i in range(base, base + SLOTS * 2, 2):
                if self._table[i]:
                    out.append((int(self._table[i]), int(self._table[i + 1])))
                    self._table[i] = self._table[i + 1] = 0
        return out

    def reset_worker(self, worker: int) -> None:
        """A worker died: nothing may be forwarded to it until its successor is ready."""
        self._pids[worker] = 0
        base = worker * SLOTS * 2
        with self._lock:
            for i in range(base, base + SLOTS * 2):
                self._table[i] = 0

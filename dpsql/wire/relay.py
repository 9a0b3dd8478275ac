"""Cancel requests across ``--workers`` processes.

A CancelRequest arrives on a new connection, which the kernel may give to any worker. Each worker
hands out process ids ``== its index (mod the number of workers)``, so the worker that receives
a request for another worker's session knows the owner: it puts the (process id, secret key) pair
in the owner's row of a shared-memory table and signals it (SIGUSR1); the owner checks the secret
key as for a local request (constant time) and cancels.

For ``pg_stat_activity`` and ``pg_cancel_backend`` / ``pg_terminate_backend`` across workers
(:mod:`dpsql.catalog.session_functions`), each worker also lists its sessions in a shared table
(process id, a keyed hash of the analyst's name, start time), and a signal for another worker's
session is queued for its owner with that hash, which checks it against the session's analyst:
an analyst lists and signals only their own sessions, whichever worker holds them. Nothing else
crosses processes.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing as mp
import os
import signal
from typing import Any

log = logging.getLogger("dpsql.wire.relay")
SLOTS = 32  # pending forwarded requests per worker
SESSIONS = 1024  # sessions of a worker listed for the others
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
        # each worker's sessions: (process id, analyst key, start in ms since the epoch)
        reg = ctx.Array("q", workers * SESSIONS * 3, lock=True)
        self._reg_lock: Any = reg.get_lock()
        self._reg: Any = reg.get_obj()
        # signals queued for each worker: (process id, analyst key, terminate)
        sig = ctx.Array("q", workers * SLOTS * 3, lock=True)
        self._sig_lock: Any = sig.get_lock()
        self._sig: Any = sig.get_obj()
        self._salt = os.urandom(16)  # made before the fork: every worker's keys agree

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
        return self._queue(
            "cancel", self._lock, self._table, owner, os_pid, (process_id, secret_key)
        )

    def take(self) -> list[tuple[int, int]]:
        """This worker's forwarded requests (emptied)."""
        return [(r[0], r[1]) for r in self._take(self._lock, self._table, 2)]

    def reset_worker(self, worker: int) -> None:
        """A worker died: nothing may be forwarded to it until its successor is ready."""
        self._pids[worker] = 0
        base = worker * SLOTS * 2
        with self._lock:
            for i in range(base, base + SLOTS * 2):
                self._table[i] = 0
        with self._reg_lock:
            for i in range(worker * SESSIONS * 3, (worker + 1) * SESSIONS * 3):
                self._reg[i] = 0
        with self._sig_lock:
            for i in range(worker * SLOTS * 3, (worker + 1) * SLOTS * 3):
                self._sig[i] = 0

    # ---- the analysts' sessions across workers ------------------------------------------
    def analyst_key(self, analyst: str) -> int:
        """A keyed hash of the analyst's name (non-zero, 63 bits): names never cross processes."""
        h = hashlib.blake2b(analyst.encode(), key=self._salt, digest_size=8).digest()
        return int.from_bytes(h, "big") >> 1 or 1

    def register(self, process_id: int, analyst: str, start_ms: int) -> None:
        """List this worker's new session (silently not, when its table is full)."""
        base = self.worker * SESSIONS * 3
        key = self.analyst_key(analyst)
        with self._reg_lock:
            for i in range(base, base + SESSIONS * 3, 3):
                if self._reg[i] == 0:
                    self._reg[i], self._reg[i + 1], self._reg[i + 2] = process_id, key, start_ms
                    return
        log.warning("session table full for worker %d: pid=%d not listed", self.worker, process_id)

    def unregister(self, process_id: int) -> None:
        base = self.worker * SESSIONS * 3
        with self._reg_lock:
            for i in range(base, base + SESSIONS * 3, 3):
                if self._reg[i] == process_id:
                    self._reg[i] = self._reg[i + 1] = self._reg[i + 2] = 0
                    return

    def sessions_of(self, analyst: str) -> list[tuple[int, int]]:
        """The analyst's sessions on the other workers: (process id, start in ms)."""
        key = self.analyst_key(analyst)
        out = []
        with self._reg_lock:
            for w in range(self.workers):
                if w == self.worker:
                    continue
                for i in range(w * SESSIONS * 3, (w + 1) * SESSIONS * 3, 3):
                    if self._reg[i] and self._reg[i + 1] == key:
                        out.append((int(self._reg[i]), int(self._reg[i + 2])))
        return out

    def forward_signal(self, process_id: int, analyst: str, terminate: bool) -> bool:
        """Queue a cancel (``terminate``: and end) of another worker's session for its owner,
        which checks that the session is ``analyst``'s; False when it is not listed as theirs
        or the owner can't be reached."""
        owner = self.owner(process_id)
        key = self.analyst_key(analyst)
        with self._reg_lock:
            listed = any(
                self._reg[i] == process_id and self._reg[i + 1] == key
                for i in range(owner * SESSIONS * 3, (owner + 1) * SESSIONS * 3, 3)
            )
        os_pid = self._pids[owner]
        if not listed or not os_pid or owner == self.worker:
            return False
        return self._queue(
            "signal", self._sig_lock, self._sig, owner, os_pid, (process_id, key, int(terminate))
        )

    def take_signals(self) -> list[tuple[int, int, bool]]:
        """This worker's queued signals (emptied): (process id, analyst key, terminate)."""
        return [(r[0], r[1], bool(r[2])) for r in self._take(self._sig_lock, self._sig, 3)]

    # ---- the shared queues (SLOTS rows of one width per worker) ---------------------------
    def _queue(
        self, what: str, lock: Any, table: Any, owner: int, os_pid: int, row: tuple[int, ...]
    ) -> bool:
        """Put ``row`` in the first free row of ``owner``'s part of ``table`` and signal it;
        False when its rows are all taken or it is gone."""
        n = len(row)
        with lock:
            for i in range(owner * SLOTS * n, (owner + 1) * SLOTS * n, n):
                if table[i] == 0:
                    table[i : i + n] = row
                    break
            else:
                log.warning("%s relay full for worker %d; request dropped", what, owner)
                return False
        try:
            os.kill(os_pid, SIGNAL)
        except ProcessLookupError:
            return False
        return True

    def _take(self, lock: Any, table: Any, n: int) -> list[tuple[int, ...]]:
        """This worker's rows of ``table`` (``n`` values each), emptied."""
        base = self.worker * SLOTS * n
        out = []
        with lock:
            for i in range(base, base + SLOTS * n, n):
                if table[i]:
                    out.append(tuple(int(v) for v in table[i : i + n]))
                    table[i : i + n] = (0,) * n
        return out

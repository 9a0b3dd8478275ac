"""``dpsql serve --workers N``: N server processes accepting on one port (SO_REUSEPORT).

The parent process loads nothing but the policy; it reserves the port (a bound, not listening,
SO_REUSEPORT socket, so ``:0`` picks one port for all), creates the shared session counts
(:class:`~dpsql.wire.limits.SessionLimits`) and forks the workers. Each worker builds its own engine
(its own upstream pools and caches; the budget ledger is safe across processes, and the repeats
store is shared in PostgreSQL) and runs the asyncio server on the port; the kernel spreads new
connections across the workers.

SIGTERM or SIGINT to the parent: it sends SIGTERM to every worker, each shuts down gracefully
(stop listening, let running statements finish for the grace period, cancel the rest, close the
sessions with 57P01), and the parent waits for them. A worker that dies unexpectedly is logged,
its session counts are zeroed and it is restarted.

Limits: ``max_sessions``, ``max_sessions_per_analyst`` and the failed-login rate limits are global
(shared-memory counts, :mod:`dpsql.wire.limits`): spreading connections over N workers does not
give a client N times the attempts.
A CancelRequest that reaches another worker is relayed to the session's (:mod:`dpsql.wire.relay`).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import wait
from typing import Any

from dpsql.execute import in_flight
from dpsql.execute.in_flight import SharedSlots
from dpsql.policy.model import Policy
from dpsql.server.run import serve
from dpsql.wire.auth import LoginLimiter
from dpsql.wire.engine_api import EngineAPI, UpstreamEngine
from dpsql.wire.limits import SessionLimits
from dpsql.wire.relay import CancelRelay
from dpsql.wire.server import Server, ServerConfig, freeze_startup_heap

log = logging.getLogger("dpsql.wire.workers")
RESTART_DELAY_S = 1.0


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound (not listening) SO_REUSEPORT socket holding ``host:port`` for the workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _worker_main(
    index: int,
    make_engine: Callable[[], EngineAPI],
    policy: Policy,
    config: ServerConfig,
    limits: SessionLimits,
    relay: CancelRelay,
    logins: LoginLimiter,
    port_file: str | None,
    slots: SharedSlots,
) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    in_flight.share(slots.for_worker(index))  # identical statements across the workers
    engine = make_engine()
    freeze_startup_heap()
    try:
        shared = limits.for_worker(index), relay.for_worker(index), logins
        serve(Server(engine, policy, config, *shared), port_file)
    finally:
        if isinstance(engine, UpstreamEngine):
            engine.close()


class Workers:
    """The parent of ``count`` worker processes (see the module docstring)."""

    def __init__(
        self,
        make_engine: Callable[[], EngineAPI],
        policy: Policy,
        config: ServerConfig,
        count: int,
        port_file: str | None = None,
    ) -> None:
        if count < 1:
            raise ValueError("--workers must be at least 1")
        self._reserved = reserve_port(config.host, config.port)
        self.port = int(self._reserved.getsockname()[1])
        self.config = replace(config, port=self.port, reuse_port=True)
        self.make_engine = make_engine
        self.policy = policy
        self.count = count
        self.limits = SessionLimits(policy.analysts, count, shared=True)
        self.relay = CancelRelay(count)
        self.slots = SharedSlots()
        self.logins = LoginLimiter.for_config(config.auth, shared=True)
        self.port_file = port_file  # each worker writes it once listening
        self._ctx = mp.get_context("fork")
        self.procs: list[Any] = [None] * count
        self._stopping = False

    def _start(self, index: int) -> None:
        args = (index, self.make_engine, self.policy, self.config, self.limits, self.relay,
                self.logins, self.port_file, self.slots)  # fmt: skip
        proc = self._ctx.Process(target=_worker_main, args=args, name=f"dpsql-worker-{index}")
        proc.start()
        self.procs[index] = proc
        log.info("worker %d started pid=%s", index, proc.pid)

    def stop(self, *_: Any) -> None:
        """Ask every worker to shut down gracefully (a signal handler)."""
        self._stopping = True
        for proc in self.procs:
            if proc is not None and proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGTERM)

    def run(self) -> None:
        """Start the workers, restart any that dies, return once all stopped after :meth:`stop`."""
        for i in range(self.count):
            self._start(i)
        old = {s: signal.signal(s, self.stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._supervise()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self._reserved.close()

    def _supervise(self) -> None:
        while not self._stopping:
            live = {p.sentinel: i for i, p in enumerate(self.procs) if p is not None}
            for sentinel in wait(list(live), timeout=0.5):
                i = live[sentinel]
                if self._stopping:
                    break
                proc = self.procs[i]
                log.error("worker %d (pid %s) exited with %s; restarting", i, proc.pid,
                          proc.exitcode)  # fmt: skip
                proc.join()
                self.limits.reset_worker(i)
                self.relay.reset_worker(i)
                self.slots.reset_worker(i)
                time.sleep(RESTART_DELAY_S)
                if not self._stopping:
                    self._start(i)
        deadline = time.monotonic() + self.config.shutdown_grace_s + 20
        for proc in self.procs:
            if proc is None:
                continue
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                log.error("worker pid %s did not stop in time; killing it", proc.pid)
                proc.kill()
                proc.join(5)
        log.info("all workers stopped")

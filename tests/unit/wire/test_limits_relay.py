"""Shared session counts, failed-login times and the cancel relay (no sockets, no database)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpsql.wire.limits import FailureLog, SessionLimits
from dpsql.wire.relay import SLOTS, CancelRelay

ROOT = Path(__file__).resolve().parents[3]


def test_limits_are_summed_over_worker_rows_and_reset_per_worker() -> None:
    lim = SessionLimits(["ana", "bob"], workers=2, shared=True)
    w0 = lim.for_worker(0)
    assert w0.add_session("ana", 2)
    lim.for_worker(1)
    assert lim.add_session("ana", 2)
    assert not lim.add_session("ana", 2)  # the limit counts both workers' sessions
    assert lim.add_session("bob", 2)
    lim.connect()
    assert lim.connections() == 1
    lim.reset_worker(1)  # worker 1 died: its sessions are gone
    assert lim.connections() == 0 and lim.add_session("ana", 2)
    with pytest.raises(ValueError):
        lim.for_worker(2)


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_process_ids_name_their_worker(workers: int) -> None:
    relay = CancelRelay(workers)
    for w in range(workers):
        relay.for_worker(w)
        for bits in (0, 1, 5, 2**31 - 1, 123456789):
            pid = relay.new_process_id(bits)
            assert 0 < pid < 2**31 and relay.owner(pid) == w


def test_forwarded_requests_reach_the_owner_once() -> None:
    relay = CancelRelay(2)
    relay.for_worker(1)
    assert relay.take() == []
    relay.for_worker(0)
    pid = 2 * 1000 + 1  # owned by worker 1, which is not ready: nothing can be delivered
    assert not relay.forward(pid, -5)
    relay._pids[1] = os.getpid()
    import signal

    old = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        assert all(relay.forward(pid + 2 * i, i - 3) for i in range(SLOTS))
        assert not relay.forward(pid, 1)  # the table is full
        relay.for_worker(1)
        got = relay.take()
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert got == [(pid + 2 * i, i - 3) for i in range(SLOTS)] and relay.take() == []


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_failure_log_window_and_clear() -> None:
    clock = Clock()
    log = FailureLog(limit=3, window_s=60, clock=clock)
    for _ in range(3):
        assert not log.full("u:ann")
        log.add("u:ann")
    assert log.full("u:ann") and log.count("u:ann") == 3 and log.count("u:bob") == 0
    clock.t += 59.9
    assert log.full("u:ann")
    clock.t += 0.1
    assert log.count("u:ann") == 0  # the window slid past them
    log.add("u:ann")
    log.add("u:ann")
    log.clear("u:ann")
    assert log.count("u:ann") == 0


def test_failure_log_keeps_the_latest_failures_only() -> None:
    clock = Clock()
    log = FailureLog(limit=2, window_s=60, clock=clock)
    log.add("k")
    clock.t += 30
    log.add("k")
    log.add("k")  # replaces the oldest: the two kept are recent
    clock.t += 40
    assert log.full("k")  # the first failure left the window, the last two did not
    clock.t += 20
    assert not log.full("k")


# Forked in a fresh interpreter: pytest's process may have threads (JAX, thread pools) by then,
# and forking a threaded process can deadlock the child.
_FORKED = """
import multiprocessing as mp
from dpsql.wire.auth import LoginLimiter
from dpsql.wire.limits import FailureLog

def run(target, *args):
    p = mp.get_context("fork").Process(target=target, args=args)
    p.start()
    p.join(10)
    assert p.exitcode == 0

log = FailureLog(limit=4, window_s=60, shared=True)
for _ in range(3):
    run(log.add, "h:10.0.0.1")
assert log.count("h:10.0.0.1") == 3 and not log.full("h:10.0.0.1")
log.add("h:10.0.0.1")
assert log.full("h:10.0.0.1")

lim = LoginLimiter(max_failures=2, window_s=60, max_per_host=3, shared=True)
run(lim.failed, "ann", "h1")
assert not lim.blocked("ann", "h2")
lim.failed("ann", "h2")
assert lim.blocked("ann", "h3") and not lim.blocked("bob", "h1")
run(lim.failed, "bob", "h1")
lim.failed("cy", "h1")
assert lim.blocked("dan", "h1")  # the host's three failures, from three processes
run(lim.succeeded, "ann")
assert not lim.blocked("ann", "h2")
print("ok")
"""


def test_failure_log_and_login_limiter_are_shared_by_forked_workers() -> None:
    out = subprocess.run([sys.executable, "-c", _FORKED], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr


def test_failure_log_full_table_reuses_the_stalest_row() -> None:
    clock = Clock()
    log = FailureLog(limit=1, window_s=60, slots=4, clock=clock)
    for k in "abcd":
        log.add(k)
        clock.t += 1
    assert all(log.full(k) for k in "abcd")
    log.add("e")  # no free row: "a", failing least recently, is forgotten
    assert log.full("e") and not log.full("a") and all(log.full(k) for k in "bcd")


def test_failure_log_reuses_expired_rows() -> None:
    clock = Clock()
    log = FailureLog(limit=1, window_s=60, slots=2, clock=clock)
    log.add("a")
    log.add("b")
    clock.t += 61
    log.add("c")
    log.add("d")
    assert log.full("c") and log.full("d") and not log.full("a") and not log.full("b")


def test_a_burst_from_two_worker_processes_admits_exactly_the_limit() -> None:
    """The analyst's session limit is exact across ``--workers`` processes (fix24, for the
    closing note's "the cross-worker session count lags under load"): two forked workers admit
    at once, 60 attempts of ana each, then 60 of bob, against 20 sessions per analyst and 25 in
    all; exactly 20 of ana's and 5 of bob's are counted (the check and the count are one step
    under the shared lock). What 2a64b46's test met was not a lag: its connections, kept until
    both workers had one, all reached worker 0 while worker 1 started, and the 21st was rightly
    refused. A session closed by its client is counted until its worker reads the close, as a
    PostgreSQL backend is until it exits."""
    import multiprocessing as mp

    lim = SessionLimits(["ana", "bob"], workers=2, shared=True)
    ctx = mp.get_context("fork")
    start = ctx.Event()

    def burst(worker: int) -> None:
        mine = lim.for_worker(worker)
        start.wait()
        for who in ("ana", "bob"):
            for _ in range(60):
                mine.admit(who, 20, 25)

    procs = [ctx.Process(target=burst, args=(w,)) for w in (0, 1)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert lim.sessions() == 25, lim.sessions()
    lim.for_worker(0)
    assert lim.admit("ana", 20, 10**6) == "analyst" and lim.admit("ana", 21, 10**6) is None
    assert lim.admit("bob", 5, 10**6) == "analyst" and lim.admit("bob", 6, 10**6) is None

"""Shared session counts and the cancel relay (no sockets, no database)."""

from __future__ import annotations

import os

import pytest

from dpsql.wire.limits import SessionLimits
from dpsql.wire.relay import SLOTS, CancelRelay


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

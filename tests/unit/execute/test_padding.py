"""The padding function (pure, exact) and the two waiting helpers."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql.execute.timing import delivery_delay_ns, padded, remaining_s, run_padded
from dpsql.policy.settings import Timing

MS = 1_000_000


@pytest.mark.parametrize(
    ("elapsed_ms", "quantum", "minimum", "delay_ns"),
    [
        (0, 400, 0, 400 * MS),  # even an instant answer waits one quantum
        (1, 400, 0, 399 * MS),
        (399, 400, 0, 1 * MS),
        (400, 400, 0, 0),  # exactly on a boundary: no wait
        (401, 400, 0, 399 * MS),  # just past: the next one
        (1250, 400, 0, 350 * MS),
        (130, 50, 400, 270 * MS),  # the minimum comes first
        (450, 50, 400, 0),
        (451, 50, 400, 49 * MS),  # past the minimum: the quantum grid
        (130, 0, 0, 0),  # off
        (130, 0, 400, 270 * MS),  # a minimum alone
        (500, 0, 400, 0),
    ],
)
def test_delivery_delay_exact(elapsed_ms: int, quantum: int, minimum: int, delay_ns: int) -> None:
    assert delivery_delay_ns(elapsed_ms * MS, quantum, minimum) == delay_ns


def test_delivery_delay_nanoseconds() -> None:
    assert delivery_delay_ns(400 * MS + 1, 400, 0) == 400 * MS - 1
    assert delivery_delay_ns(400 * MS - 1, 400, 0) == 1


def test_delivery_delay_refuses_negatives() -> None:
    with pytest.raises(ValueError):
        delivery_delay_ns(-1, 400, 0)
    with pytest.raises(ValueError):
        delivery_delay_ns(1, -400, 0)


@given(
    elapsed=st.integers(0, 10**12),
    quantum=st.integers(1, 600_000),
    minimum=st.integers(0, 3_600_000),
)
def test_delivery_is_on_the_grid(elapsed: int, quantum: int, minimum: int) -> None:
    """Delivery never precedes the work or the minimum, and after the minimum it falls on a
    quantum boundary less than one quantum after the work ended (a full one for instant work)."""
    at = elapsed + delivery_delay_ns(elapsed, quantum, minimum)
    q = quantum * MS
    assert at >= elapsed and at >= minimum * MS and at >= q
    assert at == minimum * MS or (at % q == 0 and at - max(elapsed, 1) < q)


def test_remaining_s_uses_the_arrival_time() -> None:
    t = Timing(quantum_ms=400)
    assert remaining_s(t, started_ns=1_000 * MS, now_ns=1_100 * MS) == pytest.approx(0.3)
    assert remaining_s(t, started_ns=1_000 * MS, now_ns=999 * MS) == pytest.approx(0.4)  # skew


def test_timing_off_by_default() -> None:
    assert not Timing().enabled and Timing(min_ms=1).enabled and Timing(quantum_ms=1).enabled


def _bucket(seconds: float, quantum_ms: int) -> int:
    return int(seconds * 1000 // quantum_ms)


def test_run_padded_pads_results_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    t = Timing(quantum_ms=200)
    t0 = time.perf_counter()
    assert run_padded(lambda: 7, t) == 7
    assert _bucket(time.perf_counter() - t0, 200) >= 1

    def fail() -> None:
        raise RuntimeError("after looking at data")

    t0 = time.perf_counter()
    with pytest.raises(RuntimeError):
        run_padded(fail, t)
    assert _bucket(time.perf_counter() - t0, 200) >= 1
    slept: list[float] = []
    monkeypatch.setattr("dpsql.execute.timing.time.sleep", slept.append)
    assert run_padded(lambda: 8, None) == 8
    assert slept == []  # padding off: no wait at all
    assert run_padded(lambda: 9, t) == 9
    assert len(slept) == 1 and 0 < slept[0] <= 0.2  # on: one wait, up to the quantum


def test_async_padding_and_cancellation() -> None:
    """A fresh answer waits for the quantum (a lower bound: load cannot break it); a free repeat
    (pad_repeats off) and a cancelled wait are not padded: with a 120 s quantum they end well
    inside a 30 s deadline (no speed assertion: a padded one would take 120 s)."""
    t = Timing(quantum_ms=200, pad_repeats=False)
    long = Timing(quantum_ms=120_000, pad_repeats=False)

    class Cached:
        cached = True

    async def main() -> float:
        async def work(x: object) -> object:
            return x

        t0 = time.perf_counter()
        await padded(work(1), t)
        fresh = time.perf_counter() - t0
        # a free repeat, pad_repeats off: at once (a padded one would miss the deadline)
        await asyncio.wait_for(padded(work(Cached()), long), 30)

        async def slow() -> None:
            await asyncio.sleep(300)

        task = asyncio.ensure_future(padded(slow(), long))
        await asyncio.sleep(0.01)
        task.cancel()  # shutdown / client gone: not delayed by the padding
        done, _ = await asyncio.wait({task}, timeout=30)
        assert done == {task} and task.cancelled()
        return fresh

    assert _bucket(asyncio.run(main()), 200) >= 1

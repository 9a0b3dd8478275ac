"""Timing padding: deliver answers over private tables only at data-independent moments.

The policy's ``timing:`` section (:class:`dpsql.policy.settings.Timing`) sets a quantum and a
minimum. Every execution of a private statement, whatever its outcome (a fresh release, a free
repeat unless ``pad_repeats: false``, a refusal or a sanitized error, a statement timeout), is
delivered at the first multiple of the quantum after the statement arrived, and no earlier than the
minimum. The observable time then says only which quantum the work finished in (docs/timing.md).

Two front ends pad: the wire session (``await padded(...)``: an asyncio sleep, no worker thread
is held) and ``dpsql query`` (:func:`execute_padded`: a plain sleep). ``Engine.execute`` itself
never waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from dpsql.execute.context import Execution
from dpsql.execute.prepared import PrivateStatement
from dpsql.policy.settings import Timing

if TYPE_CHECKING:
    from dpsql.execute.context import Executes
    from dpsql.execute.prepared import Prepared
    from dpsql.result import Result
    from dpsql.session import SessionContext

T = TypeVar("T")
_MS = 1_000_000  # ns


def delivery_delay_ns(elapsed_ns: int, quantum_ms: int, min_ms: int) -> int:
    """How long to wait, after ``elapsed_ns`` of work, before delivering the answer.

    The answer goes out at ``max(min_ms, k * quantum_ms)`` ms after arrival, with ``k >= 1`` the
    smallest integer such that ``k * quantum_ms`` is not before the work ended; with quantum 0
    only the minimum applies. Exact integer arithmetic in nanoseconds.

    >>> delivery_delay_ns(130 * _MS, 50, 0) // _MS       # delivered at 150 ms
    20
    >>> delivery_delay_ns(150 * _MS, 50, 0), delivery_delay_ns(0, 50, 0) // _MS
    (0, 50)
    >>> delivery_delay_ns(130 * _MS, 50, 400) // _MS     # the minimum first
    270
    >>> delivery_delay_ns(130 * _MS, 0, 0), delivery_delay_ns(500 * _MS, 0, 400)
    (0, 0)
    """
    if elapsed_ns < 0 or quantum_ms < 0 or min_ms < 0:
        raise ValueError("elapsed time, quantum and minimum must not be negative")
    target = min_ms * _MS
    if quantum_ms > 0:
        q = quantum_ms * _MS
        k = max(1, -(-elapsed_ns // q))
        target = max(target, k * q)
    return max(0, target - elapsed_ns)


def remaining_s(timing: Timing, started_ns: int, now_ns: int | None = None) -> float:
    """Seconds left to wait for a statement that arrived at ``started_ns`` (monotonic_ns)."""
    now = time.monotonic_ns() if now_ns is None else now_ns
    return delivery_delay_ns(max(0, now - started_ns), timing.quantum_ms, timing.min_ms) / 1e9


def timing_of(engine: object) -> Timing | None:
    """The engine's policy's ``timing:`` when padding is on, else None."""
    timing = getattr(getattr(engine, "policy", None), "timing", None)
    return timing if isinstance(timing, Timing) and timing.enabled else None


def _skip(timing: Timing, result: object) -> bool:
    """A free repeat (``Result.cached``) when ``pad_repeats`` is off."""
    return not timing.pad_repeats and bool(getattr(result, "cached", False))


async def padded(work: Awaitable[T], timing: Timing | None, started_ns: int | None = None) -> T:
    """Await ``work`` and deliver its result or its error at the padded moment, counted from
    ``started_ns`` (monotonic_ns; now when None).

    Cancellation of the awaiting task (shutdown past its grace) is not delayed.
    """
    if timing is None:
        return await work
    started = time.monotonic_ns() if started_ns is None else started_ns
    try:
        result = await work
    except asyncio.CancelledError:
        raise
    except BaseException:
        await asyncio.sleep(remaining_s(timing, started))
        raise
    if not _skip(timing, result):
        await asyncio.sleep(remaining_s(timing, started))
    return result


def run_padded(work: Callable[[], T], timing: Timing | None) -> T:
    """Synchronous :func:`padded` (``time.sleep``) for ``dpsql query`` and scripts."""
    if timing is None:
        return work()
    started = time.monotonic_ns()
    try:
        result = work()
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt):
            time.sleep(remaining_s(timing, started))
        raise
    if not _skip(timing, result):
        time.sleep(remaining_s(timing, started))
    return result


def execute_padded(engine: Executes, prepared: Prepared, session: SessionContext) -> Result:
    """``prepared`` run for ``session`` (a statement without parameters, as ``dpsql query``
    runs them), padded when it reads a private table and padding is on."""
    timing = timing_of(engine) if isinstance(prepared, PrivateStatement) else None
    return run_padded(lambda: engine.run(Execution(prepared, session)), timing)


__all__ = [
    "delivery_delay_ns",
    "execute_padded",
    "padded",
    "remaining_s",
    "run_padded",
    "timing_of",
]

"""dpsql's clock: the one source of the time of day an analysis may read.

An analysis is a function of the statement's text, the policy and the session's zone, except
where it reads the time: the date-range verdict (:mod:`dpsql.sql.date_range_empty`) reads
``current_date`` and ``now()`` as dpsql's clock. What read the clock must not outlive the
reading: the engine installs its clock (:class:`Clock`, injectable: ``Engine(clock=...)``) for
each analysis with :func:`reading`, the analysis reads it only through :func:`now` (one reading
per analysis, however often it asks), and the engine records the UTC day of that reading on
the :class:`~dpsql.execute.prepared.Prepared` it made (``clock_day``): a prepared statement
(cached, or held by a wire session as a named statement or portal) is analyzed again once
dpsql's clock has left that day (:meth:`dpsql.engine.Engine.current`).

>>> from datetime import datetime, UTC
>>> fixed = FixedClock(datetime(2026, 11, 27, 23, 59, tzinfo=UTC))
>>> with reading(fixed) as r:
...     first = now(); fixed.advance(days=1); second = now()
>>> first == second, day(r.at)
(True, datetime.date(2026, 11, 27))
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Where dpsql reads the time of day."""

    def now(self) -> datetime:
        """The current instant (aware, UTC)."""
        ...


class SystemClock:
    """The operating system's clock: the only clock ``dpsql serve`` and the CLI use."""

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK: Clock = SystemClock()


class FixedClock:
    """A clock that stands still until moved (tests, and the engine's benchmarks)."""

    def __init__(self, at: datetime) -> None:
        self.at = at.astimezone(UTC)

    def now(self) -> datetime:
        return self.at

    def advance(self, days: float = 0, seconds: float = 0) -> None:
        self.at += timedelta(days=days, seconds=seconds)


@dataclass
class Reading:
    """One analysis's reading of ``clock``: taken at the first :func:`now`, kept after."""

    clock: Clock
    at: datetime | None = None

    def now(self) -> datetime:
        if self.at is None:
            self.at = self.clock.now()
        return self.at


_READING: ContextVar[Reading | None] = ContextVar("dpsql_clock_reading", default=None)


@contextmanager
def reading(clock: Clock) -> Iterator[Reading]:
    """Read ``clock`` (once, if at all) for what runs inside: a nested reading of the same clock
    is the outer one (a statement analyzed inside another's analysis reads the same time)."""
    outer = _READING.get()
    if outer is not None and outer.clock is clock:
        yield outer
        return
    r = Reading(clock)
    token = _READING.set(r)
    try:
        yield r
    finally:
        _READING.reset(token)


def now() -> datetime:
    """The current instant (aware, UTC) as the running analysis reads it (the system clock
    outside any :func:`reading`: an analyzer called directly, not through an engine)."""
    r = _READING.get()
    return SYSTEM_CLOCK.now() if r is None else r.now()


def day(at: datetime) -> date:
    """The UTC day of ``at``: what a prepared statement that read the clock is valid for."""
    return at.astimezone(UTC).date()

"""Public key domains of ``date_trunc(unit, d)`` when ``d`` has declared bounds.

``date_trunc('month', d)`` over a column whose values the policy bounds to [lo, hi] can only be
one of the months from ``date_trunc('month', lo)`` to ``date_trunc('month', hi)``: those are the
key domain, generated from the policy alone (never from the data), so every month is released,
with noise, and no partition selection (threshold, delta) is needed. Rows outside the bounds
(the policy's promise broken) produce keys outside the domain and are dropped upstream by the
key filter, so they can't add groups.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dpsql.sql.constants import add_months

_MONTHS = {"month": 1, "quarter": 3, "year": 12, "decade": 120, "century": 1200,
           "millennium": 12000}  # fmt: skip
_STEPS = {
    "week": timedelta(weeks=1),
    "day": timedelta(days=1),
    "hour": timedelta(hours=1),
    "minute": timedelta(minutes=1),
    "second": timedelta(seconds=1),
}


def unit_end(start: datetime, unit: str) -> datetime:
    """The start of the next ``unit`` after ``start`` (itself the start of one)."""
    if unit in _MONTHS:
        return add_months(start, _MONTHS[unit])
    return start + _STEPS.get(unit, timedelta(microseconds=1))

"""Budget periods: a renewing budget starts afresh at each period's start (UTC).

>>> from datetime import datetime, timezone
>>> t = datetime(2026, 11, 22, 15, 4, tzinfo=timezone.utc)   # a Sunday
>>> period_start("week", t).isoformat()
'2026-11-16T00:00:00+00:00'
>>> period_end("month", t).isoformat()
'2026-12-01T00:00:00+00:00'
>>> period_end("none", t) is None
True
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PERIODS = ("none", "day", "week", "month", "year")


def period_start(period: str, now: datetime) -> datetime:
    """The start of the period containing ``now`` (a fixed epoch for ``none``)."""
    t = now.astimezone(UTC)
    day = datetime(t.year, t.month, t.day, tzinfo=UTC)
    if period == "none":
        return EPOCH
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    if period == "year":
        return day.replace(month=1, day=1)
    raise ValueError(f"unknown budget period {period!r}; use one of {', '.join(PERIODS)}")


def period_end(period: str, now: datetime) -> datetime | None:
    """When the period containing ``now`` ends (None for ``none``: the budget never renews)."""
    start = period_start(period, now)
    if period == "none":
        return None
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(days=7)
    if period == "month":
        return (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
    return start.replace(year=start.year + 1)

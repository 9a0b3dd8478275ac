"""The session's time zone on the upstream: ``SET TIME ZONE``, the ``TimeZone`` startup parameter.

PostgreSQL computes in the session's ``TimeZone`` everything that turns an instant into a
calendar: ``date_trunc`` of a date or timestamptz, casts of a timestamptz to text, date or
timestamp (and of a date or timestamp to timestamptz), ``EXTRACT``, ``to_char``, ``now()::date``,
and the text form of every timestamptz it sends. dpsql's upstream connections are pinned to UTC
(:mod:`dpsql.upstream.settings`); a statement of a session in another zone runs with that zone
set on the connection it takes (:func:`wanted`, read by the engine's pool and the fast path).

:data:`ZONE` is the zone of the statement the current thread (or task) runs: the engine sets it
around a statement (:func:`statement_zone`), the analysis reads it where it writes the text
PostgreSQL will print for a generated key (:func:`key_texts`: ``date_trunc('month', d)`` of a
January date is ``2025-01-01 00:00:00-05`` in New York, ``2025-01-01 00:00:00+00`` in UTC).

Zone names are PostgreSQL's: a session's zone is the canonical text PostgreSQL gave back when it
was set (``america/new_york`` -> ``America/New_York``, ``-5`` -> ``<-05>+05``), which Python
reads with :mod:`zoneinfo` (the same IANA database) or as a POSIX offset without daylight rules
(:func:`tzinfo_of`). A zone Python can't read (a POSIX rule with daylight saving, such as
``EST5EDT4,M3.2.0,M11.1.0``) has no generated keys (:func:`key_texts` returns None: the keys then
come from the data, as for a column without bounds), never keys in the wrong zone.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC_NAME = "UTC"
ZONE: ContextVar[str] = ContextVar("dpsql_zone", default=UTC_NAME)
_UTC_ALIASES = frozenset({"utc", "etc/utc", "etc/uct", "uct", "zulu", "etc/zulu", "universal",
                          "etc/universal", "gmt", "etc/gmt", "gmt0", "etc/gmt0", "greenwich",
                          "etc/greenwich", "etc/gmt+0", "etc/gmt-0", "gmt+0", "gmt-0"})  # fmt: skip


def is_utc(zone: str) -> bool:
    """Whether ``zone`` is UTC under one of its names (what the upstream is pinned to)."""
    return zone.lower() in _UTC_ALIASES


def session_zone(settings: dict[str, str]) -> str:
    """The session's zone from its settings (a session that never set one, or set one of
    UTC's names: ``UTC``)."""
    zone = settings.get("TimeZone") or UTC_NAME
    return UTC_NAME if is_utc(zone) else zone


def wanted() -> str | None:
    """The zone the current statement must run in, None for UTC (the connections' own)."""
    z = ZONE.get()
    return None if is_utc(z) else z


@contextlib.contextmanager
def statement_zone(zone: str) -> Iterator[None]:
    """Run the statement in this block in ``zone`` (the engine's statements, their analysis)."""
    token = ZONE.set(zone)
    try:
        yield
    finally:
        ZONE.reset(token)


# A POSIX zone without daylight rules: a name (letters, or <...>) and an offset west of UTC
_POSIX = re.compile(r"(?:[A-Za-z]{3,}|<[A-Za-z0-9+-]+>)?([+-]?)(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?")


@lru_cache(maxsize=64)
def tzinfo_of(zone: str) -> tzinfo | None:
    """``zone`` (PostgreSQL's canonical text) as a Python time zone; None when it is a rule
    Python can't read.

    >>> [str(tzinfo_of(z)) for z in ("America/New_York", "<-05>+05", "UTC+3", "GMT-05:30")]
    ['America/New_York', 'UTC-05:00', 'UTC-03:00', 'UTC+05:30']
    >>> tzinfo_of("EST5EDT4,M3.2.0,M11.1.0") is None
    True
    """
    if is_utc(zone):
        return UTC
    with contextlib.suppress(ZoneInfoNotFoundError, ValueError, OSError):
        return ZoneInfo(zone)
    m = _POSIX.fullmatch(zone)
    if m is None:
        return None
    sign, h, mi, s = m.groups()
    west = timedelta(hours=int(h), minutes=int(mi or 0), seconds=int(s or 0))
    return timezone(west if sign == "-" else -west)  # POSIX offsets count west of UTC


def offset_text(off: timedelta | None) -> str:
    """A UTC offset as PostgreSQL prints it after a timestamptz: ``+00``, ``-05``, ``+05:30``.

    >>> [offset_text(timedelta(hours=h)) for h in (0, -5, 5.5)]
    ['+00', '-05', '+05:30']
    """
    secs = int((off or timedelta()).total_seconds())
    sign = "-" if secs < 0 else "+"
    h, rest = divmod(abs(secs), 3600)
    m, s = divmod(rest, 60)
    return f"{sign}{h:02d}" + (f":{m:02d}" if m or s else "") + (f":{s:02d}" if s else "")


def key_texts(wall: datetime, zone: str) -> tuple[str, ...] | None:
    """The texts PostgreSQL prints for a timestamptz ``date_trunc`` result at wall-clock time
    ``wall`` in ``zone`` (no fraction of a second): one, or two for a time that occurs twice
    (the hour a clock turns back: PostgreSQL keeps each row's own offset, ``01:00:00-04`` and
    ``01:00:00-05``); a time the clock skips moves forward, as PostgreSQL's. None when ``zone``
    can't be read. Checked against PostgreSQL 15 around transitions in 11 zones
    (tests/integration/upstream/test_zone_keys.py).

    >>> key_texts(datetime(2025, 1, 1), "America/New_York"), key_texts(datetime(2025, 7, 1), "UTC")
    (('2025-01-01 00:00:00-05',), ('2025-07-01 00:00:00+00',))
    >>> key_texts(datetime(2025, 11, 2, 1), "America/New_York")
    ('2025-11-02 01:00:00-04', '2025-11-02 01:00:00-05')
    >>> key_texts(datetime(2025, 3, 9, 2), "America/New_York")
    ('2025-03-09 03:00:00-04',)
    """
    tz = tzinfo_of(zone)
    if tz is None:
        return None
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return (_text(first),)
    back = first.astimezone(UTC).astimezone(tz)
    if back.replace(tzinfo=None) != wall:  # skipped: the time after the gap
        return (_text(back),)
    return (_text(first), _text(second))


def instants(wall: datetime, tz: tzinfo) -> tuple[datetime, ...]:
    """The instants (naive UTC) a ``date_trunc`` result at wall-clock time ``wall`` is in
    ``tz``: both of a time that occurs twice (:func:`key_texts`' two texts), the one after the
    gap of a time the clock skips.

    >>> ny = ZoneInfo("America/New_York")
    >>> instants(datetime(2025, 11, 2, 1), ny)
    (datetime.datetime(2025, 11, 2, 5, 0), datetime.datetime(2025, 11, 2, 6, 0))
    """
    out = {wall.replace(tzinfo=tz, fold=f).astimezone(UTC).replace(tzinfo=None) for f in (0, 1)}
    first = wall.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall:  # skipped
        out = {first.astimezone(UTC).replace(tzinfo=None)}
    return tuple(sorted(out))


def _text(t: datetime) -> str:
    off = t.utcoffset()
    assert off is not None
    return f"{t.replace(tzinfo=None).isoformat(sep=' ')}{offset_text(off)}"


def wall_clock(instant: datetime, zone: str) -> datetime | None:
    """A naive UTC instant as the naive wall-clock time it is in ``zone`` (None: unreadable)."""
    tz = tzinfo_of(zone)
    if tz is None:
        return None
    return instant.replace(tzinfo=UTC).astimezone(tz).replace(tzinfo=None)

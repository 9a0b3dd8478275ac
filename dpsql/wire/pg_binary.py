"""The binary wire form of a :class:`~dpsql.upstream.loaders.PgText` value: a date, time or interval
that Python's types can't hold, kept as PostgreSQL's text (``infinity``, ``20000-01-01``,
``0044-03-15 00:00:00 BC``, ``24:00:00``, ``178000000 years``), written as PostgreSQL's
``*_send`` functions write it, so a driver that reads results in binary (asyncpg) gets the bytes
it would get from PostgreSQL.

The text is in the output settings dpsql pins upstream (DateStyle ISO, TimeZone UTC,
IntervalStyle postgres: :data:`dpsql.upstream.settings.OUTPUT_SETTINGS`). Dates count days from
2000-01-01 (PostgreSQL's ``date2j`` on the proleptic Gregorian calendar, year 0 = 1 BC),
timestamps microseconds from 2000-01-01 00:00 (UTC for timestamptz); ``infinity`` is the
largest integer of the type, ``-infinity`` the smallest.
"""

from __future__ import annotations

import re
import struct

from dpsql.errors import InternalError

_POSTGRES_EPOCH_JDATE = 2451545  # date2j(2000, 1, 1)
_USECS_PER_DAY = 86_400_000_000
_DATE = re.compile(r"(\d+)-(\d\d)-(\d\d)")
_TIME = re.compile(r"(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_ZONE = re.compile(r"([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def _date2j(year: int, month: int, day: int) -> int:
    """PostgreSQL's ``date2j``: the Julian day of a proleptic Gregorian date (year 0 = 1 BC).

    >>> _date2j(2000, 1, 1), _date2j(-4713, 11, 24)
    (2451545, 0)
    """
    if month > 2:
        month, year = month + 1, year + 4800
    else:
        month, year = month + 13, year + 4799
    century = year // 100
    return year * 365 - 32167 + year // 4 - century + century // 4 + 7834 * month // 256 + day


def _days(text: str, bc: bool = False) -> tuple[int, str]:
    """Days since 2000-01-01 of the date at the start of ``text`` (of year ``N BC`` when
    ``bc``), and what follows it."""
    m = _DATE.match(text)
    if m is None:
        raise ValueError(text)
    year = 1 - int(m[1]) if bc else int(m[1])
    return _date2j(year, int(m[2]), int(m[3])) - _POSTGRES_EPOCH_JDATE, text[m.end() :]


def _era(text: str) -> tuple[str, bool]:
    """``text`` without a trailing `` BC``, and whether it had one."""
    return (text[:-3], True) if text.endswith(" BC") else (text, False)


def _usecs(text: str) -> tuple[int, str]:
    """Microseconds of the ``HH:MM:SS[.ffffff]`` at the start of ``text``, and what follows."""
    m = _TIME.match(text)
    if m is None:
        raise ValueError(text)
    frac = int((m[4] or "").ljust(6, "0"))
    secs = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
    return secs * 1_000_000 + frac, text[m.end() :]


def _zone(text: str) -> int:
    """A UTC offset ``+HH[:MM[:SS]]`` in seconds east of Greenwich."""
    m = _ZONE.fullmatch(text)
    if m is None:
        raise ValueError(text)
    secs = int(m[2]) * 3600 + int(m[3] or 0) * 60 + int(m[4] or 0)
    return -secs if m[1] == "-" else secs


def _infinite(text: str, lo_hi: tuple[int, int]) -> int | None:
    return {"infinity": lo_hi[1], "-infinity": lo_hi[0]}.get(text)


def date_binary(text: str) -> bytes:
    """A date as ``date_send``: days since 2000-01-01.

    >>> date_binary("infinity").hex(), date_binary("2000-01-02").hex()
    ('7fffffff', '00000001')
    >>> [struct.unpack("!i", date_binary(t))[0] for t in ("20000-01-01", "0001-12-31 BC")]
    [6574365, -730120]
    """
    inf = _infinite(text, _INT32)
    if inf is not None:
        return struct.pack("!i", inf)
    days, rest = _days(*_era(text))
    if rest:
        raise ValueError(text)
    return struct.pack("!i", days)


def timestamp_binary(text: str, with_zone: bool) -> bytes:
    """A timestamp (``with_zone``: timestamptz) as ``timestamp_send``: microseconds since
    2000-01-01 00:00 (UTC).

    >>> struct.unpack("!q", timestamp_binary("2000-01-01 00:00:01.5", False))[0]
    1500000
    >>> struct.unpack("!q", timestamp_binary("2000-01-01 05:30:00+05:30", True))[0]
    0
    >>> timestamp_binary("-infinity", True).hex()
    '8000000000000000'
    """
    inf = _infinite(text, _INT64)
    if inf is not None:
        return struct.pack("!q", inf)
    days, rest = _days(*_era(text))
    if not rest.startswith(" "):
        raise ValueError(text)
    usecs, rest = _usecs(rest[1:])
    offset = _zone(rest) if with_zone else 0
    if rest and not with_zone:
        raise ValueError(text)
    return struct.pack("!q", days * _USECS_PER_DAY + usecs - offset * 1_000_000)


def time_binary(text: str, with_zone: bool) -> bytes:
    """A time (``with_zone``: timetz) as ``time_send`` / ``timetz_send``.

    >>> struct.unpack("!q", time_binary("24:00:00", False))[0] == 86_400_000_000
    True
    >>> struct.unpack("!qi", time_binary("24:00:00+05:30", True))[1]
    -19800
    """
    usecs, rest = _usecs(text)
    if not with_zone:
        if rest:
            raise ValueError(text)
        return struct.pack("!q", usecs)
    return struct.pack("!qi", usecs, -_zone(rest))  # PostgreSQL stores seconds west


_UNITS = {"year": 12, "years": 12, "mon": 1, "mons": 1}


def interval_binary(text: str) -> bytes:
    """An interval in ``postgres`` style (``1 year 2 mons -3 days +04:05:06.5``) as
    PostgreSQL's ``interval_send``: microseconds, days, months.

    >>> struct.unpack("!qii", interval_binary("178000000 years"))
    (0, 0, 2136000000)
    >>> struct.unpack("!qii", interval_binary("-1 years +2 mons -3 days -04:05:06.5"))
    (-14706500000, -3, -10)
    >>> struct.unpack("!qii", interval_binary("2562047788:00:54.775807"))
    (9223372036854775807, 0, 0)
    """
    months = days = usecs = 0
    parts = text.split()
    i = 0
    while i < len(parts):
        part = parts[i]
        if ":" in part:
            sign = -1 if part.startswith("-") else 1
            got, rest = _usecs(part.lstrip("+-"))
            if rest:
                raise ValueError(text)
            usecs += sign * got
            i += 1
            continue
        n, unit = int(part), parts[i + 1]
        if unit in _UNITS:
            months += n * _UNITS[unit]
        elif unit in ("day", "days"):
            days += n
        else:
            raise ValueError(text)
        i += 2
    return struct.pack("!qii", usecs, days, months)


def special_binary(oid: int, text: str) -> bytes:
    """The binary form of PostgreSQL's text ``text`` of a value of type ``oid``.

    Raises:
        InternalError: a type or a text this module does not read (a bug to report).
    """
    try:
        if oid == 1082:
            return date_binary(text)
        if oid in (1114, 1184):
            return timestamp_binary(text, oid == 1184)
        if oid in (1083, 1266):
            return time_binary(text, oid == 1266)
        if oid == 1186:
            return interval_binary(text)
    except (ValueError, IndexError, struct.error):
        pass
    raise InternalError(
        f"the value {text!r} of type oid {oid} cannot be sent in binary format",
        hint="request text format for this column",
    )

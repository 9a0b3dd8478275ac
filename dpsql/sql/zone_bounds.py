"""A WHERE bound on a date or time column, read as PostgreSQL compares it in the session's zone.

:mod:`dpsql.sql.time_keys` narrows a key's domain (``date_trunc('day', tz)``, ``date(tz)``,
Metabase's weeks) by the statement's own range on its column; that range is a span of wall-clock
values: a ``timestamptz`` column's instants as the session's clock shows them. The other side of
``tz >= X`` is one of two things, and PostgreSQL reads them differently:

* a wall-clock value: ``'2020-03-01'``, ``TIMESTAMP '2020-03-01 10:00'``, ``to_date(...)``,
  ``to_timestamp(text, format)`` (read in the session's zone): the span's value as it is;
* an instant: ``to_timestamp(1583020800)`` (Grafana's ``$__timeFilter``), a string with a UTC
  offset (``'2020-03-01 00:00:00+05:30'``: PgJDBC's ``setTimestamp`` sends the JVM's offset),
  ``TIMESTAMPTZ '...'`` and ``CAST('...' AS timestamptz)`` with an offset (a driver's timestamptz
  parameter, bound by :mod:`dpsql.sql.bind` as such a cast): the clock time it is in the
  session's zone. Read as a wall clock (as it was, for ``to_timestamp(n)``) a day at the edge of
  a Grafana range in New York or Kolkata was no key while PostgreSQL had rows in it (its rows
  left out of the answer); strings and casts with an offset narrowed nothing (a month's filter
  released every day of the declared year, each a noisy value over no rows).

Except that a string compared with a ``timestamp`` or ``date`` column takes the column's type,
and PostgreSQL drops its offset (``'2020-03-01 00:00-05'::timestamp`` is ``2020-03-01 00:00``).

An instant near a clock change has no single wall-clock time that splits the rows as
PostgreSQL's comparison does (a repeated hour; a ``timestamp`` column is compared after
PostgreSQL reads it in the zone, where a skipped hour runs backwards): the bound is moved outward
by the clock's change within a day of it, so the span holds every row PostgreSQL keeps (a key
more, never a key less).

>>> from zoneinfo import ZoneInfo
>>> import sqlglot
>>> ny = ZoneInfo("America/New_York")
>>> def read(sql, side="lo", kind="tstz"):
...     return read_point(sqlglot.parse_one(sql, read="postgres"), side, kind, ny)
>>> read("to_timestamp(1583020800)"), read("'2020-03-01 00:00:00+05:30'")
(datetime.datetime(2020, 2, 29, 19, 0), datetime.datetime(2020, 2, 29, 13, 30))
>>> read("'2020-03-01 00:00:00+05:30'", kind="ts"), read("'2020-03-01'")
(datetime.datetime(2020, 3, 1, 0, 0), datetime.datetime(2020, 3, 1, 0, 0))
>>> read("TIMESTAMPTZ '2020-03-08 07:30:00+00'", "lo"), read("TIMESTAMPTZ '2020-03-08 07:30:00+00'", "hi")
(datetime.datetime(2020, 3, 8, 2, 30), datetime.datetime(2020, 3, 8, 4, 30))
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from fractions import Fraction

from sqlglot import exp

from dpsql.sql.constants import as_point, constant, parse_timestamp
from dpsql.sql.key_values import NumRange, Span

# a timestamp with a UTC offset: its date and time as parse_timestamp reads them, then Z or
# +-HH[[:]MM[[:]SS]]
_OFFSET = re.compile(r"(.*\d)\s*(?:([zZ])|([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?)\s*$")
_DAY = timedelta(days=1)
_EPOCH = datetime(1970, 1, 1)


def parse_instant(text: str) -> datetime | None:
    """A timestamp written with a UTC offset as an aware datetime; None without one (or when
    its date and time are not ``YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]``).

    >>> parse_instant("2020-03-01T00:00:00+13:45"), parse_instant("2020-03-01 10:00")
    (datetime.datetime(2020, 3, 1, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(seconds=49500))), None)
    """
    m = _OFFSET.match(text)
    if m is None or ":" not in m.group(1) and m.group(2) is None and " " not in m.group(1):
        return None  # '2020-03-01' alone: its '-01' is the day, not an offset
    wall = parse_timestamp(m.group(1))
    if wall is None:
        return None
    if m.group(2):
        return wall.replace(tzinfo=UTC)
    sign = -1 if m.group(3) == "-" else 1
    off = timedelta(
        hours=int(m.group(4)), minutes=int(m.group(5) or 0), seconds=int(m.group(6) or 0)
    )
    if off >= _DAY:
        return None
    return wall.replace(tzinfo=timezone(sign * off))


def read_point(value: exp.Expr, side: str, kind: str, zone: tzinfo | None) -> datetime | None:
    """The other side ``value`` of a bound on a ``kind`` column (``date``, ``ts``, ``tstz``) as
    the span's value (the module's docstring), moved outward on ``side`` (``lo``, ``hi``) near
    a clock change; None when it is not read (the bound then narrows nothing)."""
    while isinstance(value, exp.Paren):
        value = value.this
    instant: datetime | None = None
    if isinstance(value, exp.UnixToTime):  # to_timestamp(seconds): an instant, naive UTC
        t = constant(value)
        instant = t.replace(tzinfo=UTC) if isinstance(t, datetime) else None
        if instant is None:
            return None
    elif value.find(exp.UnixToTime) is not None:
        return None  # arithmetic on an instant: not read
    else:
        got = _string(value)
        aware = parse_instant(got[0]) if got is not None else None
        if aware is not None and got is not None:
            if got[1] == "ts" or (got[1] is None and kind != "tstz"):
                return aware.replace(tzinfo=None)  # the column's or the cast's type: no offset
            instant = aware
    if instant is None:
        v = constant(value)
        return as_point(parse_timestamp(v) if isinstance(v, str) else v)
    if zone is None:
        return None
    wall = instant.astimezone(zone).replace(tzinfo=None)
    here = instant.astimezone(zone).utcoffset()
    near = [(instant + d).astimezone(zone).utcoffset() for d in (-_DAY, _DAY)]
    assert here is not None
    change = max(abs(o - here) for o in near if o is not None)
    return wall - change if side == "lo" else wall + change


def _string(value: exp.Expr) -> tuple[str, str | None] | None:
    """The string of ``'...'`` (None: no type of its own) or of its cast to ``timestamptz`` or
    ``timestamp`` (``tstz``, ``ts``); else None."""
    cast: str | None = None
    if isinstance(value, exp.Cast):
        to = value.to.this
        if to not in (exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMP):
            return None
        cast = "tstz" if to == exp.DataType.Type.TIMESTAMPTZ else "ts"
        value = value.this
    if isinstance(value, exp.Literal) and value.is_string:
        return str(value.this), cast
    return None


def epoch_range(span: Span, zone: tzinfo | None) -> NumRange | None:
    """``extract(epoch from x)`` over a ``timestamp`` or ``timestamptz`` span: the seconds since
    1970-01-01 of its ends, to the microsecond (``numeric`` of scale 6). A timestamp's wall clock
    is read in no zone (PostgreSQL's epoch of a timestamp is nominal); a timestamptz's ends are
    the instants they are in ``zone``, outward: the earlier reading of the low end and the later
    of the high end where the clock turns back over them, either side of a gap it skips. None
    for a zone Python can't read.

    >>> from zoneinfo import ZoneInfo
    >>> s = Span("tstz", datetime(2020, 3, 8, 2, 30), datetime(2020, 11, 1, 1, 30), "tz")
    >>> r = epoch_range(s, ZoneInfo("America/New_York"))
    >>> datetime.fromtimestamp(float(r.lo), UTC), datetime.fromtimestamp(float(r.hi), UTC)
    (datetime.datetime(2020, 3, 8, 6, 30, tzinfo=datetime.timezone.utc), \
datetime.datetime(2020, 11, 1, 6, 30, tzinfo=datetime.timezone.utc))
    >>> epoch_range(Span("ts", datetime(2020, 3, 1), datetime(2020, 3, 1, 6), "ts"), None).lo
    Fraction(1583020800, 1)
    """
    lo, hi = span.lo, span.hi
    if span.kind == "tstz":
        if zone is None:
            return None
        lo = min(_instant(lo, zone, fold) for fold in (0, 1))
        hi = max(_instant(hi, zone, fold) for fold in (0, 1))

    def seconds(t: datetime) -> Fraction:
        return Fraction((t - _EPOCH) // timedelta(microseconds=1), 10**6)

    return NumRange(seconds(lo), seconds(hi), False, span.name, scale=6)


def _instant(wall: datetime, zone: tzinfo, fold: int) -> datetime:
    return wall.replace(tzinfo=zone, fold=fold).astimezone(UTC).replace(tzinfo=None)

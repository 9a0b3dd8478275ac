"""The date and time expressions of a derived key (:mod:`dpsql.sql.derived_keys`):
``date_trunc``, ``EXTRACT`` / ``date_part``, ``to_char`` with the date patterns, and the range of
a date or timestamp column they start from (the policy's bounds or the statement's own range), in
the session's time zone, as PostgreSQL computes and prints them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta, tzinfo
from fractions import Fraction
from typing import Literal
from zoneinfo import ZoneInfo

from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.constants import add_months, as_point, interval_delta
from dpsql.sql.date_domain import MAX_KEYS, tightest, trunc, unit_end, where_bounds
from dpsql.sql.key_values import (
    Domain,
    Got,
    Kind,
    NumRange,
    Span,
    TooMany,
    as_datetime,
    midnight,
    sorted_values,
    union,
)
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.temporal import int_literal
from dpsql.sql.time_shift import by_whole_days
from dpsql.sql.to_char import pg_format, render, to_char_pattern
from dpsql.sql.zone_bounds import epoch_range, read_point
from dpsql.upstream.zone import instants

_EPOCH = datetime(1970, 1, 1)
MAX_DAYS = 40_000  # about 110 years of days enumerated for EXTRACT / to_char

# EXTRACT fields with whole-number values (PostgreSQL prints them without a fraction)
_YEARLY = {"year", "isoyear", "decade", "century", "millennium"}
_CYCLIC = {"month": range(1, 13), "quarter": range(1, 5), "day": range(1, 32),
           "dow": range(0, 7), "isodow": range(1, 8), "doy": range(1, 367),
           "week": range(1, 54)}  # fmt: skip

_UNITS = {"second", "minute", "hour", "day", "week", "month", "quarter", "year", "decade",
          "century", "millennium"}  # fmt: skip


class TimeKeys:
    """The date and time half of :class:`dpsql.sql.derived_keys._Deriver` (which sets these
    attributes and derives the expressions' arguments)."""

    column: Callable[[exp.Column], Column | None]
    where: exp.Expr | None
    zone: tzinfo | None  # None: a zone Python can't read
    point: Domain | None = None  # the one date :meth:`shifted` derives a key for

    def derive(self, node: exp.Expr) -> Got:
        raise NotImplementedError

    def _span(self, node: exp.Column, col: Column) -> Span | None:
        declared = col.bounds if col.bounds is not None else (None, None)
        lo, hi = as_point(declared[0]), as_point(declared[1])
        kind: Literal["date", "ts", "tstz"]
        if col.family == "date":
            kind = "date"
        elif col.type == "timestamp":
            kind = "ts"
        else:  # timestamptz bounds are instants (naive: UTC): as this zone's wall clock
            kind = "tstz"
            utc = ZoneInfo("UTC")
            if self.zone is None:
                return None
            if lo is not None:
                lo = lo.replace(tzinfo=utc).astimezone(self.zone).replace(tzinfo=None)
            if hi is not None:
                hi = hi.replace(tzinfo=utc).astimezone(self.zone).replace(tzinfo=None)

        def read(side: str, value: exp.Expr) -> datetime | None:
            return read_point(value, side, kind, self.zone)

        wlo, whi = where_bounds(self.where, node.sql(POSTGRES), read)
        if kind == "date":  # d::date, date(d) of a date column: d itself
            as_date = exp.cast(node.copy(), "date").sql(POSTGRES)
            clo, chi = where_bounds(self.where, as_date, read)
            sides = (("lo", wlo), ("lo", clo), ("hi", whi), ("hi", chi))
            wlo, whi = tightest([(side, *b) for side, b in sides if b is not None])
        if wlo is not None and lo is None:
            lo = wlo[0]
        if whi is not None and hi is None:
            hi = whi[0]
        if lo is None or hi is None:
            return None
        if kind == "date":  # whole days (a constant compared with a date may be cast to one)
            lo, hi = midnight(lo), midnight(hi)
            if wlo is not None:
                w = midnight(wlo[0]) + (timedelta(days=1) if wlo[1] else timedelta())
                lo = max(lo, w)
            if whi is not None:
                at_midnight = whi[0] == midnight(whi[0])
                w = midnight(whi[0]) - (
                    timedelta(days=1) if whi[1] and at_midnight else timedelta()
                )
                hi = min(hi, w)
        else:
            if wlo is not None:
                lo = max(lo, wlo[0])
            if whi is not None:
                hi = min(hi, whi[0] - (timedelta(microseconds=1) if whi[1] else timedelta()))
        return Span(kind, lo, hi, node.name)

    def days(self, s: Span) -> Domain:
        n = (s.hi - s.lo).days + 1
        if n > MAX_KEYS:
            raise TooMany(f"{s.name} spans {n:,} days, above the limit of {MAX_KEYS:,}")
        return Domain("date", tuple((s.lo + timedelta(days=i)).date() for i in range(max(n, 0))))

    def _trunc(self, node: exp.TimestampTrunc | exp.DateTrunc) -> Domain | None:
        if node.args.get("zone"):
            return None
        unit_node = node.args.get("unit")
        unit = str(unit_node.this).lower() if isinstance(unit_node, (exp.Var, exp.Literal)) else ""
        if unit not in _UNITS:
            return None
        got = self.derive(node.this)
        if isinstance(got, Span):
            kind: Kind = "ts" if got.kind == "ts" else "tstz"
            keys: list[datetime] = []
            t = trunc(got.lo, unit)
            while t <= got.hi:
                if len(keys) >= MAX_KEYS:
                    raise TooMany(
                        f"the bounds of {got.name} hold more than {MAX_KEYS:,} {unit}s, the limit"
                    )
                keys.append(t)
                t = unit_end(t, unit)
            return Domain(kind, tuple(keys))
        if isinstance(got, Domain) and got.kind in ("date", "ts", "tstz"):
            out = sorted_values({trunc(as_datetime(v), unit) for v in got.values})
            return Domain("ts" if got.kind == "ts" else "tstz", out, got.null)
        return None

    def shifted(self, expr: exp.Expr) -> Got:
        """The domain of a key with a shift (:mod:`dpsql.sql.time_shift`: ``d + INTERVAL '1
        day'``, Tableau's ``d - EXTRACT(dow FROM d) * INTERVAL '1 DAY'``), computed day by day
        over the range of its one date column: its parts read the same row's date, so their
        values pair up; the rows outside the bounds read NULL there (the rewrite's guard),
        which is no key. A timestamp column's too, when the key moves it by whole days and
        reads it through a day or longer (:func:`dpsql.sql.time_shift.by_whole_days`: Metabase's
        week of a timestamp), and the key is the same at each day's first and last microsecond;
        else None (a time of day moves the key: its groups come from the data), or without a
        range."""
        cols = {c.sql(POSTGRES): c for c in expr.find_all(exp.Column)}
        if len(cols) != 1:
            return None
        (node,) = cols.values()
        col = self.column(node)
        if col is None or col.keys is not None or col.identifier:
            return None
        if col.family == "timestamp" and not by_whole_days(expr):
            return None
        span = self._span(node, col) if col.family in ("date", "timestamp") else None
        if span is None:
            return None
        out: Domain | None = None
        day_span = Span("date", midnight(span.lo), midnight(span.hi), span.name)
        for day in self.days(day_span).values:
            if span.kind == "date":
                got = self._at(expr, Domain("date", (day,)))
            else:  # the day's first and last microsecond inside the span: the same key
                first = max(midnight(as_datetime(day)), span.lo)
                last = min(
                    first.replace(hour=23, minute=59, second=59, microsecond=999999), span.hi
                )
                got = self._at(expr, Domain(span.kind, (first,)))
                if got != self._at(expr, Domain(span.kind, (last,))):
                    return None  # a time of day moves the key: its groups come from the data
            if not isinstance(got, Domain):
                return None
            out = got if out is None else union(out, got)
            if out is None:
                return None
        if out is None:
            return None
        return Domain(out.kind, sorted_values(out.values), out.null, out.scale)

    def _at(self, expr: exp.Expr, point: Domain) -> Got:
        """``expr``'s value (a Domain of one value) where its column is ``point``."""
        self.point = point
        try:
            return self.derive(expr)
        finally:
            self.point = None

    def _shift(self, node: exp.Add | exp.Sub) -> Domain | None:
        """A date or time (one value: :meth:`shifted`) plus or minus its offsets, typed as
        PostgreSQL types it: date +- integer is a date, date +- interval a timestamp."""
        base, off = node.this, node.expression
        got = self.derive(base)
        if not isinstance(got, Domain) or got.kind not in ("date", "ts", "tstz"):
            if isinstance(node, exp.Sub):
                return None
            base, off = off, base
            got = self.derive(base)
            if not isinstance(got, Domain) or got.kind not in ("date", "ts", "tstz"):
                return None
        steps = self._offsets(off, got.kind == "date")
        if steps is None:
            return None
        sign = -1 if isinstance(node, exp.Sub) else 1
        whole_days = all(isinstance(x, int) for x in steps)
        kind: Kind = "date" if got.kind == "date" and whole_days else (
            "tstz" if got.kind == "tstz" else "ts")  # fmt: skip
        vals: set[datetime] = set()
        for v in got.values:
            t = as_datetime(v)
            for x in steps:
                months, rest = (0, timedelta(days=x)) if isinstance(x, int) else x
                if kind == "tstz" and rest % timedelta(days=1):
                    return None  # an hour across a clock change: not wall-clock arithmetic
                try:
                    vals.add(add_months(t, sign * months) + sign * rest)
                except (ValueError, OverflowError):
                    return None
        if kind == "date":
            return Domain("date", sorted_values({v.date() for v in vals}), got.null)
        return Domain(kind, sorted_values(vals), got.null)

    def _offsets(self, x: exp.Expr, dated: bool) -> list[int | tuple[int, timedelta]] | None:
        """The values offset ``x`` takes: whole days (an integer added to a date) or (months,
        the rest) of intervals; None for any other offset."""
        while isinstance(x, exp.Paren):
            x = x.this
        if isinstance(x, exp.Neg):
            inner = self._offsets(x.this, dated)
            if inner is None:
                return None
            return [-v if isinstance(v, int) else (-v[0], -v[1]) for v in inner]
        if isinstance(x, exp.Interval):
            delta = interval_delta(x)
            return None if delta is None else [delta]
        days = int_literal(x)
        if days is not None:
            return [days] if dated else None
        if isinstance(x, exp.Mul):
            a, b = x.this, x.expression
            while isinstance(a, exp.Paren):
                a = a.this
            iv, num = (a, b) if isinstance(a, exp.Interval) else (b, a)
            while isinstance(iv, exp.Paren):
                iv = iv.this
            delta = interval_delta(iv) if isinstance(iv, exp.Interval) else None
            sign = 1
            while isinstance(num, (exp.Neg, exp.Paren)):
                sign = -sign if isinstance(num, exp.Neg) else sign
                num = num.this
            got = self.derive(num)
            if delta is None or not isinstance(got, Domain) or got.kind != "int":
                return None
            ks = [sign * int(k) for k in got.values]  # type: ignore[call-overload]
            return [(delta[0] * k, delta[1] * k) for k in ks]
        return None

    def _extract(self, node: exp.Extract) -> Domain | NumRange | None:
        field = str(node.this.this if isinstance(node.this, exp.Var) else node.this.name).lower()
        got = self.derive(node.expression)
        if field == "epoch":
            return self._epoch(got)
        if isinstance(got, Domain) and got.kind in ("date", "ts", "tstz"):
            if field not in _YEARLY and field not in _CYCLIC:
                return None
            return Domain(
                "int", sorted_values({_field(as_datetime(v), field) for v in got.values}), got.null
            )
        if not isinstance(got, Span):
            return None
        if field in _YEARLY:
            return Domain("int", tuple(range(_field(got.lo, field), _field(got.hi, field) + 1)))
        if field in ("hour", "minute"):
            if got.kind == "date":
                return None  # PostgreSQL: unit not supported for type date
            return self._clock(got, field)
        if field not in _CYCLIC:
            return None
        ndays = (got.hi.date() - got.lo.date()).days + 1
        if ndays > MAX_DAYS:  # every value of the cycle
            return Domain("int", tuple(_CYCLIC[field]))
        seen = {_field(datetime.combine(d, datetime.min.time()), field)
                for d in _dates(got.lo.date(), ndays)}  # fmt: skip
        return Domain("int", sorted_values(seen))

    def _epoch(self, got: Got) -> Domain | NumRange | None:
        """``EXTRACT(epoch FROM d)`` of a date: its midnight's seconds since 1970-01-01, a whole
        number in any zone (Grafana's ``$__timeEpoch(d)``, inside ``$__timeGroup(d, '1d')``);
        of a timestamp(tz) key (``date_trunc('day', d)``) its seconds to the microsecond, a
        timestamptz's of each instant its wall clock is (:func:`dpsql.upstream.zone.instants`);
        of a timestamp(tz) column its range (:func:`~dpsql.sql.zone_bounds.epoch_range`: Grafana's
        ``$__timeGroup(ts, '5m')``, :mod:`dpsql.sql.quotient_keys`)."""
        if isinstance(got, Domain) and got.kind in ("ts", "tstz"):
            walls = [as_datetime(v) for v in got.values]
            if got.kind == "tstz":
                if self.zone is None:
                    return None
                walls = [t for v in walls for t in instants(v, self.zone)]
            us = {Fraction((t - _EPOCH) // timedelta(microseconds=1), 10**6) for t in walls}
            return Domain("num", sorted_values(us), got.null, 6)
        if isinstance(got, Span) and got.kind != "date":  # its range, to the microsecond
            return epoch_range(got, self.zone)
        if isinstance(got, Span):
            n = (got.hi.date() - got.lo.date()).days + 1
            if n > MAX_DAYS:
                return None
            got = Domain("date", tuple(_dates(got.lo.date(), n)))
        if not isinstance(got, Domain) or got.kind != "date":
            return None
        secs = {(as_datetime(v) - _EPOCH).days * 86400 for v in got.values}
        return Domain("int", sorted_values(secs), got.null)

    def _clock(self, s: Span, field: str) -> Domain:
        whole = range(24) if field == "hour" else range(60)
        step = timedelta(hours=1) if field == "hour" else timedelta(minutes=1)
        if s.hi - s.lo >= timedelta(days=1) or (field == "minute" and s.hi - s.lo >= step * 60):
            return Domain("int", tuple(whole))
        seen: set[int] = set()
        t = (
            s.lo.replace(minute=0, second=0, microsecond=0)
            if field == "hour"
            else s.lo.replace(second=0, microsecond=0)
        )
        while t <= s.hi:
            seen.add(t.hour if field == "hour" else t.minute)
            t += step
        return Domain("int", sorted_values(seen))

    def _to_char(self, node: exp.TimeToStr) -> Domain | None:
        fmt = pg_format(node)
        if fmt is None:
            return None
        pattern = to_char_pattern(fmt)
        if pattern is None:
            return None
        got = self.derive(node.this)
        if isinstance(got, Span):
            ndays = (got.hi.date() - got.lo.date()).days + 1
            if ndays > MAX_DAYS:
                raise TooMany(f"{got.name} spans {ndays:,} days, above the {MAX_DAYS:,} that "
                              "to_char's keys are computed over")  # fmt: skip
            days: Iterable[date] = _dates(got.lo.date(), ndays)
            null = False
        elif isinstance(got, Domain) and got.kind in ("date", "ts", "tstz"):
            days = (as_datetime(v).date() for v in got.values)
            null = got.null
        else:
            return None
        out: dict[str, None] = {}
        for d in days:
            out[render(pattern, d)] = None
            if len(out) > MAX_KEYS:
                raise TooMany(f"they are more than {MAX_KEYS:,}, the limit")
        return Domain("text", tuple(out), null)


def _dates(first: date, n: int) -> Iterable[date]:
    return (first + timedelta(days=i) for i in range(max(n, 0)))


def _field(t: datetime, field: str) -> int:
    """PostgreSQL's EXTRACT(field FROM t) for the whole-number fields (years >= 1)."""
    iso = t.isocalendar()
    return {
        "year": lambda: t.year,
        "isoyear": lambda: iso.year,
        "decade": lambda: t.year // 10,
        "century": lambda: (t.year + 99) // 100,
        "millennium": lambda: (t.year + 999) // 1000,
        "month": lambda: t.month,
        "quarter": lambda: (t.month - 1) // 3 + 1,
        "day": lambda: t.day,
        "dow": lambda: iso.weekday % 7,
        "isodow": lambda: iso.weekday,
        "doy": lambda: t.timetuple().tm_yday,
        "week": lambda: iso.week,
    }[field]()

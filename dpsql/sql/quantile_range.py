"""The grid range of a quantile, MIN or MAX over a column the statement's WHERE clause bounds.

The selection grid (:mod:`dpsql.sql.analyze_quantiles`) spans the argument's public range, and
every empty bucket beyond the true extreme has the extreme's rank, so MIN and MAX answer about
uniformly over the empty stretch up to the declared bound (newcomer23 #20: ``MIN(purchased_at)
... WHERE purchased_at >= '2025-06-01'`` answered 2025-03-20). No row the aggregate reads lies
outside the range the WHERE clause's top-level ANDed constant bounds put on the aggregate's own
column, so the grid spans the declared bounds intersected with that range. The bounds are read
by the same code as a date key's domain (:func:`dpsql.sql.date_domain.range_parts`, the session's
time zone as :mod:`dpsql.sql.time_keys` reads it): a function of the statement's text, the policy
and the session's zone, nothing about the data. Rounding is outward (a superset is only a wider
grid); an empty intersection, or a constant left, keeps the declared range.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.date_domain import number_bounds
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.time_keys import TimeKeys
from dpsql.upstream.zone import tzinfo_of

_EPOCH = datetime(1970, 1, 1)


def number_range(
    where: exp.Expr | None, arg: exp.Expr, lo: Fraction, hi: Fraction, integral: bool
) -> tuple[Fraction, Fraction]:
    """[lo, hi] narrowed by the WHERE clause's constant bounds on ``arg`` (qualified as in it);
    an integer column's strict bound is the next integer in."""
    if where is None or not isinstance(arg, exp.Column):
        return lo, hi
    wlo, whi = number_bounds(where, arg.sql(POSTGRES))
    new_lo, new_hi = lo, hi
    if wlo is not None:
        v, strict = wlo
        w = Fraction(math.floor(v) + 1 if strict else math.ceil(v)) if integral else v
        new_lo = max(lo, w)
    if whi is not None:
        v, strict = whi
        w = Fraction(math.ceil(v) - 1 if strict else math.floor(v)) if integral else v
        new_hi = min(hi, w)
    if new_lo > new_hi or (new_lo == new_hi and not integral):
        return lo, hi
    return new_lo, new_hi


def temporal_range(
    where: exp.Expr | None, arg: exp.Column, col: Column, zone: str
) -> tuple[Fraction, Fraction]:
    """A date (epoch days) or timestamp (epoch seconds) column's declared [col.lo, col.hi]
    narrowed by the WHERE clause's constant bounds on it, as :class:`TimeKeys` reads them."""
    lo, hi = col.lo, col.hi
    if where is None:
        return lo, hi
    keys = TimeKeys()
    keys.column = lambda c: col
    keys.where = where
    keys.zone = tzinfo_of(zone)
    span = keys._span(arg, col)
    if span is None:
        return lo, hi
    if span.kind == "date":
        new_lo = Fraction((span.lo - _EPOCH).days)
        new_hi = Fraction((span.hi - _EPOCH).days)
    else:
        a, b = span.lo, span.hi
        if span.kind == "tstz":  # wall clock in the session's zone: both readings of a fold
            assert keys.zone is not None  # (_span gives None without a zone it can read)
            a = min(_utc(a.replace(tzinfo=keys.zone, fold=f)) for f in (0, 1))
            b = max(_utc(b.replace(tzinfo=keys.zone, fold=f)) for f in (0, 1))
        new_lo = Fraction(math.floor(_seconds(a)))
        new_hi = Fraction(math.ceil(_seconds(b)))
    new_lo, new_hi = max(lo, new_lo), min(hi, new_hi)
    if new_lo > new_hi:
        return lo, hi
    return new_lo, new_hi


def _utc(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None)


def _seconds(t: datetime) -> Fraction:
    return Fraction((t - _EPOCH) // timedelta(microseconds=1), 10**6)

"""A WHERE clause whose range on a date or timestamp column misses the column's declared range.

The policy's ``bounds`` of a date or timestamp column are the values it takes, as a ``keys:``
list is a text column's (docs/policy.md, *Rows outside the declared bounds*): its ``date_trunc``
keys are the periods of that range, and MIN, MAX and the percentiles answer inside it. So a
statement without GROUP BY whose top-level ANDed range on such a column (``>``, ``>=``, ``<``,
``<=``, ``=``, ``BETWEEN`` with a constant, read as the date key domains read it:
:meth:`dpsql.sql.time_keys.TimeKeys._span`) leaves nothing of the declared range is the
aggregate of no rows, answered free as PostgreSQL answers it over no rows (newcomer23 #13:
``WHERE purchased_at >= current_date - INTERVAL '30 days'`` a year after the declared range ends
answered ``217 [0, NULL]`` and was charged), as a WHERE clause that leaves no declared key is
(:func:`dpsql.sql.group_domain.no_row_left`). A row of the column is NULL-free here: each such
condition is false where the column is NULL.

``current_date``, ``now()`` and the other clocks are the upstream transaction's start time, not
dpsql's: they are read as dpsql's clock moved two days to the side that makes the WHERE range
widest (its lower bounds from two days earlier, its upper ones from two days later), so the
verdict holds whenever the two clocks agree within a day, in any time zone. A function of the
statement's text, the policy, the session's zone and dpsql's clock (:mod:`dpsql.clock`: read
only where a clock is compared with a private date column with bounds; the engine analyzes the statement
again once the clock has left the UTC day it read); nothing about the data.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlglot import exp

from dpsql import clock as dpsql_clock
from dpsql.policy.tables import Column
from dpsql.sql.group_domain import private_where_columns
from dpsql.sql.key_values import Span
from dpsql.sql.sources import Ctx
from dpsql.sql.time_keys import TimeKeys
from dpsql.upstream.zone import tzinfo_of

# the clocks a statement may compare (the upstream transaction's start time)
CLOCKS = (exp.CurrentDate, exp.CurrentTimestamp, exp.Localtimestamp)
_MARGIN = timedelta(days=2)


def outside_declared(
    ctx: Ctx, where: exp.Expr | None, zone: str, grouped: bool = False
) -> str | None:
    """The notice of a (qualified) WHERE clause whose range on a private date or timestamp
    column with declared bounds leaves nothing of them; None otherwise. ``grouped``: the
    statement has GROUP BY (its answer: no rows)."""
    if where is None:
        return None
    cols = [(c, col) for c, col in private_where_columns(ctx, where) if col.temporal and col.bounds]
    if not cols:
        return None
    reads = any(where.find_all(*CLOCKS))
    # dpsql's clock (dpsql.clock: the engine's), read only where a clock is compared: naive UTC
    clock = dpsql_clock.now().replace(tzinfo=None) if reads else datetime(2000, 1, 1)
    for c, col in cols:
        early = _span(where, c, col, zone, clock - _MARGIN)
        late = _span(where, c, col, zone, clock + _MARGIN)
        if early is None or late is None or early.lo <= late.hi:
            continue
        return _notice(c.name, col, reads, grouped)
    return None


def _span(where: exp.Expr, c: exp.Column, col: Column, zone: str, at: datetime) -> Span | None:
    """The declared range of ``c`` cut by ``where``'s range on it, its clocks read as ``at``."""
    keys = TimeKeys()
    keys.column = lambda _: col
    keys.where = where.transform(_clock_as(at))
    keys.zone = tzinfo_of(zone)
    return keys._span(c, col)


def _clock_as(at: datetime) -> Callable[[exp.Expr], exp.Expr]:
    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.CurrentDate):
            return exp.cast(exp.Literal.string(at.date().isoformat()), "date")
        if isinstance(n, (exp.CurrentTimestamp, exp.Localtimestamp)):
            return exp.cast(exp.Literal.string(at.isoformat(sep=" ")), "timestamp")
        return n

    return fix


def _notice(name: str, col: Column, clock: bool, grouped: bool) -> str:
    assert col.bounds is not None
    lo, hi = (str(b) for b in col.bounds)
    read = " (current_date and now() read as dpsql's clock, within two days)" if clock else ""
    return (
        f"the WHERE clause leaves nothing of {name}'s declared range, {lo} to {hi}{read}: the "
        f"policy's bounds of a date are the values it takes, so no row can pass it whatever the "
        + (
            "data: the answer has no rows, as PostgreSQL's "
            if grouped
            else "data: the aggregates are those of no rows, as PostgreSQL gives them (COUNT 0; "
            "SUM, AVG, MIN and the others NULL) "
        )
        + "(nothing was read or charged); ask about a period "
        f"inside {lo} to {hi}, or ask the data owner to widen {name}'s declared bounds if the "
        "data goes further"
    )

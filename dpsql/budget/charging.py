"""Charging budget rows: reserve, confirm and refund, each a step inside one ledger transaction.

:class:`dpsql.budget.ledger.Ledger` runs these in ``Ledger.transact`` (retrying deadlocks). Budget
rows are created-or-locked with ``INSERT ... ON CONFLICT DO UPDATE`` (a row lock held until the
transaction ends), always in the order of :func:`dpsql.budget.limits.limits`, so concurrent
sessions and processes serialize on them and can never overspend.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction
from typing import TYPE_CHECKING

import psycopg
from psycopg.types.json import Jsonb

from dpsql.budget import filter as budget_filter
from dpsql.budget.periods import EPOCH, period_start
from dpsql.budget.records import (
    BudgetRow,
    Charged,
    Limit,
    Reservation,
    cost_text,
    exhausted,
    frac_text,
    opt_text,
)
from dpsql.dp.accounting import Cost
from dpsql.errors import InternalError

if TYPE_CHECKING:
    from dpsql.budget.store import LedgerStore


def lock_budget(
    ledger: LedgerStore, conn: psycopg.Connection, kind: str, name: str, start: datetime
) -> BudgetRow:
    """Create-or-lock one budget row (held until the transaction ends) and read it."""
    row = conn.execute(
        ledger.q(
            "INSERT INTO {s}.budget AS b (dataset, kind, name, period_start)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (dataset, kind, name, period_start)"
            " DO UPDATE SET updated_at = b.updated_at RETURNING " + BudgetRow.COLUMNS
        ),
        [ledger.dataset, kind, name, start],
    ).fetchone()
    assert row is not None
    return BudgetRow.parse(row)


def reserve(
    ledger: LedgerStore,
    conn: psycopg.Connection,
    analyst: str,
    cost: Cost,
    fingerprint: str,
    limits: tuple[Limit, ...],
    delta_for_rho: Fraction,
    mechanism: str,
    statement: str = "",
) -> Reservation:
    """Check each budget's filter with the cost added, add it, and log a ``reserved`` release.

    Raises:
        BudgetExhausted: a budget's filter refuses the new totals (the transaction rolls back).
    """
    now = _now(conn, limits)
    charged: list[Charged] = []
    updates: list[object] = []
    used: list[tuple[str, str, Fraction, bool]] = []
    for lim in limits:
        start = period_start(lim.period, now)
        row = lock_budget(ledger, conn, lim.kind, lim.name, start)
        filt = row.filter(lim)
        total = filt.add(row.spent, cost)
        if not filt.admits(total):
            raise exhausted(analyst, lim, row, cost, now, (), _min_epsilon(ledger, analyst))
        before, after = filt.epsilon_spent(row.spent), filt.epsilon_spent(total)
        if after is not None:
            first = row.spent.cost.rho == 0 and total.cost.rho > 0 and before is not None
            used.append((lim.kind, lim.name, after - (before or Fraction(0)), first))
        updates += [
            *cost_text(total.cost),
            opt_text(total.renyi),
            filt.orders_text,
            frac_text(filt.delta_share),
            ledger.dataset,
            lim.kind,
            lim.name,
            start,
        ]
        charged.append(Charged(lim.kind, lim.name, start, row.generation))
    # every budget's new totals and the release's log in one statement (its data-modifying
    # WITH parts run once each, to completion, on the rows locked above)
    rid, created = conn.execute(
        ledger.q(_charge_sql(len(limits))),
        [
            *updates,
            ledger.dataset,
            analyst,
            fingerprint,
            mechanism,
            *cost_text(cost),
            frac_text(delta_for_rho),
            Jsonb([[c.kind, c.name, c.period_start.isoformat(), c.generation] for c in charged]),
            statement,
        ],
    ).fetchone()  # type: ignore[misc]
    return Reservation(
        int(rid), analyst, cost, fingerprint, tuple(charged), created, used=tuple(used)
    )


_UPDATE_BUDGET = (
    "UPDATE {s}.budget SET epsilon_spent = %s, delta_spent = %s, rho_spent = %s,"
    " renyi_spent = %s, renyi_order = coalesce(renyi_order, %s),"
    " delta_share = coalesce(delta_share, %s),"
    " releases = releases + 1, updated_at = now() WHERE dataset = %s AND kind = %s"
    " AND name = %s AND period_start = %s"
)


def _charge_sql(n: int) -> str:
    """:func:`reserve`'s one writing statement for ``n`` budgets: each budget row's update,
    then the ``reserved`` release logged, its id and time returned."""
    with_ = ", ".join(f"u{i} AS ({_UPDATE_BUDGET})" for i in range(n))
    return (f"WITH {with_} " if n else "") + (
        "INSERT INTO {s}.release (dataset, analyst, fingerprint, mechanism, epsilon, delta,"
        " rho, delta_for_rho, state, charged, statement) VALUES (%s, %s, %s, %s, %s, %s, %s,"
        " %s, 'reserved', %s, %s) RETURNING id, created_at"
    )


def _min_epsilon(ledger: LedgerStore, analyst: str) -> Fraction:
    """The smallest SET dpsql.epsilon the policy lets ``analyst`` use (a refusal's hint)."""
    return Fraction(str(ledger.policy.epsilon_range(analyst)[0]))


def _now(conn: psycopg.Connection, limits: Sequence[Limit]) -> datetime:
    """The transaction's ``now()``, read only when a budget renews (its period's start is
    ``now``'s): a budget of period ``none`` starts at the epoch whatever the time, and a
    refusal names no end for it (:func:`~dpsql.budget.periods.period_end`), so nothing reads
    the time then."""
    if all(lim.period == "none" for lim in limits):
        return EPOCH
    return conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index,no-any-return]


def check_together(
    ledger: LedgerStore,
    conn: psycopg.Connection,
    analyst: str,
    costs: Sequence[Cost],
    limits: tuple[Limit, ...],
) -> None:
    """Check each budget's filter with all of a statement's releases added (locking its row, in
    the order :func:`reserve` does), before any of them is reserved: a refusal then says what
    the budget has left before the statement and what the whole statement needs.

    Raises:
        BudgetExhausted: a budget's filter refuses the new totals.
    """
    now = _now(conn, limits)
    for lim in limits:
        row = lock_budget(ledger, conn, lim.kind, lim.name, period_start(lim.period, now))
        filt = row.filter(lim)
        total = row.spent
        for c in costs:
            total = filt.add(total, c)
        if not filt.admits(total):
            raise exhausted(
                analyst, lim, row, costs[0], now, costs[1:], _min_epsilon(ledger, analyst)
            )


def settle(ledger: LedgerStore, conn: psycopg.Connection, res: Reservation, state: str) -> None:
    """Mark an open reservation ``committed`` or ``refunded``.

    Raises:
        InternalError: the reservation was already settled.
    """
    done = conn.execute(
        ledger.q(
            "UPDATE {s}.release SET state = %s, settled_at = clock_timestamp()"
            " WHERE id = %s AND state = 'reserved' RETURNING id"
        ),
        [state, res.id],
    ).fetchone()
    if done is None:
        raise InternalError(f"reservation {res.id} is not open (committed or refunded)")


def give_back(ledger: LedgerStore, conn: psycopg.Connection, res: Reservation) -> None:
    """Subtract a refunded reservation's cost from each budget row it was charged to."""
    for c in res.charged:
        row = lock_budget(ledger, conn, c.kind, c.name, c.period_start)
        if row.generation != c.generation:
            continue  # reset since: the spend it was part of is gone already
        left = budget_filter.refund(row.spent, res.cost, row.order)
        conn.execute(
            ledger.q(
                "UPDATE {s}.budget SET epsilon_spent = %s, delta_spent = %s,"
                " rho_spent = %s, renyi_spent = %s, releases = greatest(releases - 1, 0),"
                " updated_at = now() WHERE dataset = %s AND kind = %s AND name = %s"
                " AND period_start = %s"
            ),
            [
                *cost_text(left.cost),
                opt_text(left.renyi),
                ledger.dataset,
                c.kind,
                c.name,
                c.period_start,
            ],
        )

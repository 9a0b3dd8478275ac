"""Administering budgets: grant, reset and show (``dpsql budget``, :mod:`dpsql.budget.cli`). Every
change leaves an audit record.

A grant adds epsilon/delta to a budget for its current period; a reset zeroes what the current
period has spent (releases stay in the log). Neither is reachable by an analyst: only this module
(through the CLI, run by whoever holds the ledger's database credentials) calls them.
"""

from __future__ import annotations

from datetime import datetime
from fractions import Fraction

import psycopg
from psycopg.types.json import Jsonb

from dpsql.budget import charging
from dpsql.budget.format import fmt_down, fmt_up
from dpsql.budget.periods import period_start
from dpsql.budget.records import BudgetRow, Limit
from dpsql.budget.store import LedgerStore
from dpsql.budget.views import statuses
from dpsql.errors import InvalidParameter, UndefinedObject


def _limit(ledger: LedgerStore, analyst: str | None) -> Limit:
    if analyst is None:
        g = ledger.dataset_limit()
        if g is None:
            raise UndefinedObject(
                f"dataset {ledger.dataset!r} has no global budget in the policy",
                hint="add a top-level `budget:` to the policy, or name an analyst",
            )
        return g
    if analyst not in ledger.policy.analysts:
        raise UndefinedObject(
            f"analyst {analyst!r} is not in the policy",
            hint="known analysts: " + (", ".join(sorted(ledger.policy.analysts)) or "(none)"),
        )
    return next(lim for lim in ledger.limits(analyst) if lim.kind == "analyst")


def _audit(
    conn: psycopg.Connection,
    ledger: LedgerStore,
    actor: str,
    action: str,
    lim: Limit,
    start: object,
    detail: dict[str, object],
) -> None:
    conn.execute(
        ledger.q(
            "INSERT INTO {s}.admin_audit (actor, action, dataset, kind, name, period_start, detail)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
        ),
        [actor, action, ledger.dataset, lim.kind, lim.name, start, Jsonb(detail)],
    )


def _row_detail(row: BudgetRow) -> dict[str, object]:
    return {
        "epsilon_spent": str(row.spent.cost.epsilon),
        "delta_spent": str(row.spent.cost.delta),
        "rho_spent": str(row.spent.cost.rho),
        "renyi_spent": None if row.spent.renyi is None else str(row.spent.renyi),
        "renyi_order": None if row.order is None else str(row.order),
        "more_orders": [str(o) for o in row.more],
        "epsilon_granted": str(row.epsilon_granted),
        "delta_granted": str(row.delta_granted),
        "releases": row.releases,
        "generation": row.generation,
    }


def _lock_current(
    ledger: LedgerStore, conn: psycopg.Connection, lim: Limit
) -> tuple[BudgetRow, datetime]:
    """The budget's row of its period at the database's now, locked until the transaction ends
    (:func:`dpsql.budget.charging.lock_budget`), and that period's start."""
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    start = period_start(lim.period, now)
    return charging.lock_budget(ledger, conn, lim.kind, lim.name, start), start


def grant(
    ledger: LedgerStore,
    actor: str,
    analyst: str | None,
    epsilon: Fraction,
    delta: Fraction = Fraction(0),
    reason: str = "",
) -> None:
    """Add ``epsilon``/``delta`` to a budget's current period (``analyst`` None: the dataset's)."""
    epsilon, delta = Fraction(epsilon), Fraction(delta)
    if epsilon < 0 or delta < 0 or (epsilon == 0 and delta == 0) or delta >= 1:
        raise InvalidParameter(
            f"a grant needs epsilon >= 0 and 0 <= delta < 1, not both zero (got {epsilon}, "
            f"{delta})",
            hint="e.g. dpsql budget grant --analyst alice --epsilon 1",
        )
    lim = _limit(ledger, analyst)

    def run(conn: psycopg.Connection) -> None:
        row, start = _lock_current(ledger, conn, lim)
        geps, gdelta = row.epsilon_granted + epsilon, row.delta_granted + delta
        conn.execute(
            ledger.q(
                "UPDATE {s}.budget SET epsilon_granted = %s, delta_granted = %s,"
                " updated_at = now() WHERE dataset = %s AND kind = %s AND name = %s"
                " AND period_start = %s"
            ),
            [
                f"{geps.numerator}/{geps.denominator}",
                f"{gdelta.numerator}/{gdelta.denominator}",
                ledger.dataset,
                lim.kind,
                lim.name,
                start,
            ],
        )
        detail = {"epsilon": str(epsilon), "delta": str(delta), "reason": reason}
        _audit(conn, ledger, actor, "grant", lim, start, {**detail, "before": _row_detail(row)})

    ledger.transact(run)


def reset(ledger: LedgerStore, actor: str, analyst: str | None, reason: str = "") -> None:
    """Zero what a budget spent in its current period; open reservations are no longer refundable.

    The releases stay in the log; the audit record keeps the totals that were reset.
    """
    lim = _limit(ledger, analyst)

    def run(conn: psycopg.Connection) -> None:
        row, start = _lock_current(ledger, conn, lim)
        conn.execute(
            ledger.q(
                "UPDATE {s}.budget SET epsilon_spent = '0', delta_spent = '0', rho_spent = '0',"
                " renyi_spent = '0', releases = 0, generation = generation + 1, updated_at = now()"
                " WHERE dataset = %s AND kind = %s AND name = %s AND period_start = %s"
            ),
            [ledger.dataset, lim.kind, lim.name, start],
        )
        _audit(conn, ledger, actor, "reset", lim, start, {"reason": reason, **_row_detail(row)})

    ledger.transact(run)


def show(ledger: LedgerStore, analyst: str | None = None) -> str:
    """A text table of every budget of the dataset (or one analyst's and the dataset's)."""
    names = [analyst] if analyst else sorted(ledger.policy.analysts)
    limits = {(lim.kind, lim.name): lim for n in names for lim in ledger.limits(n)}
    g = ledger.dataset_limit()
    if g is not None:
        limits[(g.kind, g.name)] = g
    rows = [
        [
            s.budget,
            s.name,
            s.period,
            fmt_up(Fraction(s.epsilon_spent)),
            fmt_down(Fraction(s.epsilon_limit)),
            fmt_down(Fraction(s.epsilon_remaining)),
            fmt_up(Fraction(s.delta_spent)),
            fmt_down(Fraction(s.delta_explicit_limit)),
            fmt_down(Fraction(s.delta_limit)),
            fmt_up(Fraction(s.rho_spent)),
            "-" if s.renyi_order is None else fmt_down(Fraction(s.renyi_order)),
            str(s.releases),
        ]
        for s in statuses(ledger, tuple(limits[k] for k in sorted(limits)))
    ]
    head = ["budget", "name", "period", "eps spent", "eps limit", "eps left", "delta spent"]
    head += ["delta explicit", "delta limit", "rho spent", "renyi order", "releases"]
    table = [head, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table)

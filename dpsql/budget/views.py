"""What an analyst may see of the ledger: ``dpsql.budget`` and ``dpsql.history``.

The wire session routes ``SHOW dpsql.budget`` to :func:`show_budget`, ``SELECT * FROM dpsql.budget``
to :func:`budget_result` and ``SELECT * FROM dpsql.history`` to :func:`history_result`. An analyst
sees only their own budget, the dataset's, and their own releases.

``epsilon_spent`` states everything released so far as one (epsilon, delta_limit)-DP guarantee:
Gaussian (rho) spending is converted with the delta not spent explicitly (see
:meth:`dpsql.dp.accounting.Cost.epsilon_within`). Spent is rounded up and remaining down.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from dpsql.budget.format import dec_down, dec_up, fmt_down
from dpsql.budget.ledger import BudgetRow, Ledger, Limit
from dpsql.budget.periods import period_end, period_start
from dpsql.dp.accounting import Cost
from dpsql.result import Result, ResultColumn

TEXT, INT8, BOOL, NUMERIC, TIMESTAMPTZ = 25, 20, 16, 1700, 1184


@dataclass(frozen=True)
class BudgetStatus:
    """One row of ``dpsql.budget``."""

    budget: str  # "analyst" | "dataset"
    name: str
    period: str
    period_start: datetime | None
    period_end: datetime | None
    epsilon_limit: Decimal
    epsilon_spent: Decimal
    epsilon_remaining: Decimal
    delta_limit: Decimal
    delta_spent: Decimal
    delta_remaining: Decimal
    rho_spent: Decimal
    releases: int


BUDGET_COLUMNS = tuple(
    ResultColumn(name, oid)
    for name, oid in [
        ("budget", TEXT),
        ("name", TEXT),
        ("period", TEXT),
        ("period_start", TIMESTAMPTZ),
        ("period_end", TIMESTAMPTZ),
        ("epsilon_limit", NUMERIC),
        ("epsilon_spent", NUMERIC),
        ("epsilon_remaining", NUMERIC),
        ("delta_limit", NUMERIC),
        ("delta_spent", NUMERIC),
        ("delta_remaining", NUMERIC),
        ("rho_spent", NUMERIC),
        ("releases", INT8),
    ]
)


@dataclass(frozen=True)
class HistoryEntry:
    """One row of ``dpsql.history``: a release (or free repeat) by the analyst."""

    id: int
    released_at: datetime
    fingerprint: str
    mechanism: str
    epsilon: Decimal
    delta: Decimal
    rho: Decimal
    cached: bool
    state: str  # committed | reserved (never confirmed: counted) | refunded | repeat


HISTORY_COLUMNS = tuple(
    ResultColumn(name, oid)
    for name, oid in [
        ("id", INT8),
        ("released_at", TIMESTAMPTZ),
        ("fingerprint", TEXT),
        ("mechanism", TEXT),
        ("epsilon", NUMERIC),
        ("delta", NUMERIC),
        ("rho", NUMERIC),
        ("cached", BOOL),
        ("state", TEXT),
    ]
)


def remaining(ledger: Ledger, analyst: str) -> list[BudgetStatus]:
    """The analyst's budget and the dataset's, for their current periods."""
    return statuses(ledger, ledger.limits(analyst))


def statuses(ledger: Ledger, limits: tuple[Limit, ...]) -> list[BudgetStatus]:
    """The state of these budgets in their current periods."""
    out: list[BudgetStatus] = []
    with ledger.connection() as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        for lim in limits:
            start = period_start(lim.period, now)
            got = conn.execute(
                ledger.q(
                    "SELECT epsilon_spent, delta_spent, rho_spent, epsilon_granted, delta_granted,"
                    " generation, releases FROM {s}.budget WHERE dataset = %s AND kind = %s"
                    " AND name = %s AND period_start = %s"
                ),
                [ledger.dataset, lim.kind, lim.name, start],
            ).fetchone()
            spent, geps, gdelta, releases = Cost(), Fraction(0), Fraction(0), 0
            if got is not None:
                row = BudgetRow.parse(got)
                spent, geps, gdelta, releases = (
                    row.spent,
                    row.epsilon_granted,
                    row.delta_granted,
                    row.releases,
                )
            eps_limit, delta_limit = lim.epsilon + geps, lim.delta + gdelta
            eps_spent = spent.epsilon_within(delta_limit)
            eps_left = Fraction(0) if eps_spent is None else max(Fraction(0), eps_limit - eps_spent)
            out.append(
                BudgetStatus(
                    budget=lim.kind,
                    name=lim.name,
                    period=lim.period,
                    period_start=None if lim.period == "none" else start,
                    period_end=period_end(lim.period, now),
                    epsilon_limit=dec_down(eps_limit),
                    epsilon_spent=dec_up(eps_limit if eps_spent is None else eps_spent),
                    epsilon_remaining=dec_down(eps_left),
                    delta_limit=dec_down(delta_limit),
                    delta_spent=dec_up(spent.delta),
                    delta_remaining=dec_down(max(Fraction(0), delta_limit - spent.delta)),
                    rho_spent=dec_up(spent.rho),
                    releases=releases,
                )
            )
    return out


def history(ledger: Ledger, analyst: str, limit: int = 1000) -> list[HistoryEntry]:
    """The analyst's own releases on this dataset, newest first (never anyone else's)."""
    with ledger.connection() as conn:
        rows = conn.execute(
            ledger.q(
                "SELECT id, created_at, fingerprint, mechanism, epsilon, delta, rho, delta_for_rho,"
                " state FROM {s}.release WHERE dataset = %s AND analyst = %s"
                " ORDER BY id DESC LIMIT %s"
            ),
            [ledger.dataset, analyst, limit],
        ).fetchall()
    out = []
    for rid, at, fp, mech, eps, delta, rho, dfr, state in rows:
        cost = Cost(Fraction(eps), Fraction(delta), Fraction(rho))
        d = Fraction(dfr)
        e_eps, e_delta = (
            cost.as_approx_dp(d) if cost.rho and 0 < d < 1 else (cost.epsilon, cost.delta)
        )
        out.append(
            HistoryEntry(
                id=int(rid),
                released_at=at,
                fingerprint=fp,
                mechanism=mech,
                epsilon=dec_up(e_eps),
                delta=dec_up(e_delta),
                rho=dec_up(cost.rho),
                cached=state == "repeat",
                state=state,
            )
        )
    return out


def budget_result(ledger: Ledger, analyst: str) -> Result:
    """``SELECT * FROM dpsql.budget`` as a Result."""
    rows = [astuple(r) for r in remaining(ledger, analyst)]
    return Result(BUDGET_COLUMNS, rows, f"SELECT {len(rows)}")


def history_result(ledger: Ledger, analyst: str, limit: int = 1000) -> Result:
    """``SELECT * FROM dpsql.history`` as a Result."""
    rows = [astuple(r) for r in history(ledger, analyst, limit)]
    return Result(HISTORY_COLUMNS, rows, f"SELECT {len(rows)}")


def show_budget(ledger: Ledger, analyst: str) -> str:
    """The one-line value of ``SHOW dpsql.budget``.

    Example: ``analyst alice: epsilon 0.7 of 1, delta 0.000001 of 0.000001 left (renews
    2026-11-23 00:00 UTC); dataset sales: epsilon 9.3 of 10, delta 0 of 0 left``.
    """
    parts = []
    for s in remaining(ledger, analyst):
        renew = f" (renews {s.period_end:%Y-%m-%d %H:%M} UTC)" if s.period_end else ""
        parts.append(
            f"{s.budget} {s.name}: epsilon {fmt_down(Fraction(s.epsilon_remaining))} of "
            f"{fmt_down(Fraction(s.epsilon_limit))}, delta "
            f"{fmt_down(Fraction(s.delta_remaining))} of {fmt_down(Fraction(s.delta_limit))} "
            f"left{renew}"
        )
    return "; ".join(parts)

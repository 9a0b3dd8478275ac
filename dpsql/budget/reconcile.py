"""``dpsql budget reconcile``: releases reserved by a dpsql process that died before settling them.

A private answer is reserved (charged) before its query runs and committed before any noisy row
leaves dpsql. A reservation still open long after any statement could have run (``older_than``,
well past the statement timeout) belongs to a process that was killed in between: its answer was
never sent. Such reservations stay charged (the safe side) until an operator settles them:

* listed (the default): who, when, what statement, at what cost;
* ``--commit``: confirmed as spent (the charge stays; the release is closed);
* ``--refund``: given back to every budget it was charged to. Only for crashes that say nothing
  about the data (a host lost, an operator's kill -9), never for a query that made dpsql crash:
  a refunded crash would be a free probe of the private rows.

Each settled reservation is recorded in the ledger's append-only ``admin_audit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

import psycopg
from psycopg.types.json import Jsonb

from dpsql.budget import charging
from dpsql.budget.records import Charged, Reservation
from dpsql.dp.accounting import Cost

if TYPE_CHECKING:
    from dpsql.budget.store import LedgerStore

Action = Literal["list", "commit", "refund"]


@dataclass(frozen=True)
class Stale:
    """An open reservation older than the cut-off, with the statement it was for."""

    reservation: Reservation
    statement: str


def stale(ledger: LedgerStore, older_than: timedelta) -> list[Stale]:
    """Open reservations of the dataset made more than ``older_than`` ago, oldest first."""
    with ledger.connection() as conn:
        rows = conn.execute(
            ledger.q(
                "SELECT id, analyst, fingerprint, epsilon, delta, rho, charged, created_at,"
                " statement FROM {s}.release WHERE dataset = %s AND state = 'reserved'"
                " AND created_at < clock_timestamp() - %s ORDER BY id"
            ),
            [ledger.dataset, older_than],
        ).fetchall()
    out = []
    for rid, analyst, fp, eps, delta, rho, charged, created, text in rows:
        cost = Cost(Fraction(eps), Fraction(delta), Fraction(rho))
        parts = tuple(
            Charged(str(k), str(n), datetime.fromisoformat(str(start)), int(gen))
            for k, n, start, gen in charged
        )
        out.append(Stale(Reservation(int(rid), analyst, cost, fp, parts, created), text))
    return out


def settle(ledger: LedgerStore, item: Stale, action: Action, actor: str, reason: str) -> None:
    """Commit or refund one stale reservation, recorded in ``admin_audit`` (one transaction)."""
    res = item.reservation

    def run(conn: psycopg.Connection) -> None:
        if action == "refund":
            charging.settle(ledger, conn, res, "refunded")
            charging.give_back(ledger, conn, res)
        else:
            charging.settle(ledger, conn, res, "committed")
        first = res.charged[0] if res.charged else None
        conn.execute(
            ledger.q(
                "INSERT INTO {s}.admin_audit (actor, action, dataset, kind, name, period_start,"
                " detail) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ),
            [
                actor,
                f"reconcile-{action}",
                ledger.dataset,
                first.kind if first else "analyst",
                first.name if first else res.analyst,
                first.period_start if first else res.created_at,
                Jsonb(
                    {
                        "release_id": res.id,
                        "analyst": res.analyst,
                        "reason": reason,
                        "epsilon": str(res.cost.epsilon),
                        "delta": str(res.cost.delta),
                        "rho": str(res.cost.rho),
                    }
                ),  # fmt: skip
            ],
        )

    ledger.transact(run)


def report(items: list[Stale]) -> str:
    """One line per stale reservation."""
    if not items:
        return "no open reservations older than the cut-off"
    lines = []
    for it in items:
        r = it.reservation
        text = " ".join(it.statement.split())[:120] or f"(fingerprint {r.fingerprint})"
        lines.append(
            f"release {r.id}  {r.created_at:%Y-%m-%d %H:%M:%S%z}  {r.analyst}  epsilon "
            f"{float(r.cost.epsilon):g} delta {float(r.cost.delta):g} rho {float(r.cost.rho):g}"
            f"  {text}"
        )
    return "\n".join(lines)

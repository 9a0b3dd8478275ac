"""Shared helpers for the ledger tests: policies, and the ledger's own consistency check."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import psycopg

from dpsql.budget.records import BudgetRow
from dpsql.dp.accounting import Cost
from dpsql.policy.model import Policy
from tests.policies import build_policy


def policy(
    analysts: dict[str, dict[str, Any]] | None = None,
    dataset_budget: dict[str, Any] | None = None,
    explicit_share: float | None = None,
    **top: Any,
) -> Policy:
    """A policy with no tables and these analysts' budgets (``{"alice": {"epsilon": 1}}``, an
    entry's ``max_epsilon`` is the analyst's), the dataset's budget, other top-level keys ``top``."""
    analysts = analysts if analysts is not None else {"alice": {"epsilon": 1.0, "delta": 1e-6}}
    share = {} if explicit_share is None else {"explicit_delta_share": explicit_share}

    def analyst(b: dict[str, Any]) -> dict[str, Any]:
        budget = {k: v for k, v in b.items() if k in ("epsilon", "delta", "period", "renyi_order")}
        limit = {"max_epsilon": b["max_epsilon"]} if "max_epsilon" in b else {}
        return {"budget": {**budget, **share}, **limit}

    if dataset_budget:
        top["budget"] = dataset_budget
    return build_policy(
        base={"dataset": "testdata"},
        analysts={name: analyst(b) for name, b in analysts.items()},
        **top,
    )


def totals(dsn: str, schema: str = "dpsql") -> dict[tuple[str, str], Cost]:
    """The running totals stored in the budget rows, by (kind, name)."""
    out = {}
    with psycopg.connect(dsn) as conn:
        for kind, name, e, d, r in conn.execute(
            f"SELECT kind, name, epsilon_spent, delta_spent, rho_spent FROM {schema}.budget"
        ):
            out[(kind, name)] = Cost(Fraction(e), Fraction(d), Fraction(r))
    return out


def release_sums(dsn: str, schema: str = "dpsql") -> dict[str, Cost]:
    """The sum of every release not refunded (reserved counts), by analyst, recomputed from the log."""
    out: dict[str, Cost] = {}
    with psycopg.connect(dsn) as conn:
        for analyst, e, d, r in conn.execute(
            f"SELECT analyst, epsilon, delta, rho FROM {schema}.release"
            " WHERE state IN ('reserved', 'committed')"
        ):
            out[analyst] = out.get(analyst, Cost()) + Cost(Fraction(e), Fraction(d), Fraction(r))
    return out


def states(dsn: str, schema: str = "dpsql") -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(
            conn.execute(f"SELECT state, count(*) FROM {schema}.release GROUP BY state").fetchall()
        )


def budget_rows(dsn: str, schema: str = "dpsql") -> dict[tuple[str, str], BudgetRow]:
    """The stored budget rows (totals and filter settings), by (kind, name)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT kind, name, {BudgetRow.COLUMNS} FROM {schema}.budget")
        return {(r[0], r[1]): BudgetRow.parse(r[2:]) for r in rows}


def release_costs(dsn: str, schema: str = "dpsql") -> list[tuple[str, Cost]]:
    """(analyst, cost) of every release not refunded, from the log, in order."""
    with psycopg.connect(dsn) as conn:
        return [
            (a, Cost(Fraction(e), Fraction(d), Fraction(r)))
            for a, e, d, r in conn.execute(
                f"SELECT analyst, epsilon, delta, rho FROM {schema}.release"
                " WHERE state IN ('reserved', 'committed') ORDER BY id"
            )
        ]

"""Accuracy on a table with one row per unit that the catalog proves (PRIMARY KEY on the unit).

``accounts``: ``--units`` rows (default 12,000), ``uid`` the PRIMARY KEY, a tier (4 declared
keys) and a balance (log-normal, median 2,000, sigma 1.5, declared [0, 1,000,000], ``clamp:
auto``). For each query at epsilon 1, as the first statement over its slice (``auto`` bounds
chosen at 1/5 of epsilon; :mod:`bench.accuracy`'s shortcut: one histogram, ``--runs`` draws of
the choice, fresh noise per run from the engine's own release): the coverage of the true answer
by the 95% interval and the median relative error, and the epsilon the answer's measurement
gets. The plan is the engine's (:meth:`Engine.plan` reads the catalog), so the numbers follow
what the engine does with the key; run it on an older checkout to compare.

    python -m bench.unique_tables [--runs 200] [--units 12000]

Not part of pytest; about a minute.
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import Any

import psycopg

from bench.accuracy import Query, auto_draws
from dpsql.engine import Engine
from dpsql.execute.embedded import start_cluster
from dpsql.policy.model import Policy
from dpsql.sql.auto_bound_types import AutoBounds

POLICY: dict[str, Any] = {
    "version": 1,
    "dataset": "bench_unique",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    "tables": {
        "public.accounts": {
            "privacy_unit": "uid",
            "columns": {
                "uid": {"type": "integer", "identifier": True},
                "tier": {"type": "integer", "keys": [0, 1, 2, 3]},
                "balance": {"type": "numeric", "bounds": [0, 1000000]},
            },
        }
    },
    "analysts": {"bench": {"budget": {"epsilon": 1e9, "delta": 0.5}, "max_epsilon": 10.0}},
}
QUERIES = (
    ("COUNT(*)", "SELECT COUNT(*) FROM accounts"),
    ("COUNT(*) by tier", "SELECT tier, COUNT(*) FROM accounts GROUP BY tier"),
    ("SUM(balance)", "SELECT SUM(balance) FROM accounts"),
    ("SUM(balance) by tier", "SELECT tier, SUM(balance) FROM accounts GROUP BY tier"),
    ("AVG(balance) by tier", "SELECT tier, AVG(balance) FROM accounts GROUP BY tier"),
)


def load(dsn: str, units: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT setseed(0.23)")
        conn.execute(
            f"""CREATE TABLE accounts AS
            SELECT u AS uid, u % 4 AS tier,
                   round(exp(ln(2000) + 1.5 * sqrt(-2 * ln(random()))
                             * cos(2 * pi() * random()))::numeric, 2) AS balance
            FROM generate_series(1, {int(units)}) AS u"""
        )
        conn.execute("ALTER TABLE accounts ADD PRIMARY KEY (uid)")
        conn.execute("ANALYZE accounts")


class PlannedQuery(Query):
    """A :class:`bench.accuracy.Query` whose analysis is the engine plan's (with what the plan
    reads from the catalog), not the prepared statement's."""

    def __init__(self, engine: Engine, dsn: str, label: str, sql: str) -> None:
        super().__init__(engine, dsn, label, sql, "")
        self.a = engine.plan(self.prepared, self.session).analysis


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--units", type=int, default=12_000)
    args = ap.parse_args()
    lines = [
        "| query | coverage | median rel. error | epsilon of the answer | removed-mass "
        "estimates | bounds (most often) |",
        "|---|---|---|---|---|---|",
    ]
    cluster = start_cluster()
    try:
        dsn = cluster.dsn()
        load(dsn, args.units)
        engine = Engine(Policy.model_validate(POLICY), dsn, pool_size=2)
        for label, sql in QUERIES:
            q = PlannedQuery(engine, dsn, label, sql)
            draws, typical = auto_draws(q, args.runs)
            out = q.run(draws)
            plan = q.plan(draws[0] if draws else AutoBounds())
            eps = float(plan.epsilon - sum((b.cost.epsilon for b in plan.bias), Fraction(0)))
            lines.append(
                f"| {label} | {out.coverage:.3f} | {out.error:.3g} | {eps:.3g} | "
                f"{len(plan.bias)} | {typical} |"
            )
            print(lines[-1], flush=True)
        engine.close()
    finally:
        cluster.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Interval columns of tree statements on the demo data: coverage and width (docs/accuracy.md).

Each statement runs ``--runs`` times through ``Engine.execute`` with ``show_intervals`` on
(demo policy, ``auto`` bounds chosen each run, no ledger). Reported per statement: how many
output rows' 95% intervals held the truth (PostgreSQL on the raw tables), the median interval
width relative to the truth, and the level each leaf was released at (from the notice).
Run it against two checkouts (``PYTHONPATH=...``) to compare, e.g. before and after a change.

    python -m bench.tree_interval_width [--runs 20]

Not part of pytest; a minute or two.
"""

from __future__ import annotations

import argparse
import re
import statistics

import psycopg

from dpsql.demo import POLICY, load_demo
from dpsql.engine import Engine
from dpsql.execute.embedded import start_cluster
from dpsql.policy import load_policy
from dpsql.session import SessionContext

# (dpsql statement, its truth per key as PostgreSQL computes it)
QUERIES: tuple[tuple[str, str], ...] = (
    (
        "SELECT category, SUM(revenue) AS revenue FROM (SELECT category, region, SUM(amount) "
        "AS revenue FROM purchases WHERE amount <= 500 GROUP BY 1, 2) AS v GROUP BY category",
        "SELECT category, SUM(amount) FROM purchases WHERE amount <= 500 GROUP BY category",
    ),
    (
        "SELECT region, SUM(n) AS n FROM (SELECT category, region, COUNT(*) AS n FROM purchases "
        "GROUP BY 1, 2) AS v GROUP BY region",
        "SELECT region, COUNT(*) FROM purchases GROUP BY region",
    ),
    (
        "SELECT category, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share FROM purchases "
        "GROUP BY category",
        "SELECT category, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () FROM purchases "
        "GROUP BY category",
    ),
)


def measure(engine: Engine, dsn: str, sql: str, truth_sql: str, runs: int) -> str:
    prepared = engine.prepare(sql, "analyst")
    with psycopg.connect(dsn) as conn:
        truth = {str(r[0]): float(r[1]) for r in conn.execute(truth_sql).fetchall()}
    hits = total = 0
    widths: list[float] = []
    levels: set[str] = set()
    for _ in range(runs):
        res = engine.execute(prepared, SessionContext("analyst", show_intervals=True))
        for n in res.notices:
            levels.update(
                re.findall(r" at (0\.\d+)", n) if n.startswith("interval columns") else []
            )
        for row in res.rows:
            key, lo, hi = str(row[0]), row[-2], row[-1]
            if key not in truth:
                continue
            t = truth[key]
            total += 1
            if lo is None or hi is None:
                continue
            hits += float(lo) <= t <= float(hi)
            widths.append((float(hi) - float(lo)) / abs(t))
    width = f"{statistics.median(widths):.3g}" if widths else "none"
    return f"| `{sql[:60]}...` | {hits} of {total} | {width} | {', '.join(sorted(levels))} |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    cluster = start_cluster()
    try:
        dsn = cluster.dsn()
        load_demo(dsn)
        engine = Engine(load_policy(POLICY), dsn, pool_size=2)
        print("| statement | covered | median width / truth | leaf levels |\n|---|---|---|---|")
        for sql, truth_sql in QUERIES:
            print(measure(engine, dsn, sql, truth_sql, args.runs), flush=True)
        engine.close()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

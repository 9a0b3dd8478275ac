"""Where ``auto`` puts a column's upper clamp, against the data (issue 16).

For SUM/AVG queries (grouped and not) on the accuracy benchmark's tables (:mod:`bench.accuracy`)
and the demo data, draws the bounds a first statement would choose (``--runs`` draws of the
selection from one histogram, as :func:`bench.accuracy.auto_draws`) and prints, beside the
median chosen clamp: the data's per-unit largest value (clamped into the declared range) (what the choice ranks) at its 50th,
90th and 99th percentile and its maximum, how many units lie above the clamp (median over draws)
and the share of the column's value mass the clamp cuts off.

    python -m bench.clamp_position [--runs 200] [--units 12000]

Not part of pytest; about a minute.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import psycopg

from bench.accuracy import POLICY, Query, auto_draws, load
from dpsql.demo import POLICY as DEMO_POLICY
from dpsql.demo import load_demo
from dpsql.engine import Engine
from dpsql.execute.embedded import start_cluster
from dpsql.policy import load_policy
from dpsql.policy.model import Policy
from dpsql.sql.auto_bounds import auto_items

BENCH = (
    ("SUM(amount)", "SELECT SUM(amount) FROM events", "events", "uid", "amount", ""),
    ("AVG(amount)", "SELECT AVG(amount) FROM events", "events", "uid", "amount", ""),
    ("SUM(amount) by category", "SELECT category, SUM(amount) FROM events GROUP BY category",
     "events", "uid", "amount", ""),
    ("AVG(amount) by category", "SELECT category, AVG(amount) FROM events GROUP BY category",
     "events", "uid", "amount", ""),
    ("SUM(amount) by month",
     "SELECT date_trunc('month', day) AS m, SUM(amount) FROM events GROUP BY 1",
     "events", "uid", "amount", ""),
    ("AVG(amount) by month",
     "SELECT date_trunc('month', day) AS m, AVG(amount) FROM events GROUP BY 1",
     "events", "uid", "amount", ""),
    ("people: AVG(income)", "SELECT AVG(income) FROM people", "people", "pid", "income", ""),
    ("people: SUM(income) by sex", "SELECT sex, SUM(income) FROM people GROUP BY sex",
     "people", "pid", "income", ""),
)  # fmt: skip
DEMO = (
    ("demo: SUM(amount) by category (amount <= 500)",
     "SELECT category, SUM(amount) FROM purchases WHERE amount <= 500 GROUP BY category",
     "purchases", "user_id", "amount", "amount <= 500"),
    ("demo: AVG(amount) by region", "SELECT region, AVG(amount) FROM purchases GROUP BY region",
     "purchases", "user_id", "amount", ""),
    ("demo: SUM(amount) by month",
     "SELECT date_trunc('month', purchased_at) AS m, SUM(amount) FROM purchases GROUP BY 1",
     "purchases", "user_id", "amount", ""),
    ("demo: SUM(income) by sex", "SELECT sex, SUM(income) FROM pums GROUP BY sex",
     "pums", "pid", "income", ""),
    ("demo: AVG(income) by educ", "SELECT educ, AVG(income) FROM pums GROUP BY educ",
     "pums", "pid", "income", ""),
)  # fmt: skip


def row(engine: Engine, dsn: str, spec: tuple[str, ...], runs: int) -> str:
    label, sql, table, unit, col, where = spec
    q = Query(engine, dsn, label, sql, "")
    draws, _ = auto_draws(q, runs)
    clamps = [float(c.value) for b in draws for c in b.chosen if c.kind == "value_hi"]
    cond = f"WHERE {where}" if where else ""
    with psycopg.connect(dsn) as conn:
        per_unit = np.array(
            [
                float(r[0])
                for r in conn.execute(
                    f"SELECT MAX({col}) FROM {table} {cond} GROUP BY {unit}"
                ).fetchall()
                if r[0] is not None
            ]
        )
        values = np.array(
            [float(r[0]) for r in conn.execute(f"SELECT {col} FROM {table} {cond}").fetchall()
             if r[0] is not None]
        )  # fmt: skip
    if not clamps:
        return f"| {label} | (no clamp chosen: a per-unit cap over its groups instead) |"
    top = next(float(it.grid[-1]) for it in auto_items(q.a) if it.kind == "value_hi")
    per_unit, values = np.minimum(per_unit, top), np.minimum(values, top)  # the declared range
    c = statistics.median(clamps)
    above = statistics.median([int((per_unit > x).sum()) for x in clamps])
    cut = float(np.clip(values - c, 0, None).sum() / values.sum())
    p50, p90, p99 = np.percentile(per_unit, [50, 90, 99])
    return (
        f"| {label} | {c:,.0f} | {p50:,.0f} | {p90:,.0f} | {p99:,.0f} | {per_unit.max():,.0f} | "
        f"{c / p99:.2f} | {above:,.0f} of {per_unit.size:,} | {cut:.3%} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--units", type=int, default=12_000)
    args = ap.parse_args()
    lines = [
        "| query | clamp (median draw) | unit max p50 | p90 | p99 | max | clamp / p99 | "
        "units above the clamp | value mass cut |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cluster = start_cluster()
    try:
        dsn = cluster.dsn()
        load(dsn, args.units)
        engine = Engine(Policy.model_validate(POLICY), dsn, pool_size=2)
        for spec in BENCH:
            lines.append(row(engine, dsn, spec, args.runs))
            print(lines[-1], flush=True)
        engine.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE clamp_demo")
        demo = psycopg.conninfo.make_conninfo(dsn, dbname="clamp_demo")
        load_demo(demo)
        engine = Engine(load_policy(DEMO_POLICY), demo, pool_size=2)
        for spec in DEMO:
            lines.append(row(engine, demo, spec, args.runs))
            print(lines[-1], flush=True)
        engine.close()
    finally:
        cluster.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Engine overhead: each query plain on PostgreSQL vs through the DP engine, in one run.

    python bench/engine.py [--repeat K] [--plan-repeat K] [--plan-only] [--policy FILE]

Starts its own PostgreSQL with the demo data (or uses DPSQL_BENCH_DSN), then for each query prints
the median time of: the plain SQL on PostgreSQL, the rewritten (bounded) SQL on PostgreSQL, and the
whole engine (parse/plan/noise/post-process, no ledger); ratios are against the plain SQL.
Decomposable measures (COUNT, SUM, AVG, VAR, STDDEV, COUNT(DISTINCT unit)) are bounded on partial
aggregates per (unit, group) (dpsql/sql/rewrite/bound_partials.py); the last queries keep rows.
Under the demo's ``auto`` bounds the engine (no ledger: nothing stored) chooses them at every
execution, a per-unit histogram query each time, and "rewritten" is the SQL before they are
chosen; ``--policy`` with fixed bounds (e.g. clamp: bounds) compares the SQL that really runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dpsql.demo import POLICY, load_demo
from dpsql.engine import Engine
from dpsql.execute.embedded import start_cluster
from dpsql.policy import load_policy
from dpsql.session import SessionContext

QUERIES = [
    "SELECT COUNT(*) FROM purchases",
    "SELECT AVG(amount) FROM purchases WHERE quantity > 2",
    "SELECT category, COUNT(*), SUM(amount) FROM purchases GROUP BY category",
    "SELECT region, COUNT(DISTINCT user_id) FROM purchases GROUP BY region",
    "SELECT purchased_at, COUNT(*) FROM purchases GROUP BY purchased_at",
    "SELECT sex, AVG(income), STDDEV(age) FROM pums GROUP BY sex",
    # not decomposable: contribution bounding keeps rows (one sort)
    "SELECT category, COUNT(DISTINCT region) FROM purchases GROUP BY category",
    "SELECT category, PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases "
    "GROUP BY category",
]


# statements of several DP leaves (dpsql/sql/tree.py): leaves + post-processing in PostgreSQL
TREE_QUERIES = [
    "SELECT category, SUM(revenue) FROM (SELECT category, region, SUM(amount) AS revenue "
    "FROM purchases GROUP BY 1, 2) AS virtual_table GROUP BY category",
    "WITH r AS (SELECT category, SUM(amount) AS rev FROM purchases GROUP BY 1), "
    "n AS (SELECT category, COUNT(*) AS c FROM purchases GROUP BY 1) "
    "SELECT r.category, rev, c FROM r JOIN n ON n.category = r.category",
]


def plan_time(engine: Engine, session: SessionContext, q: str, repeat: int) -> float:
    """Median seconds to prepare (parse, classify, analyze or split) and plan ``q``, uncached."""

    def once() -> None:
        p = engine.prepare_in_scope(q)
        if getattr(p, "split", None) is not None:
            from dpsql.execute.tree import leaf_plans

            leaf_plans(engine, p.leaves, session)
        else:
            engine.plan(p, session)

    return timed(once, repeat)


def plan_table(engine: Engine, session: SessionContext, repeat: int) -> Table:
    """Plan time per statement; for a tree, also its leaves planned alone as flat statements
    and what the tree adds to them (splitting, preparing each leaf, checking the post-processing)."""
    t = Table(title="plan time: prepare + plan, uncached (median ms over --plan-repeat runs)")
    for h in ("query", "leaves", "plan ms", "leaves alone ms", "tree adds ms", "engine ms"):
        t.add_column(h)
    for q in QUERIES + TREE_QUERIES:
        try:
            p = engine.prepare(q)
        except Exception as e:  # a tree statement on a dpsql without the planner
            t.add_row(q[:60], "-", f"refused: {type(e).__name__}", "-", "-", "-")
            continue
        leaves = getattr(p, "leaves", ())
        pt = plan_time(engine, session, q, repeat)
        alone, added = "-", "-"
        if leaves:
            each = sum(plan_time(engine, session, leaf.text, repeat) for leaf in leaves)
            alone, added = f"{each * 1000:.2f}", f"{(pt - each) * 1000:.2f}"
        full = timed(lambda p=p: engine.execute(p, session), 7)
        t.add_row(
            q[:60], str(len(leaves) or 1), f"{pt * 1000:.2f}", alone, added, f"{full * 1000:.1f}"
        )
    return t


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--plan-repeat", type=int, default=200)
    ap.add_argument("--plan-only", action="store_true", help="only the plan-time table")
    ap.add_argument(
        "--policy",
        default=str(POLICY),
        help="policy file over the demo's tables (default: the demo's, with auto bounds: without "
        "a ledger the engine then chooses them again at every execution)",
    )
    args = ap.parse_args()
    dsn = os.environ.get("DPSQL_BENCH_DSN")
    cluster = None
    if not dsn:
        cluster = start_cluster()
        dsn = cluster.dsn()
        load_demo(dsn)
    engine = Engine(load_policy(args.policy), dsn)
    session = SessionContext(analyst="analyst")
    t = Table(title="dpsql engine overhead (median seconds; ratio vs plain PostgreSQL)")
    for h in ("query", "plain", "rewritten", "ratio", "engine", "ratio"):
        t.add_column(h)
    try:
        Console().print(plan_table(engine, session, args.plan_repeat))
        if args.plan_only:
            return
        with psycopg.connect(dsn) as conn:
            for q in QUERIES:
                p = engine.prepare(q)
                assert p.analysis is not None
                rewritten = engine.private_sql(p, p.analysis)
                plain = timed(lambda q=q: conn.execute(q).fetchall(), args.repeat)
                rw = timed(lambda s=rewritten: conn.execute(s).fetchall(), args.repeat)
                full = timed(lambda p=p: engine.execute(p, session), args.repeat)
                t.add_row(
                    q[:60],
                    f"{plain:.4f}",
                    f"{rw:.4f}",
                    f"{rw / plain:.1f}x",
                    f"{full:.4f}",
                    f"{full / plain:.1f}x",
                )
    finally:
        engine.close()
        if cluster:
            cluster.stop()
    Console().print(t)


if __name__ == "__main__":
    main()

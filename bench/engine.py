"""Engine overhead: each query plain on PostgreSQL vs through the DP engine, in one run.

    python bench/engine.py [--repeat K] [--plan-repeat K] [--plan-only] [--policy FILE]
    python bench/engine.py --compare REV [--rounds N] [--repeat K] [--policy FILE] [--policy-now FILE]
    python bench/engine.py --fresh [--compare REV ...]   # new texts: prepare + execute, CPU
    ... --only TEXT   # only the queries (or --fresh shapes) whose text (name) contains TEXT

Starts its own PostgreSQL with the demo data (or uses DPSQL_BENCH_DSN), then for each query prints
the median time of: the plain SQL on PostgreSQL, the rewritten (bounded) SQL on PostgreSQL, and the
whole engine (parse/plan/noise/post-process, no ledger); ratios are against the plain SQL.
Decomposable measures (COUNT, SUM, AVG, VAR, STDDEV, COUNT(DISTINCT unit)) are bounded on partial
aggregates per (unit, group) (dpsql/sql/rewrite/bound_partials.py); the last queries keep rows.
Under the demo's ``auto`` bounds the engine (no ledger: nothing stored) chooses them at every
execution, a per-unit histogram query each time, and "rewritten" is the SQL before they are
chosen; ``--policy`` with fixed bounds (e.g. clamp: bounds) compares the SQL that really runs.

``--compare REV``: the engine at git revision REV (or a checkout's path) against this tree, on
one PostgreSQL, in ``--rounds`` interleaved rounds (a process per tree and round, each importing
its own tree's dpsql; the order alternates). Per query: the plain SQL's median time (measured by
both processes), the engine's median wall time and its median CPU time per execution (the
benchmark process's ``time.process_time``: parse, plan, noise, post-processing and the client
side, not PostgreSQL's), and the ratios now / REV (median over rounds, with their range).
Policy: REV's demo policy unless ``--policy``; ``--policy-now`` gives this tree another (e.g.
REV's with ``clamp: bounds``, REV's behaviour where this tree has a new default).

``--fresh``: fresh private statements instead (:data:`FRESH`: 8 shapes, a new text each time,
so nothing prepared, planned or written for an earlier one is reused): the median process CPU
of ``engine.prepare`` + ``execute`` per statement, no ledger; with ``--compare``, per shape and
tree, and the ratios now / REV.
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

# this tree's dpsql, or (a --compare round) the tree the environment names
sys.path.insert(
    0, os.environ.get("DPSQL_BENCH_TREE") or str(Path(__file__).resolve().parent.parent)
)

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


# fresh private statements: a new text each time (the constant {k} differs), so nothing of an
# earlier statement's preparation, plan or SQL is reused; in-process, no ledger
FRESH = {
    "COUNT": "SELECT COUNT(*) FROM purchases WHERE amount < {k}",
    "perf18": "SELECT category, COUNT(*), AVG(amount) FROM purchases WHERE amount < {k} "
    "GROUP BY category",
    "by category": "SELECT category, COUNT(*), SUM(amount), AVG(amount) FROM purchases "
    "WHERE amount < {k} GROUP BY category",
    "partition selection": "SELECT purchased_at, COUNT(*) FROM purchases WHERE amount < {k} "
    "GROUP BY purchased_at",
    "COUNT DISTINCT": "SELECT region, COUNT(DISTINCT user_id) FROM purchases "
    "WHERE amount < {k} GROUP BY region",
    "percentile": "SELECT category, PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount) "
    "FROM purchases WHERE amount < {k} GROUP BY category",
    "join": "SELECT r.name, COUNT(*) FROM purchases AS p JOIN regions AS r ON p.region = r.code "
    "WHERE p.amount < {k} GROUP BY r.name",
    "pums": "SELECT sex, AVG(income), STDDEV(age) FROM pums WHERE income < {k} GROUP BY sex",
}


def fresh_json(dsn: str, policy: str, repeat: int, start: int) -> None:
    """One --fresh round: per shape, the median process CPU of ``engine.prepare`` + ``execute``
    of ``repeat`` new texts (after one warm-up text), as JSON."""
    import json

    engine = Engine(load_policy(policy), dsn)
    session = SessionContext(analyst="analyst")
    out = {}
    try:
        for name, shape in FRESH.items():
            texts = iter(shape.format(k=1_000_000 + start + i) for i in range(repeat + 1))

            def once(texts=texts) -> None:  # type: ignore[no-untyped-def]
                engine.execute(engine.prepare(next(texts), "analyst"), session)

            out[name] = {"cpu": timed(once, repeat, time.process_time), "plain": 1.0,
                         "engine": 1.0}  # fmt: skip
    finally:
        engine.close()
    print(json.dumps(out))


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


def timed(fn, repeat: int, clock=time.perf_counter) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm
    out = []
    for _ in range(repeat):
        t = clock()
        fn()
        out.append(clock() - t)
    return statistics.median(out)


def measure_json(dsn: str, policy: str, repeat: int) -> None:
    """One --compare round in this process: per query, plain and engine medians, as JSON."""
    import json

    engine = Engine(load_policy(policy), dsn)
    session = SessionContext(analyst="analyst")
    out = {}
    try:
        with psycopg.connect(dsn) as conn:
            for q in QUERIES:
                p = engine.prepare(q)
                plain = timed(lambda q=q: conn.execute(q).fetchall(), repeat)
                cpu = timed(lambda p=p: engine.execute(p, session), repeat, time.process_time)
                full = timed(lambda p=p: engine.execute(p, session), repeat)
                out[q] = {"plain": plain, "engine": full, "cpu": cpu}
    finally:
        engine.close()
    print(json.dumps(out))


def compare(
    rev: str,
    rounds: int,
    repeat: int,
    policy: str | None,
    now: str | None,
    fresh: bool = False,
    only: list[str] | None = None,
) -> None:
    """``--compare``: see the module's docstring."""
    import json
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from proxy_compare import ROOT, checkout

    dsn = os.environ.get("DPSQL_BENCH_DSN")
    cluster = None
    if not dsn:
        cluster = start_cluster()
        dsn = cluster.dsn()
        load_demo(dsn)
    med = statistics.median
    try:
        with checkout(rev) as base:
            pols = {"base": policy or str(base / "dpsql" / "demo" / "policy.yaml")}
            pols["now"] = now or pols["base"]
            label = subprocess.run(["git", "-C", str(base), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()  # fmt: skip
            print(f"engine at {label} against this tree; policy {pols['base']}"
                  f"{f' (this tree: {now})' if now else ''}; {rounds} rounds of --repeat "
                  f"{repeat}; load average before: {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
            got: dict[str, list[dict[str, dict[str, float]]]] = {"base": [], "now": []}
            for r in range(rounds):
                for key in ("base", "now") if r % 2 == 0 else ("now", "base"):
                    tree = base if key == "base" else ROOT
                    cmd = [sys.executable, __file__, "--measure-json", "--repeat", str(repeat),
                           "--policy", pols[key]]  # fmt: skip
                    for t in only or ():
                        cmd += ["--only", t]
                    if fresh:  # new texts in every process
                        cmd += ["--fresh", "--start", str(1000 * (2 * r + (key == "now")))]
                    env = {**os.environ, "DPSQL_BENCH_TREE": str(tree), "DPSQL_BENCH_DSN": dsn,
                           "PYTHONPATH": str(tree)}  # fmt: skip
                    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if res.returncode != 0:  # say why (a round's process failed)
                        raise SystemExit(f"round {r + 1}, {key} tree failed:\n{res.stderr[-3000:]}")
                    got[key].append(json.loads(res.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1}/{rounds}, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if cluster:
            cluster.stop()
    if fresh:
        print(f"\n| fresh shape | {label} CPU ms | now CPU ms | CPU now/{label} (range) |")
        print("|---|---|---|---|")
        for q in FRESH:
            b, n = [x[q]["cpu"] for x in got["base"]], [x[q]["cpu"] for x in got["now"]]
            cr = [y / x for x, y in zip(b, n, strict=True)]
            print(f"| {q} | {med(b) * 1000:.2f} | {med(n) * 1000:.2f} | {med(cr):.2f} "
                  f"({min(cr):.2f}-{max(cr):.2f}) |")  # fmt: skip
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")
        return
    print(
        f"\n| query | plain ms | {label} ms | now ms | {label} / plain | now / plain "
        f"| wall now/{label} (range) | {label} CPU ms | now CPU ms | CPU now/{label} (range) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for q in QUERIES:
        b, n = [x[q] for x in got["base"]], [x[q] for x in got["now"]]
        plain = med([x["plain"] for x in b + n]) * 1000
        be, ne = med([x["engine"] for x in b]) * 1000, med([x["engine"] for x in n]) * 1000
        bc, nc = med([x["cpu"] for x in b]) * 1000, med([x["cpu"] for x in n]) * 1000
        wr = [y["engine"] / x["engine"] for x, y in zip(b, n, strict=True)]
        cr = [y["cpu"] / x["cpu"] for x, y in zip(b, n, strict=True)]
        print(f"| {q[:70]} | {plain:.1f} | {be:.1f} | {ne:.1f} | {be / plain:.2f} "
              f"| {ne / plain:.2f} | {med(wr):.2f} ({min(wr):.2f}-{max(wr):.2f}) | {bc:.1f} "
              f"| {nc:.1f} | {med(cr):.2f} ({min(cr):.2f}-{max(cr):.2f}) |")  # fmt: skip
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


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
    ap.add_argument("--compare", metavar="REV", help="this tree against REV (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="--compare: interleaved rounds")
    ap.add_argument("--policy-now", help="--compare: this tree's policy (default: REV's)")
    ap.add_argument("--measure-json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fresh", action="store_true",
                    help="fresh private statements (a new text each, prepared and executed; "
                    "CPU per statement): alone, or with --compare")  # fmt: skip
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--only", action="append", metavar="TEXT",
                    help="only the queries (--fresh: shapes) containing TEXT (repeatable); "
                    "a loaded machine runs the whole list for many minutes")  # fmt: skip
    args = ap.parse_args()
    if args.only:  # the --compare rounds' processes get the same option
        QUERIES[:] = [q for q in QUERIES if any(t in q for t in args.only)]
        for name in [n for n in FRESH if not any(t in n for t in args.only)]:
            del FRESH[name]
    if args.compare:
        pol = args.policy if args.policy != str(POLICY) else None
        now = str(Path(args.policy_now).resolve()) if args.policy_now else None
        pol = pol and str(Path(pol).resolve())
        compare(args.compare, args.rounds, args.repeat, pol, now, args.fresh, args.only)
        return
    dsn = os.environ.get("DPSQL_BENCH_DSN")
    if args.measure_json:
        assert dsn
        if args.fresh:
            fresh_json(dsn, args.policy, args.repeat, args.start)
        else:
            measure_json(dsn, args.policy, args.repeat)
        return
    cluster = None
    if not dsn:
        cluster = start_cluster()
        dsn = cluster.dsn()
        load_demo(dsn)
    if args.fresh:
        try:
            fresh_json(dsn, args.policy, args.repeat, args.start)
        finally:
            if cluster:
                cluster.stop()
        return
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

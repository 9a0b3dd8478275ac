"""Where a repeated private statement's time goes: per ``bench/engine.py`` query, each round trip
of one execution (what it sends, and the CPU its PostgreSQL backend spent on it) and the engine's
own Python CPU, in this tree and, with ``--tree``, at other revisions on the same PostgreSQL.

    python bench/statement_parts.py [--policy FILE] [--tree REV[=POLICY] ...] [--repeat K]
        [--only TEXT]
    python bench/statement_parts.py --policy bench/policy_5e50bd1.yaml --tree 5e50bd1 --only pums

The loop is ``bench/engine.py``'s (one prepared statement executed again and again, no ledger),
so the rows explain its table. A round trip is one psycopg ``Cursor.execute`` (every statement
the engine sends: ``Backend.run``; each waits for its results); its backend's CPU is read from
``/proc/<pid>/schedstat`` (the PostgreSQL this tool starts, or ``DPSQL_BENCH_DSN`` on this
machine) before and after it. Unlike wall time it hardly moves with the machine's load; a
parallel worker's CPU is not counted (its leader's is): ``--serial`` runs every tree's statements
without parallel workers (``max_parallel_workers_per_gather = 0``), so that a statement's backend
CPU is all its CPU (5e50bd1's GROUP BY purchased_at sorted its rows in a parallel worker: 104.6 ms
of its leader's CPU, 141.7 ms serial; session 28). Medians over ``--repeat`` executions
after ``--warm`` more (psycopg prepares a text after 5 executions on a connection: the catalog
read is then a prepared statement, as in a long-running proxy; dpsql's private query, with a fresh
salt each time, never is).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(
    0, os.environ.get("DPSQL_BENCH_TREE") or str(Path(__file__).resolve().parent.parent)
)


def _backend_ms(pid: int) -> float:
    """CPU time (ms) the backend ``pid`` has run so far (Linux ``/proc/<pid>/schedstat``)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6


def _kind(text: str) -> str:
    """A short name for what a round trip sends."""
    words = " ".join(text.split())
    if "UNNEST(" in words:
        return "post-processing"
    if "_dp_" in words and ";" in words:
        return "private query + catalog re-read"
    if "_dp_" in words:
        return "private query"
    if "pg_catalog" in words:
        return "catalog read"
    return words[:40]


def parts_json(dsn: str, policy: str, repeat: int, warm: int) -> None:
    """One tree's process: per query, the medians of its trips' backend CPU and Python CPU."""
    import psycopg

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine import QUERIES

    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    trips: list[tuple[str, float]] = []  # this execution's (what, its backend's CPU ms)
    real = psycopg.Cursor.execute

    def execute(self, query, *a, **kw):  # type: ignore[no-untyped-def]
        pid = self.connection.info.backend_pid
        at = _backend_ms(pid)
        try:
            return real(self, query, *a, **kw)
        finally:
            text = query if isinstance(query, str) else query.as_string(self.connection)
            trips.append((_kind(text), _backend_ms(pid) - at))

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    engine = Engine(load_policy(policy), dsn)
    session = SessionContext(analyst="analyst")
    out: dict[str, dict[str, object]] = {}
    try:
        for q in QUERIES:
            p = engine.prepare(q)
            for _ in range(warm):
                engine.execute(p, session)
            runs: list[list[tuple[str, float]]] = []
            cpu: list[float] = []
            for _ in range(repeat):
                del trips[:]
                c = time.process_time()
                engine.execute(p, session)
                cpu.append((time.process_time() - c) * 1000)
                runs.append(list(trips))
            names = [w for w, _ in max(runs, key=len)]
            same = [r for r in runs if [w for w, _ in r] == names]
            per = [statistics.median(r[i][1] for r in same) for i in range(len(names))]
            out[q] = {"trips": list(zip(names, per, strict=True)), "python": statistics.median(cpu)}
    finally:
        engine.close()
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", default=[],
                    help="also at this git revision (REV or REV=POLICY: under that policy)")  # fmt: skip
    ap.add_argument("--policy", help="this tree's policy (default: its demo policy)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--warm", type=int, default=8, help="executions before the measured ones")
    ap.add_argument("--only", action="append", metavar="TEXT",
                    help="only the queries containing TEXT (repeatable)")  # fmt: skip
    ap.add_argument("--serial", action="store_true",
                    help="no parallel workers: a statement's backend CPU is all its CPU")  # fmt: skip
    ap.add_argument("--parts-json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serial:  # libpq reads it for every connection, the children's too
        os.environ["PGOPTIONS"] = (
            os.environ.get("PGOPTIONS", "") + " -c max_parallel_workers_per_gather=0"
        ).strip()
    dsn = os.environ.get("DPSQL_BENCH_DSN")
    if args.parts_json:
        assert dsn and args.policy
        if args.only:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            import engine

            engine.QUERIES[:] = [q for q in engine.QUERIES if any(t in q for t in args.only)]
        parts_json(dsn, args.policy, args.repeat, args.warm)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from proxy_compare import per_tree_json

    def child(policy: str) -> list[str]:
        cmd = ["--parts-json", "--repeat", str(args.repeat), "--warm", str(args.warm),
               "--policy", policy]  # fmt: skip
        for t in args.only or ():
            cmd += ["--only", t]
        return cmd

    results = per_tree_json(__file__, args.tree, args.policy, child)
    workers = ("no parallel workers" if args.serial
               else "parallel workers allowed, their CPU not counted: --serial counts it")  # fmt: skip
    print(f"load average: {os.getloadavg()[0]:.2f}; medians over {args.repeat} executions "
          f"(backend CPU per round trip, the engine's Python CPU; ms; {workers})\n")  # fmt: skip
    print("| query | tree | round trips: what (backend CPU ms) | backend ms | Python ms |")
    print("|---|---|---|---|---|")
    for q in results["now"]:
        for label, got in results.items():
            if q not in got:
                continue
            trips = got[q]["trips"]
            assert isinstance(trips, list)
            cells = "; ".join(f"{w} ({ms:.2f})" for w, ms in trips)
            total = sum(ms for _, ms in trips)
            print(f"| {q[:60]} | {label} | {len(trips)}: {cells} | {total:.2f} "
                  f"| {got[q]['python']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()

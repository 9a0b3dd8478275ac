"""Instructions the proxy executes per statement, at another revision and at this tree (callgrind).

    python bench/proxy_instructions.py [--compare REV] [--n 300] [--paths P,...]
        [--policy FILE] [--policy-now FILE] [--dsn DSN]

CPU time on a shared machine moves with the load (other processes' cache and memory traffic,
frequency); the number of instructions does not. For each path (``public-simple``,
``public-extended``, ``public-prepared``, ``private-cached-simple``, ``private-cached-prepared``,
``private-fresh-simple``: a new DP aggregate each time, charged, run upstream and noised; not in
the default ``--paths``: pass it)
``dpsql serve`` runs under ``valgrind --tool=callgrind --instr-atstart=no`` as in production
(statement log on, one process), 50 statements warm it up, instrumentation is switched on
(``callgrind_control -i on``) for ``--n`` sequential statements of one libpq client and off
again; the count is valgrind's "Collected" total over all the server's threads, divided by
``--n``. With ``--compare REV`` (a git revision or a checkout's path) REV's server is measured
the same way, under REV's demo policy by default (``--policy-now`` for this tree's, e.g.
``bench/policy_5e50bd1.yaml``). Needs valgrind; each server start takes a minute under it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from proxy_compare import ROOT, checkout  # noqa: E402
from references import free_port  # noqa: E402

PUBLIC = b"SELECT name FROM regions WHERE code = $1"
PRIVATE = b"SELECT category, COUNT(*) AS n, AVG(amount) AS avg FROM purchases GROUP BY category"
FRESH = ("SELECT category, COUNT(*) AS n, AVG(amount) AS avg FROM purchases WHERE amount < %d "
         "GROUP BY category")  # fmt: skip
PATHS = ("public-simple", "public-extended", "public-prepared", "private-cached-simple",
         "private-cached-prepared")  # fmt: skip


def _runner(pg: pq.PGconn, path: str):  # type: ignore[no-untyped-def]
    if path == "private-fresh-simple":  # a new text each time (none a free repeat of another)
        pg.exec_(b"SET dpsql.epsilon = 0.001")  # a small charge each
        texts = ((FRESH % (1_000_000 + i)).encode() for i in itertools.count())
        return lambda: pg.exec_(next(texts))
    if path == "public-simple":
        return lambda: pg.exec_(b"SELECT name FROM regions WHERE code = 'N'")
    if path == "public-extended":
        return lambda: pg.exec_params(PUBLIC, [b"N"])
    sql = PUBLIC if path == "public-prepared" else PRIVATE
    if path.endswith("prepared"):
        pg.prepare(b"s", sql)
        params = [b"N"] if sql is PUBLIC else []
        return lambda: pg.exec_prepared(b"s", params)
    return lambda: pg.exec_(PRIVATE)


def instructions(tree: Path, policy: str, dsn: str, path: str, n: int) -> float:
    """Instructions per statement of ``path`` through ``dpsql serve`` from ``tree``."""
    ledger = f"dpsql_ledger_cg_{abs(hash((str(tree), path))) % 10**8}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {ledger}")
        c.execute(f"CREATE DATABASE {ledger}")
    work = Path(tempfile.mkdtemp(prefix="dpsql-cg-"))
    port = free_port()
    log = open(work / "log", "w")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no",
         f"--callgrind-out-file={work / 'callgrind.out'}", sys.executable, "-m", "dpsql", "serve",
         "--policy", policy, "--upstream", dsn, "--listen", f"127.0.0.1:{port}",
         "--ledger", psycopg.conninfo.make_conninfo(dsn, dbname=ledger),
         "--log-level", "INFO", "--max-sessions-per-analyst", "100"],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, stdout=log, stderr=log,
    )  # fmt: skip
    try:
        db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        analyst = f"host=127.0.0.1 port={port} user=analyst password=analyst dbname={db}"
        deadline = time.monotonic() + 600
        while True:
            try:
                conn = psycopg.connect(analyst + " sslmode=disable", autocommit=True)
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"dpsql serve under valgrind did not start: {work}/log"
                    ) from None
                time.sleep(1)
        run = _runner(conn.pgconn, path)
        for i in range(50 + n):
            if i == 50:
                subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                               capture_output=True)  # fmt: skip
            res = run()
            if res.status != pq.ExecStatus.TUPLES_OK:
                raise SystemExit(f"{path}: {(res.error_message or b'').decode()}")
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True,
                       capture_output=True)  # fmt: skip
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(300)
        log.close()
    got = re.findall(r"Collected : (\d+)", (work / "log").read_text())
    subprocess.run(["rm", "-rf", str(work)])
    return int(got[-1]) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", metavar="REV")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--policy", help="policy file (default: the demo's, REV's with --compare)")
    ap.add_argument("--policy-now", help="--compare: this tree's policy (default: --policy's)")
    ap.add_argument("--dsn", help="PostgreSQL to use (default: a throwaway embedded cluster)")
    a = ap.parse_args()
    from dpsql.demo import load_demo

    cluster, dsn = None, a.dsn
    if dsn is None:
        from dpsql.execute.embedded import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn()
    try:
        load_demo(dsn)
        paths = [p.strip() for p in a.paths.split(",") if p.strip()]
        if not a.compare:
            policy = a.policy or str(ROOT / "dpsql" / "demo" / "policy.yaml")
            for p in paths:
                print(f"| {p} | {instructions(ROOT, policy, dsn, p, a.n):,.0f} |", flush=True)
            return
        with checkout(a.compare) as base:
            pol = a.policy or str(base / "dpsql" / "demo" / "policy.yaml")
            now = str(Path(a.policy_now).resolve()) if a.policy_now else pol
            print(f"instructions per statement, {a.n} sequential statements; {a.compare} policy "
                  f"{pol}, this tree {now}\n\n| path | {a.compare} | now | now / {a.compare} |\n"
                  "|---|---|---|---|", flush=True)  # fmt: skip
            for p in paths:
                b = instructions(base, pol, dsn, p, a.n)
                t = instructions(ROOT, now, dsn, p, a.n)
                print(f"| {p} | {b:,.0f} | {t:,.0f} | {t / b:.3f} |", flush=True)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()

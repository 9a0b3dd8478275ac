"""Latency the dpsql proxy adds, and its throughput relative to PostgreSQL (not part of pytest).

One run, one PostgreSQL (the embedded test cluster, or --dsn), the demo data and policy; ``dpsql
serve`` runs as a separate process, clients are separate processes (psycopg, server-side prepared
statements). For each scenario:

* latency: ``--n`` sequential executions through the proxy and directly, p50 / p99, and the
  difference of the medians (the latency the proxy adds);
* throughput: queries per second with 1, 8 and 32 concurrent clients for ``--seconds`` each, through
  the proxy and directly, and their ratio.

Scenarios:

* ``public prepared``: a public-table lookup; directly, the same SQL.
* ``private cached``: a DP aggregate repeated (a free repeat answered from the ledger);
  directly, the rewritten (clamped, contribution-bounded) SQL the engine would run.
* ``private fresh``: distinct DP aggregates (each one charged to the ledger at epsilon 0.01, run
  upstream, noised); directly, each one's rewritten SQL. Latency only.

Usage: ``python bench/proxy_latency.py [--dsn DSN] [--n 2000] [--seconds 5]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PUBLIC = "SELECT name FROM regions WHERE code = %s"
PRIVATE = "SELECT category, COUNT(*) AS n, AVG(amount) AS avg FROM purchases GROUP BY category"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_proxy(upstream: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    from dpsql.demo import POLICY

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpsql", "serve", "--policy", str(POLICY), "--upstream", upstream,
         "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING",
         "--max-sessions-per-analyst", "100", *extra],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("dpsql serve did not start")
        time.sleep(0.1)
    dsn = f"host=127.0.0.1 port={port} user=analyst password=analyst dbname=demo sslmode=disable"
    return proc, dsn


def _latencies(dsn: str, sql: str, params: tuple[object, ...], n: int) -> list[float]:
    out = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(20):
            conn.execute(sql, params, prepare=True).fetchall()
        for _ in range(n):
            t0 = time.perf_counter()
            conn.execute(sql, params, prepare=True).fetchall()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def _latencies_many(dsn: str, sqls: list[str], setup: str | None = None) -> list[float]:
    out = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        if setup:
            conn.execute(setup)
        for sql in sqls:
            t0 = time.perf_counter()
            conn.execute(sql).fetchall()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def _client(
    dsn: str, sql: str, params: tuple[object, ...], seconds: float, barrier: Any, out: Any
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql, params, prepare=True).fetchall()
        barrier.wait()
        done, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            conn.execute(sql, params, prepare=True).fetchall()
            done += 1
    out.put(done)


def _qps(dsn: str, sql: str, params: tuple[object, ...], clients: int, seconds: float) -> float:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(clients), ctx.SimpleQueue()
    procs = [
        ctx.Process(target=_client, args=(dsn, sql, params, seconds, barrier, out))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def _engine_latencies(dsn: str, sql: str, params: tuple[object, ...], n: int) -> list[float]:
    """engine.execute in-process (no wire): separates the engine's share of the added latency."""
    from dpsql.demo import POLICY
    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    engine = Engine(load_policy(POLICY), dsn, pool_size=2)
    try:
        prepared = engine.prepare(sql.replace("%s", "$1"))
        session = SessionContext(analyst="analyst")
        out = []
        for i in range(n + 20):
            t0 = time.perf_counter()
            engine.execute(prepared, session, params)
            if i >= 20:
                out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        engine.close()


def _engine_qps(dsn: str, sql: str, params: tuple[object, ...], seconds: float) -> float:
    """engine.execute from 8 threads in-process: the engine's own throughput ceiling."""
    import threading

    from dpsql.demo import POLICY
    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    engine = Engine(load_policy(POLICY), dsn, pool_size=8)
    prepared = engine.prepare(sql.replace("%s", "$1"))
    counts: list[int] = []

    def work() -> None:
        session, n, end = SessionContext(analyst="analyst"), 0, time.monotonic() + seconds
        while time.monotonic() < end:
            engine.execute(prepared, session, params)
            n += 1
        counts.append(n)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.close()
    return sum(counts) / seconds


def _pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1]


def _report_latency(name: str, proxy: list[float], direct: list[float]) -> None:
    p50p, p50d = statistics.median(proxy), statistics.median(direct)
    print(f"| {name} | {p50d:.3f} | {_pct(direct, 99):.3f} | {p50p:.3f} | {_pct(proxy, 99):.3f} "
          f"| {p50p - p50d:+.3f} | {_pct(proxy, 99) - _pct(direct, 99):+.3f} |")  # fmt: skip


def rewritten_sql(sql: str) -> str:
    from dpsql.demo import POLICY
    from dpsql.explain import explain
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    return explain(load_policy(POLICY), sql, SessionContext(analyst="analyst")).rewritten


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", help="PostgreSQL to use (default: a throwaway embedded cluster)")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", default="1,8,32")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-ups below
    from dpsql.demo import load_demo

    cluster = None
    dsn = a.dsn
    if dsn is None:
        from dpsql.execute.embedded import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn()
    procs = []
    try:
        load_demo(dsn)
        proxy_proc, proxy = _start_proxy(dsn, [])
        procs.append(proxy_proc)
        rewritten = rewritten_sql(PRIVATE)
        print(f"PostgreSQL {psycopg.connect(dsn).info.server_version}, "
              f"{os.cpu_count()} CPUs, n={a.n}, {a.seconds:g}s per throughput point\n")  # fmt: skip
        print("| scenario | direct p50 ms | direct p99 ms | proxy p50 ms | proxy p99 ms "
              "| added p50 ms | added p99 ms |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        scenarios = [
            ("public prepared", PUBLIC, ("N",), PUBLIC, ("N",)),
            ("private cached", PRIVATE, (), rewritten, ()),
        ]
        for name, psql, pp, dsql, dp in scenarios:
            n = a.n if name.startswith("public") else min(a.n, 20)  # the rewritten SQL is slow
            _report_latency(name, _latencies(proxy, psql, pp, n), _latencies(dsn, dsql, dp, n))
        fresh = [f"{PRIVATE.split(' GROUP BY')[0]} WHERE amount < {1000 + i} GROUP BY category"
                 for i in range(10)]  # fmt: skip
        _report_latency(
            "private fresh (charged, noised)",
            _latencies_many(proxy, fresh, "SET dpsql.epsilon = 0.01"),
            _latencies_many(dsn, [rewritten_sql(q) for q in fresh]),
        )
        eng = _engine_latencies(dsn, PUBLIC, ("N",), a.n)
        engine_qps = _engine_qps(dsn, PUBLIC, ("N",), a.seconds)
        print(
            f"\nengine.execute in-process on the public query: p50 {statistics.median(eng):.3f} ms, "
            f"p99 {_pct(eng, 99):.3f} ms (the rest of the added latency is the wire layer); "
            f"engine.execute in 8 threads: {engine_qps:,.0f} qps\n"
        )
        print("| scenario | clients | direct qps | proxy qps | ratio |")
        print("|---|---|---|---|---|")
        for name, psql, pp, dsql, dp in scenarios:
            for c in (int(x) for x in a.clients.split(",")):
                d = _qps(dsn, dsql, dp, c, a.seconds)
                p = _qps(proxy, psql, pp, c, a.seconds)
                print(f"| {name} | {c} | {d:,.0f} | {p:,.0f} | {p / d:.2f} |")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()

"""Latency the dpsql proxy adds, and its throughput relative to PostgreSQL (not part of pytest).

One run, one PostgreSQL (the embedded test cluster, or --dsn), the demo data and policy; ``dpsql
serve`` runs as a separate process, clients are separate processes (psycopg, server-side prepared
statements). For each scenario:

* latency: ``--n`` sequential executions through the proxy and directly, p50 / p99, and the
  difference of the medians (the latency the proxy adds);
* throughput: queries per second with 1, 8 and 32 concurrent clients (``--clients``) for
  ``--seconds`` each, through the proxy (with each ``--workers`` count) and directly (just
  before), their ratio,
  the per-query latency the proxy adds at that load (p50 / p99 over all clients' queries), and
  the proxy's CPU time per statement (user + system time of the proxy's processes over the run,
  divided by the statements answered): unlike queries per second it hardly depends on what else
  the machine runs, so it is the number to compare between versions of the proxy.

The proxy runs as in production: statement log on (INFO, to a file), default limits except
``--max-sessions-per-analyst 100``.

Scenarios:

* ``public prepared``: a public-table lookup; directly, the same SQL.
* ``private cached``: a DP aggregate repeated (a free repeat answered from the ledger);
  directly, the rewritten (clamped, contribution-bounded) SQL the engine would run.
* ``private fresh``: distinct DP aggregates (each one charged to the ledger, run upstream,
  noised); directly, each one's rewritten SQL. This is the analyst workload: its throughput ratio
  is the one that matters for DP queries; the public lookup's is the proxy's worst case.

Reference proxies (``bench/references.py``), measured in the same run with the direct load, in
both tables: ``null relay`` (``bench/null_relay.py``: a uvloop byte relay that parses nothing, the
floor of a Python proxy) and ``pgbouncer`` (session pooling; when the binary is installed). Every
proxy adds two socket hops whose CPU comes out of the cores PostgreSQL and the clients share, so
their ratios show what the machine allows any proxy; "ratio / null relay" is a proxy's ratio to
direct over the null relay's at the same point. Every throughput row (and every latency row)
measures direct PostgreSQL just before its proxy, since on a shared machine the load drifts
within seconds. ``--no-null-relay`` and ``--no-pgbouncer`` leave the references out.

``--policy FILE`` runs the proxy (and writes the rewritten SQL) under another policy than the
demo's, e.g. one with fixed contribution bounds: with the demo's ``auto`` bounds a fresh
statement also runs the bound choice's per-unit histogram (its own scan; docs/accuracy.md).

The private cached statement's proxy CPU at 5e50bd1 and now, interleaved on one cluster (issue
18: the repeated statement's memos, one-round-trip ledger lookup): docs/architecture.md, "A
repeated statement".

``--compare REV [--rounds 5] [--only PATHS] [--policy-now FILE]`` measures instead every path
(public lookup, private repeat, private fresh; simple, extended, prepared) at git revision REV and
at this tree, interleaved, proxy CPU per statement (``bench/proxy_compare.py``); the instructions
per statement, which do not move with the load: ``bench/proxy_instructions.py``.

Usage: ``python bench/proxy_latency.py [--dsn DSN] [--n 2000] [--seconds 5] [--workers 1,2]
[--clients 1,8,32] [--skip SCENARIOS] [--no-null-relay] [--no-pgbouncer] [--policy FILE]``
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from proxy_compare import Route, compare, start_proxy, tree_cpu  # noqa: E402  (bench/ is the script's dir)
from references import start_references  # noqa: E402

PUBLIC = "SELECT name FROM regions WHERE code = %s"
FRESH = 200
SETUP = "SET dpsql.epsilon = 0.001"  # fresh DP aggregates: a small charge each
PRIVATE = "SELECT category, COUNT(*) AS n, AVG(amount) AS avg FROM purchases GROUP BY category"


POLICY_FILE: list[str] = []  # --policy, when given


def _policy_file() -> str:
    from dpsql.demo import POLICY

    return POLICY_FILE[0] if POLICY_FILE else str(POLICY)


def _start_proxy(upstream: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    return start_proxy(ROOT, _policy_file(), upstream, extra)


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


@dataclass(frozen=True)
class Load:
    """What each client runs: one prepared statement, or (``sqls``) distinct statements in turn
    (client k runs sqls[k], sqls[k + clients], ...), after an optional ``setup`` statement."""

    sql: str = ""
    params: tuple[object, ...] = ()
    sqls: tuple[str, ...] = ()
    setup: str | None = None


def _client(dsn: str, load: Load, k: int, n: int, seconds: float, barrier: Any, out: Any) -> None:
    lat: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        if load.setup:
            conn.execute(load.setup)
        if not load.sqls:
            conn.execute(load.sql, load.params, prepare=True).fetchall()
        barrier.wait()
        start = time.monotonic()
        i, end = k, start + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            if load.sqls:
                conn.execute(load.sqls[i % len(load.sqls)]).fetchall()
                i += n
            else:
                conn.execute(load.sql, load.params, prepare=True).fetchall()
            lat.append((time.perf_counter() - t0) * 1000)
        elapsed = time.monotonic() - start
    out.put((lat, elapsed))


def _qps(dsn: str, load: Load, clients: int, seconds: float) -> tuple[float, list[float]]:
    """Queries per second over ``clients`` processes (all queries over the longest client's time,
    its last query included), and every query's latency (ms)."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(clients), ctx.SimpleQueue()
    procs = [
        ctx.Process(target=_client, args=(dsn, load, k, clients, seconds, barrier, out))
        for k in range(clients)
    ]
    for p in procs:
        p.start()
    got = [out.get() for _ in procs]
    for p in procs:
        p.join()
    lats = [x for lat, _ in got for x in lat]
    return len(lats) / max(e for _, e in got), lats


def _engine_latencies(dsn: str, sql: str, params: tuple[object, ...], n: int) -> list[float]:
    """engine.execute in-process (no wire): separates the engine's share of the added latency."""
    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    engine = Engine(load_policy(_policy_file()), dsn, pool_size=2)
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

    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    engine = Engine(load_policy(_policy_file()), dsn, pool_size=8)
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


def _report_latency(name: str, via: str, proxy: list[float], direct: list[float]) -> None:
    p50p, p50d = statistics.median(proxy), statistics.median(direct)
    print(f"| {name} | {via} | {p50d:.3f} | {_pct(direct, 99):.3f} | {p50p:.3f} | {_pct(proxy, 99):.3f} "
          f"| {p50p - p50d:+.3f} | {_pct(proxy, 99) - _pct(direct, 99):+.3f} |")  # fmt: skip


@functools.cache
def _policy() -> Any:
    from dpsql.policy import load_policy

    return load_policy(_policy_file())


def rewritten_sql(sql: str) -> str:
    from dpsql.explain.report import explain
    from dpsql.session import SessionContext

    return explain(_policy(), sql, SessionContext(analyst="analyst")).rewritten


def _fresh(n: int, start: int = 0) -> list[str]:
    """``n`` distinct private aggregates (none a free repeat of another)."""
    head = PRIVATE.split(" GROUP BY")[0]
    return [f"{head} WHERE amount < {1000 + start + i} GROUP BY category" for i in range(n)]


def routes(rewrite: Callable[[str], str]) -> list[Route]:
    """Every path ``--compare`` measures: (public lookup, private repeat, private fresh) x
    (simple, extended unnamed, prepared); a fresh statement is never prepared."""
    literal = PUBLIC.replace("%s", "'N'")
    public = PUBLIC.replace("%s", "$1")
    cached = [(PRIVATE, rewrite(PRIVATE))]
    repeat: dict[str, Any] = {"n_scale": 0.1, "direct_n": 5}
    once: dict[str, Any] = {"n_scale": 0.004, "direct_n": 5}

    def fresh(route: int) -> Callable[[int, int], list[tuple[str, str]]]:
        return lambda r, n: [(q, rewrite(q)) for q in _fresh(n, 100_000 * (2 * r + route + 1))]

    return [
        Route("public simple", "simple", lambda r, n: [(literal, literal)] * n),
        Route("public extended", "extended", lambda r, n: [(public, public)] * n, ("N",)),
        Route("public prepared", "prepared", lambda r, n: [(public, public)] * n, ("N",)),
        Route("private cached simple", "simple", lambda r, n: cached * n, **repeat),
        Route("private cached extended", "extended", lambda r, n: cached * n, **repeat),
        Route("private cached prepared", "prepared", lambda r, n: cached * n, **repeat),
        Route("private fresh simple", "simple", fresh(0), setup=SETUP, **once),
        Route("private fresh extended", "extended", fresh(1), setup=SETUP, **once),
    ]


@dataclass(frozen=True)
class Target:
    """Where clients connect: dpsql (one per ``--workers`` count, dpsql's load) or a reference
    proxy (``bench/references.py``, the direct load)."""

    proxy: str
    workers: str
    pid: int
    dsn: str

    @property
    def reference(self) -> bool:
        return self.proxy != "dpsql"


def _throughput(
    a: argparse.Namespace, dsn: str, targets: list[Target], scenarios: list[Any]
) -> None:
    print("| scenario | clients | direct qps | proxy | workers | proxy qps | ratio | ratio / null relay "
          "| added p50 ms | added p99 ms | proxy CPU us/statement |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    run = 0
    for name, pload, dload in scenarios:
        for c in (int(x) for x in a.clients.split(",")):
            relay = None
            for t in targets:
                d, dl = _qps(dsn, dload, c, a.seconds)  # paired: the load drifts between rows
                load = dload if t.reference else pload
                if not t.reference and pload.sqls and pload.setup:  # fresh: new ones every run
                    run += 1
                    load = Load(sqls=tuple(_fresh(FRESH, 10_000 * run)), setup=pload.setup)
                cpu0 = tree_cpu(t.pid)
                p, pl = _qps(t.dsn, load, c, a.seconds)
                cpu = (tree_cpu(t.pid) - cpu0) / max(len(pl), 1) * 1e6
                relay = p / d if t.proxy == "null relay" and d else relay
                head = f"| {name} | {c} | {d:,.1f} | {t.proxy} | {t.workers} | {p:,.1f}"
                if not pl or not dl:
                    print(f"{head} | - | - | - | - | - |")
                    continue
                vs_relay = f"{p / d / relay:.2f}" if relay else "-"
                added50 = statistics.median(pl) - statistics.median(dl)
                added99 = _pct(pl, 99) - _pct(dl, 99) if len(pl) > 1 and len(dl) > 1 else 0.0
                print(f"{head} | {p / d:.2f} | {vs_relay} | {added50:+.3f} | {added99:+.3f} "
                      f"| {cpu:,.0f} |", flush=True)  # fmt: skip


def _latency_table(
    a: argparse.Namespace, dsn: str, proxy: str, refs: list[Target], rewritten: str
) -> None:
    """Sequential latency, one client: dpsql and each reference proxy, each against a direct
    measurement taken just before it (the machine's load drifts between rows)."""
    print("| scenario | proxy | direct p50 ms | direct p99 ms | proxy p50 ms | proxy p99 ms "
          "| added p50 ms | added p99 ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    latency = [
        ("public prepared", PUBLIC, ("N",), PUBLIC, ("N",)),
        ("private cached", PRIVATE, (), rewritten, ()),
    ]
    for name, psql, pp, dsql, dp in latency:
        n = a.n if name.startswith("public") else min(a.n, 20)  # the rewritten SQL is slow
        direct = _latencies(dsn, dsql, dp, n)
        _report_latency(name, "dpsql", _latencies(proxy, psql, pp, n), direct)
        for r in refs:
            direct = _latencies(dsn, dsql, dp, n)
            _report_latency(name, r.proxy, _latencies(r.dsn, dsql, dp, n), direct)
    fresh = _fresh(10)
    fresh_direct = [rewritten_sql(q) for q in fresh]
    name = "private fresh (charged, noised)"
    direct = _latencies_many(dsn, fresh_direct)
    _report_latency(name, "dpsql", _latencies_many(proxy, fresh, SETUP), direct)
    for r in refs:
        direct = _latencies_many(dsn, fresh_direct)
        _report_latency(name, r.proxy, _latencies_many(r.dsn, fresh_direct), direct)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", help="PostgreSQL to use (default: a throwaway embedded cluster)")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--workers", default="1", help="proxy process counts to measure, e.g. 1,2")
    ap.add_argument("--skip", default="", help="comma-separated scenario names to leave out")
    ap.add_argument("--no-null-relay", action="store_true", help="leave out the null relay")
    ap.add_argument("--no-pgbouncer", action="store_true", help="leave out pgbouncer")
    ap.add_argument(
        "--policy", help="policy file (default: the demo's; its tables must be the demo's)"
    )
    ap.add_argument(
        "--compare",
        metavar="REV",
        help="instead: every path at git revision REV (or a checkout's path) against this tree, "
        "interleaved, proxy CPU per statement (bench/proxy_compare.py)",
    )
    ap.add_argument(
        "--policy-now", help="--compare: this tree's policy file (default: the same as REV's)"
    )
    ap.add_argument("--rounds", type=int, default=5, help="--compare: interleaved rounds")
    ap.add_argument("--only", default="", help="--compare: comma-separated paths to measure")
    a = ap.parse_args()
    if a.policy:
        POLICY_FILE.append(str(Path(a.policy).resolve()))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-ups below
    from dpsql.demo import load_demo

    cluster = None
    dsn = a.dsn
    if dsn is None:
        from dpsql.execute.embedded import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn()
    if a.compare:
        try:
            only = {x.strip() for x in a.only.split(",") if x.strip()}
            now = str(Path(a.policy_now).resolve()) if a.policy_now else None
            base = POLICY_FILE[0] if a.policy else None
            compare(a.compare, dsn, a.n, a.rounds, base, now, only, routes)
        finally:
            if cluster is not None:
                cluster.stop()
        return
    procs, refs = [], []
    try:
        load_demo(dsn)
        refs = start_references(dsn, not a.no_null_relay, not a.no_pgbouncer)
        targets = [Target(r.name, "-", r.pid, r.dsn) for r in refs]
        for w in (int(x) for x in a.workers.split(",")):
            proc, pdsn = _start_proxy(dsn, ["--workers", str(w)])
            targets.append(Target("dpsql", str(w), proc.pid, pdsn))
            procs.append(proc)
        proxy = next(t.dsn for t in targets if not t.reference)
        rewritten = rewritten_sql(PRIVATE)
        print(f"PostgreSQL {psycopg.connect(dsn).info.server_version}, "
              f"{os.cpu_count()} CPUs, n={a.n}, {a.seconds:g}s per throughput point, "
              f"load average before: {os.getloadavg()[0]:.2f}; reference proxies: "
              f"{', '.join(r.name for r in refs) or 'none'}\n")  # fmt: skip
        _latency_table(a, dsn, proxy, [t for t in targets if t.reference], rewritten)
        eng = _engine_latencies(dsn, PUBLIC, ("N",), a.n)
        engine_qps = _engine_qps(dsn, PUBLIC, ("N",), a.seconds)
        print(
            f"\nengine.execute in-process on the public query: p50 {statistics.median(eng):.3f} ms, "
            f"p99 {_pct(eng, 99):.3f} ms (the rest of the added latency is the wire layer); "
            f"engine.execute in 8 threads: {engine_qps:,.0f} qps\n"
        )
        many = _fresh(FRESH, start=10)  # more than the clients can run: every query is fresh
        scenarios = [
            ("public prepared", Load(PUBLIC, ("N",)), Load(PUBLIC, ("N",))),
            ("private cached", Load(PRIVATE), Load(rewritten)),
            ("private fresh", Load(sqls=tuple(many), setup=SETUP),
             Load(sqls=tuple(rewritten_sql(q) for q in many))),
        ]  # fmt: skip
        skip = {x.strip() for x in a.skip.split(",") if x.strip()}
        _throughput(a, dsn, targets, [s for s in scenarios if s[0] not in skip])
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
        for r in refs:
            r.stop()
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()

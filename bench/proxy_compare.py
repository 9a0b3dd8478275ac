"""``bench/proxy_latency.py --compare REV``: the proxy at another revision against this tree.

One PostgreSQL, the demo data; two ``dpsql serve`` processes (REV's code and this tree's), each
with a ledger database of its own, under the same policy (by default REV's demo policy: an older
policy file loads in newer code, not always the other way round; ``--policy-now`` gives this
tree another, e.g. REV's with a setting REV did not know that keeps this tree's behaviour REV's). Every path a client can take
is measured sequentially (one client, libpq calls, no client-side caching):

* ``simple``: the simple-query protocol (Query), the value written into the text;
* ``extended``: an unnamed statement (Parse/Bind/Describe/Execute/Sync every time);
* ``prepared``: a named statement prepared once, then Bind/Describe/Execute/Sync;

over a public-table lookup, a private aggregate repeated (a free repeat after the first) and
distinct private aggregates (each charged, run upstream, noised). Direct PostgreSQL runs the same
SQL for public statements and the rewritten (bounded) SQL for private ones.

Each path is measured in ``--rounds`` interleaved rounds (direct, REV, this tree; the two proxies'
order alternates between rounds, since the load of a shared machine drifts within seconds). The
main number is the proxy's own CPU time per statement (user + system of its process tree, from
/proc, over the round's statements): unlike wall time it hardly depends on what else the machine
runs. Direct PostgreSQL's is its backend's CPU per statement. Printed: per path, the medians
over rounds and the ratio this tree / REV (median of the rounds' ratios, with their range).

REV is any git revision (a detached worktree is made for it in a temporary directory and
removed afterwards) or the path of a checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import pq
from references import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its descendants (Linux): each live
    thread's time on a CPU from /proc/PID/task/TID/schedstat (nanoseconds; user + system), or
    where the kernel has no schedstat, /proc/PID/stat's user + system time (clock ticks). A
    thread that has exited is not counted by schedstat: the proxy's threads live as long as it."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
            try:
                for task in tasks:
                    with open(f"/proc/{p}/task/{task}/schedstat") as f:
                        total += int(f.read().split()[0]) / 1e9
            except FileNotFoundError:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
            for task in tasks:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def start_proxy(
    root: Path, policy: str, upstream: str, extra: list[str], ledger: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``dpsql serve`` from the checkout ``root`` (its code, not the installed package), as in
    production: statement log on (INFO, to a file), default limits except 100 sessions per
    analyst. Returns the process and the DSN an analyst connects with."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="dpsql-bench-", suffix=".log", delete=False)
    ledger_arg = ["--ledger", ledger] if ledger else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpsql", "serve", "--policy", policy, "--upstream", upstream,
         "--listen", f"127.0.0.1:{port}", "--log-level", "INFO",
         "--max-sessions-per-analyst", "100", *ledger_arg, *extra],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=log, stderr=log,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(_analyst(upstream, port), connect_timeout=2):
                break
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"dpsql serve ({root}) did not start; log: {log.name}") from None
            time.sleep(0.2)
    return proc, _analyst(upstream, port)


def _analyst(upstream: str, port: int) -> str:
    db = psycopg.conninfo.conninfo_to_dict(upstream)["dbname"]  # the one dpsql serves
    return f"host=127.0.0.1 port={port} user=analyst password=analyst dbname={db} sslmode=disable"


@contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A checkout of ``rev``: the directory itself when it is one, else a detached worktree."""
    if Path(rev).is_dir():
        yield Path(rev).resolve()
        return
    where = Path(tempfile.mkdtemp(prefix="dpsql-compare-")) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), rev], check=True
    )
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)])
        shutil.rmtree(where.parent, ignore_errors=True)


def per_tree_json(
    script: str,
    specs: list[str],
    policy: str | None,
    child_args: Callable[[str], list[str]],
    extra_env: Callable[[int], dict[str, str]] = lambda _i: {},
) -> dict[str, dict[str, object]]:
    """Run ``script`` once per tree (this one as "now", then each ``REV[=POLICY]`` of ``specs``)
    on one demo cluster (``DPSQL_BENCH_DSN`` or an embedded one started here): the child gets
    ``child_args(its policy's path)`` and prints its result as JSON on its last line."""
    from contextlib import ExitStack

    from dpsql.demo import load_demo
    from dpsql.execute.embedded import start_cluster

    dsn = os.environ.get("DPSQL_BENCH_DSN")
    cluster = None
    if not dsn:
        cluster = start_cluster()
        dsn = cluster.dsn()
        load_demo(dsn)
    results: dict[str, dict[str, object]] = {}
    try:
        with ExitStack() as stack:
            trees: list[tuple[str, Path, str | None]] = [("now", ROOT, policy)]
            for t in specs:
                rev, _, pol = t.partition("=")
                trees.append((rev, stack.enter_context(checkout(rev)), pol or None))
            for i, (label, tree, pol) in enumerate(trees):
                path = str(Path(pol or Path(tree) / "dpsql" / "demo" / "policy.yaml").resolve())
                env = {**os.environ, "DPSQL_BENCH_TREE": str(tree), "DPSQL_BENCH_DSN": dsn,
                       "PYTHONPATH": str(tree), **extra_env(i)}  # fmt: skip
                cmd = [sys.executable, script, *child_args(path)]
                res = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if res.returncode != 0:
                    raise SystemExit(f"{label} failed:\n{res.stderr[-3000:]}")
                results[label] = json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        if cluster:
            cluster.stop()
    return results


@dataclass(frozen=True)
class Route:
    """One way a client sends one kind of statement: ``texts(round)`` gives the statements of a
    round (one text repeated, or distinct ones), ``direct`` what PostgreSQL runs for each."""

    name: str
    protocol: str  # simple | extended | prepared
    texts: Callable[[int, int], list[tuple[str, str]]]  # (round, n) -> [(proxy sql, direct sql)]
    params: tuple[str, ...] = ()
    n_scale: float = 1.0  # fraction of --n
    direct_n: int | None = None  # at most this many directly (the rewritten SQL is slow)
    setup: str | None = None


@dataclass
class Sample:
    """One target's rounds on one path: wall ms per statement (medians) and CPU ms per
    statement (the proxy's, or for direct PostgreSQL its backend's)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def _run(conn: pq.PGconn, protocol: str, sql: str, params: tuple[str, ...], name: bytes) -> None:
    values = [p.encode() for p in params]
    if protocol == "simple":
        res = conn.exec_(sql.encode())
    elif protocol == "extended":
        res = conn.exec_params(sql.encode(), values)
    else:
        res = conn.exec_prepared(name, values)
    if res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
        raise SystemExit(f"{sql[:80]}: {(res.error_message or b'').decode()}")


class Target:
    """A connection per path to direct PostgreSQL or a proxy, and whose CPU to read."""

    def __init__(self, name: str, dsn: str, pid: int | None) -> None:
        self.name, self.dsn, self.pid = name, dsn, pid
        self.conns: dict[str, tuple[pq.PGconn, int]] = {}
        self.opened: list[psycopg.Connection[tuple[object, ...]]] = []

    def conn(self, path: Route, first: str) -> tuple[pq.PGconn, int]:
        if path.name not in self.conns:
            c = psycopg.connect(self.dsn, autocommit=True)
            backend = c.info.backend_pid
            pg = c.pgconn
            if path.setup and self.pid is not None:
                _run(pg, "simple", path.setup, (), b"")
            if path.protocol == "prepared":
                res = pg.prepare(b"s", first.encode())
                if res.status != pq.ExecStatus.COMMAND_OK:
                    raise SystemExit((res.error_message or b"").decode())
            self.conns[path.name] = (pg, backend)
            self.opened.append(c)
        return self.conns[path.name]

    def cpu(self, backend: int) -> float:
        return tree_cpu(self.pid if self.pid is not None else backend)

    def close(self) -> None:
        for c in self.opened:
            c.close()


def measure(target: Target, path: Route, texts: list[str]) -> tuple[float, float]:
    """Run ``texts`` in turn; (median wall ms, CPU ms per statement)."""
    pg, backend = target.conn(path, texts[0])
    warm = texts[:1] * 20 if len(set(texts)) == 1 else []
    for sql in warm:
        _run(pg, path.protocol, sql, path.params, b"s")
    walls = []
    cpu0 = target.cpu(backend)
    for sql in texts:
        t0 = time.perf_counter()
        _run(pg, path.protocol, sql, path.params, b"s")
        walls.append((time.perf_counter() - t0) * 1000)
    cpu = (target.cpu(backend) - cpu0) / len(texts) * 1000
    return statistics.median(walls), cpu


def _ratios(a: Sample, b: Sample, attr: str) -> list[float]:
    return [x / y for x, y in zip(getattr(a, attr), getattr(b, attr), strict=True) if y > 0]


def report(paths: list[Route], results: dict[str, dict[str, Sample]], rev: str) -> None:
    print(
        f"| path | direct wall ms | direct CPU ms | {rev} wall ms | {rev} CPU ms | now wall ms "
        f"| now CPU ms | CPU now/{rev} (range) | wall now/{rev} (range) | wall/direct {rev} "
        "| wall/direct now |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    med = statistics.median
    for p in paths:
        d, b, n = (results[p.name][k] for k in ("direct", "base", "now"))
        cr, wr = _ratios(n, b, "cpu"), _ratios(n, b, "wall")
        print(
            f"| {p.name} | {med(d.wall):.3f} | {med(d.cpu):.3f} | {med(b.wall):.3f} "
            f"| {med(b.cpu):.3f} | {med(n.wall):.3f} | {med(n.cpu):.3f} "
            f"| {med(cr):.2f} ({min(cr):.2f}-{max(cr):.2f}) "
            f"| {med(wr):.2f} ({min(wr):.2f}-{max(wr):.2f}) "
            f"| {med(b.wall) / med(d.wall):.2f} | {med(n.wall) / med(d.wall):.2f} |",
            flush=True,
        )


def compare(
    rev: str,
    dsn: str,
    n: int,
    rounds: int,
    policy: str | None,
    policy_now: str | None,
    only: set[str],
    paths_of: Callable[[Callable[[str], str]], list[Route]],
) -> None:
    """Measure every path of ``paths_of(rewrite)`` at ``rev`` and at this tree, interleaved."""
    from dpsql.demo import load_demo

    load_demo(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        for db in ("dpsql_ledger_base", "dpsql_ledger_now"):
            c.execute(f"DROP DATABASE IF EXISTS {db}")
            c.execute(f"CREATE DATABASE {db}")
    ledger = {k: psycopg.conninfo.make_conninfo(dsn, dbname=f"dpsql_ledger_{k}") for k in
              ("base", "now")}  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    targets: list[Target] = []
    with checkout(rev) as base:
        pol = policy or str(base / "dpsql" / "demo" / "policy.yaml")
        pols = {"base": pol, "now": policy_now or pol}
        label = _short(base)
        try:
            for key, root in (("base", base), ("now", ROOT)):
                proc, pdsn = start_proxy(root, pols[key], dsn, ["--workers", "1"], ledger[key])
                procs.append(proc)
                targets.append(Target(key, pdsn, proc.pid))
            direct = Target("direct", dsn, None)
            rewrite = _rewriter(pols["now"])
            paths = [p for p in paths_of(rewrite) if not only or p.name in only]
            print(f"{label} against this tree ({_short(ROOT)}, uncommitted changes included); "
                  f"policy {pol}{f' (this tree: {policy_now})' if policy_now else ''}; "
                  f"PostgreSQL {psycopg.connect(dsn).info.server_version}, {os.cpu_count()} CPUs, "
                  f"n={n}, {rounds} rounds; load average before: "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n", flush=True)  # fmt: skip
            results = {p.name: {k: Sample() for k in ("direct", "base", "now")} for p in paths}
            for r in range(rounds):
                order = [direct, *(targets if r % 2 == 0 else targets[::-1])]
                for p in paths:
                    pairs = p.texts(r, max(int(n * p.n_scale), 5))
                    for t in order:
                        texts = [d if t is direct else s for s, d in pairs]
                        texts = texts[: p.direct_n] if t is direct and p.direct_n else texts
                        wall, cpu = measure(t, p, texts)
                        results[p.name][t.name].wall.append(wall)
                        results[p.name][t.name].cpu.append(cpu)
                print(f"round {r + 1}/{rounds} done, load {os.getloadavg()[0]:.2f}", flush=True)
            print()
            report(paths, results, label)
            print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            for t in targets:
                t.close()
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)


def _short(tree: Path) -> str:
    git = ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True).stdout.strip() or str(tree)


def _rewriter(policy: str) -> Callable[[str], str]:
    from dpsql.explain.report import explain
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    pol = load_policy(policy)
    return lambda sql: explain(pol, sql, SessionContext(analyst="analyst")).rewritten

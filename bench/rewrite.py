"""Private queries against the plain query, per measure kind, at 1M and 10M rows, in one run.

    python bench/rewrite.py [--rows 1000000 10000000] [--repeat 5] [--dsn DSN]
                            [--citus DSN [--citus-only]] [--only TEXT] [--before DIR]
                            [--check-rounds N]

For each scale it (re)creates, in its own PostgreSQL (or at ``--dsn``), a table ``events`` of N
rows from N/10 users (``user_id`` the privacy unit, about 10 rows each; 50 heavy users with
N/50,000 rows each) and a table
``people`` of N/10 rows whose privacy unit ``pid`` is its PRIMARY KEY and whose CHECK
constraints keep ``age`` and ``income`` inside their declared bounds (dpsql reads them unclamped:
``dpsql/sql/check_bounds.py``; ``--check-rounds N`` compares, interleaved, with the constraints
dropped), plus a public table ``items``; then prints, for every measure kind, the median time of the query as written on
PostgreSQL (``plain``) and of the same query through dpsql's engine (plan, bounded SQL, noise,
post-processing, the ledger's charge; each execution at a slightly different epsilon, so none is a
free repeat; contribution bounds the policy leaves ``auto`` are chosen by the first, warm-up
execution and reused from the ledger, as in a deployment), and their ratio; and the per-unit
floor: the plain query's rows grouped by (unit, keys), which any per-unit bounding must at least
read and hash. ``--citus DSN`` runs the same on a Citus coordinator
(tables distributed by their privacy unit; ``tools/citus-local.sh``, docs/deploy.md). The load of the
machine (``uptime``) is printed before and after each scale: the machine may be shared. When the
PostgreSQL runs on this machine (its own, or ``--dsn`` to a local cluster whose data directory
this user can read), the CPU each query cost is printed too: the cluster's processes' (backends
and parallel workers) plus this process's (dpsql's engine), medians; on a shared machine the
CPU ratio moves far less with the load than the wall-time ratio.

The queries of one measure kind run interleaved (plain, dpsql, [before,] floor, then again),
so that a change in the machine's load falls on all of them alike. ``--before DIR`` (a checkout
of an earlier dpsql, e.g. ``git worktree add /tmp/before <commit>``) also times the private SQL
that checkout's engine writes for each query (the literal SQL, a fresh salt each execution; no
plan or noise, which take milliseconds), in the same rounds: before and after measured at the
same load.

Generation is one ``INSERT ... SELECT`` per table (about 40 s for 10M rows on 2 cores).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dpsql.budget.ledger import Ledger
from dpsql.dp import rng
from dpsql.engine import Engine
from dpsql.policy import load_policy
from dpsql.session import SessionContext

POLICY = """
version: 1
dataset: bench
defaults: {epsilon: 1.0, max_epsilon: 10.0, delta: 1.0e-6, statement_timeout_ms: 600000}
tables:
  public.events:
    privacy_unit: user_id
    max_rows_per_unit: 10
    max_groups_per_unit: 3
    columns:
      id: {type: bigint, identifier: true}
      user_id: {type: integer, identifier: true}
      kind: {type: text, keys: [k0, k1, k2, k3, k4, k5, k6, k7, k8, k9]}
      region: {type: text}
      item_id: {type: integer, keys_from: public.items.id}
      amount: {type: numeric, bounds: [0, 1000]}
  public.people:
    privacy_unit: pid
    max_rows_per_unit: 1
    max_groups_per_unit: 1
    columns:
      pid: {type: integer, identifier: true}
      age: {type: integer, bounds: [0, 100]}
      sex: {type: integer, keys: [0, 1]}
      income: {type: numeric, bounds: [0, 500000]}
public_tables: [public.items]
analysts:
  bench: {budget: {epsilon: 1.0e9, delta: 0.5}}
"""

SCHEMA = """
DROP TABLE IF EXISTS events, people, items;
CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, price numeric NOT NULL);
CREATE TABLE events (id bigint NOT NULL, user_id integer NOT NULL, kind text NOT NULL,
                     region text NOT NULL, item_id integer NOT NULL, amount numeric(10,2));
CREATE TABLE people (pid integer PRIMARY KEY, sex integer,
                     age integer CONSTRAINT people_age_bounds CHECK (age BETWEEN 0 AND 100),
                     income numeric(12,2) CONSTRAINT people_income_bounds
                       CHECK (income >= 0 AND income <= 500000));
"""

LOAD = """
INSERT INTO items SELECT i, 'item ' || i, (i % 97) + 0.5 FROM generate_series(1, 1000) i;
INSERT INTO events
SELECT g, CASE WHEN g % 1000 = 0 THEN (g / 1000) % 50 + 1 ELSE 51 + (hashint4(g::int) & 2147483647) % %(units)s
       END AS user_id,
       'k' || (g % 10), 'r' || (hashint4(g::int + 7) & 63),
       1 + (hashint4(g::int + 3) & 1023) % 1000,
       round(((hashint4(g::int + 11) & 65535) / 65.0)::numeric, 2)
FROM generate_series(1, %(rows)s) g;
INSERT INTO people (pid, age, sex, income)
SELECT p, (hashint4(p + 1) & 127) % 101, hashint4(p + 2) & 1,
       round(((hashint4(p + 5) & 1048575) / 2.5)::numeric, 2)
FROM generate_series(1, %(units)s) p;
"""

# (measure kind, query, floor): every measure kind of issue 19's table. The floor is the plain
# per-unit aggregation of the same rows (what any per-unit bounding reads and hashes at least).
UNITS = "SELECT count(*) FROM (SELECT 1 FROM events GROUP BY user_id) s"
UNIT_KEYS = "SELECT count(*) FROM (SELECT 1 FROM events GROUP BY user_id, {k}) s"
QUERIES: list[tuple[str, str, str | None]] = [
    ("COUNT", "SELECT COUNT(*) FROM events", UNITS),
    ("SUM", "SELECT SUM(amount) FROM events", UNITS),
    ("AVG", "SELECT AVG(amount) FROM events", UNITS),
    ("COUNT DISTINCT", "SELECT COUNT(DISTINCT user_id) FROM events", UNITS),
    (
        "GROUP BY declared keys",
        "SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind",
        UNIT_KEYS.format(k="kind"),
    ),
    (
        "partition selection",
        "SELECT region, COUNT(*) FROM events GROUP BY region",
        UNIT_KEYS.format(k="region"),
    ),
    (
        "join with public table",
        "SELECT COUNT(*), SUM(e.amount) FROM events e JOIN items i ON i.id = e.item_id "
        "WHERE i.price > 20",
        "SELECT count(*) FROM (SELECT 1 FROM events e JOIN items i ON i.id = e.item_id "
        "WHERE i.price > 20 GROUP BY e.user_id) s",
    ),
    (
        "quantile",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM events",
        UNITS,
    ),
    (
        "quantile GROUP BY",
        "SELECT kind, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM events "
        "GROUP BY kind",
        UNIT_KEYS.format(k="kind"),
    ),
    ("unit unique: COUNT, AVG", "SELECT sex, COUNT(*), AVG(income) FROM people GROUP BY sex", None),
    (
        "unit unique: quantile",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY age) FROM people",
        None,
    ),
]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def server_cpu(dsn: str) -> Callable[[], float] | None:
    """Seconds of CPU the PostgreSQL cluster at ``dsn`` has used so far (every process the
    postmaster started: backends, parallel workers, alive or reaped), when it runs on this machine
    and its data directory is readable (else None); on a Citus coordinator, the sum over the
    coordinator and every node in ``pg_dist_node`` (the workers run the shards' tasks). On a
    shared machine the CPU a query costs moves far less with the load than its wall time does."""
    try:
        dsns = [dsn]
        with psycopg.connect(dsn, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone():
                nodes = conn.execute(
                    "SELECT nodename, nodeport FROM pg_dist_node WHERE isactive AND groupid <> 0"
                ).fetchall()
                dsns += [psycopg.conninfo.make_conninfo(dsn, host=h, port=p) for h, p in nodes]
        pms = []
        for d in dsns:
            with psycopg.connect(d, autocommit=True) as conn:
                row = conn.execute("SHOW data_directory").fetchone()
            pms.append(int((Path(str(row[0])) / "postmaster.pid").read_text().split()[0]))
        tick = os.sysconf("SC_CLK_TCK")
    except (psycopg.Error, OSError, ValueError, IndexError, TypeError):
        return None

    def fields(pid: str) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    def total() -> float:
        ticks = 0
        for pm in pms:  # their own time and their reaped children's (exited workers)
            ticks += sum(int(x) for x in fields(str(pm))[11:15])
        parents = {str(pm) for pm in pms}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    g = fields(d)
                except OSError:
                    continue
                if g[1] in parents:
                    ticks += int(g[11]) + int(g[12])
        return ticks / tick

    try:
        total()
    except OSError:
        return None
    return total


def timed(
    fns: list[Callable[[], object]], repeat: int, cpu: Callable[[], float] | None = None
) -> list[tuple[float, float | None]]:
    """For each of ``fns``, run interleaved (one round runs each once, in order; a first round
    warms up), the median wall seconds and the median CPU seconds it cost: the server's (``cpu``)
    plus this process's (dpsql's engine runs in it)."""
    walls: list[list[float]] = [[] for _ in fns]
    used: list[list[float]] = [[] for _ in fns]
    for r in range(repeat + 1):
        for i, fn in enumerate(fns):
            c0, p0 = (cpu() if cpu else 0.0), time.process_time()
            t = time.perf_counter()
            fn()
            if r:  # round 0 warms up
                walls[i].append(time.perf_counter() - t)
                if cpu:
                    used[i].append(cpu() - c0 + time.process_time() - p0)
    return [
        (statistics.median(w), statistics.median(u) if u else None)
        for w, u in zip(walls, used, strict=True)
    ]


BEFORE_SQL = """
import json, sys, tempfile
from pathlib import Path
from dpsql.engine import Engine
from dpsql.execute.private_sql import SALT_MARKER
from dpsql.policy import load_policy
from dpsql.session import SessionContext
dsn, policy, queries = json.loads(sys.stdin.read())
path = Path(tempfile.mkdtemp(prefix="dpsql-bench-before-")) / "policy.yaml"
path.write_text(policy)
engine = Engine(load_policy(path), dsn)
out = {}
for q in queries:
    p = engine.prepare(q)
    a = engine.plan(p, SessionContext(analyst="bench")).analysis
    out[q] = engine.private_sql(p, a)
engine.close()
print(json.dumps([SALT_MARKER, out]))
"""


def before_sql(before: str, dsn: str, queries: list[str]) -> dict[str, Callable[[str], str]]:
    """The private SQL the dpsql checkout at ``before`` writes for each query, as a function of
    a salt (its marker replaced): read by that checkout's own engine, in a subprocess."""
    run = subprocess.run(
        [sys.executable, "-c", BEFORE_SQL],
        input=json.dumps([dsn, POLICY, queries]),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": before},
        cwd=before,  # (python -c imports from its working directory first)
        check=True,
    )
    marker, texts = json.loads(run.stdout)
    return {q: (lambda salt, t=t: t.replace(f"'{marker}'", f"'{salt}'")) for q, t in texts.items()}


def load(dsn: str, rows: int, citus: bool) -> float:
    t = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        if citus:
            conn.execute("SELECT create_reference_table('items')")
            conn.execute("SELECT create_distributed_table('events', 'user_id')")
            conn.execute("SELECT create_distributed_table('people', 'pid')")
        units = max(rows // 10, 100)
        for stmt in LOAD.split(";\n"):
            if stmt.strip():
                conn.execute(stmt.replace("%(units)s", str(units)).replace("%(rows)s", str(rows)))
        conn.execute("VACUUM ANALYZE events")
        conn.execute("VACUUM ANALYZE people")
        conn.execute("VACUUM ANALYZE items")
    return time.perf_counter() - t


def run_scale(
    dsn: str,
    rows: int,
    repeat: int,
    citus: bool,
    reload: bool = True,
    only: str | None = None,
    before: str | None = None,
) -> list[tuple[str, float, float]]:
    secs = load(dsn, rows, citus) if reload else 0.0
    print(f"\n## {rows:,} rows{' (Citus)' if citus else ''}: loaded in {secs:.0f} s")
    print(f"load before: {uptime()}")
    policy_file = Path(tempfile.mkdtemp(prefix="dpsql-bench-")) / "policy.yaml"
    policy_file.write_text(POLICY)
    policy = load_policy(policy_file)
    engine = Engine(policy, dsn, ledger=Ledger.open(dsn, policy))
    # epsilons never used before (the ledger may hold answers of an earlier run at this DSN)
    calls = itertools.count(int(rng.token_hex(5), 16) * 1000)

    def session() -> SessionContext:
        """A new epsilon for every execution: never a free repeat of an earlier answer."""
        return SessionContext(analyst="bench", epsilon=Fraction(1) + Fraction(next(calls), 10**16))

    out = []
    cpu_out: list[tuple[str, float, float]] = []
    cpu = server_cpu(dsn)
    chosen = [(k, q, f) for k, q, f in QUERIES if not only or only in k]
    old = before_sql(before, dsn, [q for _, q, _ in chosen]) if before else {}
    print(
        "| measure kind | plain (ms) | dpsql (ms) | ratio | per-unit floor (ms) | dpsql / floor |"
        + (" before (ms) |" if before else "")
        + (" CPU plain (ms) | CPU dpsql (ms) | CPU ratio | CPU floor (ms) |" if cpu else "")
        + (" CPU before (ms) |" if cpu and before else "")
        + "\n|---|---:|---:|---:|---:|---:|"
        + ("---:|" if before else "")
        + ("---:|---:|---:|---:|" if cpu else "")
        + ("---:|" if cpu and before else "")
    )
    try:
        with psycopg.connect(dsn) as conn:
            for kind, q, floor in chosen:
                p = engine.prepare(q)
                fns: list[Callable[[], object]] = [
                    lambda q=q: conn.execute(q).fetchall(),
                    lambda p=p: engine.execute(p, session()),
                ]
                if before:
                    text = old[q]
                    fns.append(lambda t=text: conn.execute(t(rng.token_hex(8))).fetchall())
                if floor is not None:
                    fns.append(lambda f=floor: conn.execute(f).fetchall())
                got = timed(fns, repeat, cpu)
                (plain, plain_cpu), (full, full_cpu) = got[0], got[1]
                was, was_cpu = got[2] if before else (None, None)
                low, low_cpu = got[-1] if floor is not None else (None, None)
                out.append((kind, plain, full))
                line = (
                    f"| {kind} | {plain * 1000:,.0f} | {full * 1000:,.0f} | {full / plain:.2f}x |"
                )
                if low is not None:
                    line += f" {low * 1000:,.0f} | {full / low:.2f}x |"
                else:
                    line += " - | - |"
                if was is not None:
                    line += f" {was * 1000:,.0f} |"
                if plain_cpu is not None and full_cpu is not None:
                    ratio = f"{full_cpu / plain_cpu:.2f}x" if plain_cpu else "-"
                    line += f" {plain_cpu * 1000:,.0f} | {full_cpu * 1000:,.0f} | {ratio} |"
                    line += f" {low_cpu * 1000:,.0f} |" if low_cpu is not None else " - |"
                    if was_cpu is not None:
                        line += f" {was_cpu * 1000:,.0f} |"
                    cpu_out.append((kind, plain_cpu, full_cpu))
                print(line)
                sys.stdout.flush()
    finally:
        engine.close()
    classes = {
        "COUNT, SUM, AVG, COUNT DISTINCT, GROUP BY, partition selection, join (target <= 1.5x)": (
            lambda k: not k.startswith(("quantile", "unit unique"))
        ),
        "quantiles (target <= 2.5x)": lambda k: k.startswith("quantile"),
        "unit declared unique (target <= 1.1x)": lambda k: k.startswith("unit unique"),
    }
    for name, member in classes.items():
        ratios = [f / p for k, p, f in out if member(k)]
        if ratios:
            print(f"median ratio, {name}: {statistics.median(ratios):.2f}x")
        ratios = [f / p for k, p, f in cpu_out if member(k) and p]
        if ratios:
            print(f"median CPU ratio, {name}: {statistics.median(ratios):.2f}x")
    print(f"load after: {uptime()}")
    return out


CHECKS = {
    "people_age_bounds": "CHECK (age BETWEEN 0 AND 100)",
    "people_income_bounds": "CHECK (income >= 0 AND income <= 500000)",
}


def check_rounds(dsn: str, rounds: int, repeat: int) -> None:
    """The unique-unit queries with the ``people`` table's CHECK constraints (which prove its
    values inside their declared bounds: dpsql reads them unclamped) and without them (dropped:
    dpsql clamps), interleaved with the plain query over ``rounds`` rounds on the tables as
    loaded: per round and kind, plain, proven and clamped medians of ``repeat`` executions (wall
    and CPU), and the ratios of each to the plain query of the same round."""
    print(f"\n## CHECK constraints on people: proven vs clamped, {rounds} rounds")
    print(f"load before: {uptime()}")
    policy_file = Path(tempfile.mkdtemp(prefix="dpsql-bench-")) / "policy.yaml"
    policy_file.write_text(POLICY)
    policy = load_policy(policy_file)
    engine = Engine(policy, dsn, ledger=Ledger.open(dsn, policy))
    calls = itertools.count(int(rng.token_hex(5), 16) * 1000)
    cpu = server_cpu(dsn)

    def session() -> SessionContext:
        return SessionContext(analyst="bench", epsilon=Fraction(1) + Fraction(next(calls), 10**16))

    def constraints(on: bool) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            for name, check in CHECKS.items():
                c.execute(f"ALTER TABLE people DROP CONSTRAINT IF EXISTS {name}")
                if on:
                    c.execute(f"ALTER TABLE people ADD CONSTRAINT {name} {check}")

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1000:,.0f}"

    print(
        "| round | measure kind | plain | proven | clamped | proven / plain | clamped / plain |"
        " CPU plain | CPU proven | CPU clamped | CPU proven / plain | CPU clamped / plain |"
        "\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    try:
        # autocommit: an open transaction's lock on people would block ALTER TABLE
        with psycopg.connect(dsn, autocommit=True) as conn:
            for r in range(rounds):
                for kind, q, _ in QUERIES:
                    if not kind.startswith("unit unique"):
                        continue
                    p = engine.prepare(q)
                    got: dict[str, tuple[float, float | None]] = {}
                    for label in ("plain", "proven", "clamped"):
                        if label == "plain":
                            (got[label],) = timed(
                                [lambda q=q: conn.execute(q).fetchall()], repeat, cpu
                            )
                            continue
                        constraints(label == "proven")
                        (got[label],) = timed(
                            [lambda p=p: engine.execute(p, session())], repeat, cpu
                        )
                    (pw, pc), (vw, vc), (cw, cc) = got["plain"], got["proven"], got["clamped"]
                    line = (
                        f"| {r + 1} | {kind} | {ms(pw)} | {ms(vw)} | {ms(cw)} | {vw / pw:.2f}x |"
                        f" {cw / pw:.2f}x |"
                    )
                    if pc and vc is not None and cc is not None:
                        line += (
                            f" {ms(pc)} | {ms(vc)} | {ms(cc)} | {vc / pc:.2f}x | {cc / pc:.2f}x |"
                        )
                    else:
                        line += " - | - | - | - | - |"
                    print(line)
                    sys.stdout.flush()
    finally:
        constraints(True)
        engine.close()
    print(f"load after: {uptime()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dsn", default=os.environ.get("DPSQL_BENCH_DSN"))
    ap.add_argument("--citus", default=None, help="a Citus coordinator's DSN")
    ap.add_argument(
        "--citus-only", action="store_true", help="with --citus: skip the plain PostgreSQL runs"
    )
    ap.add_argument("--no-load", action="store_true", help="reuse the tables at --dsn")
    ap.add_argument("--only", default=None, help="run the measure kinds containing this text")
    ap.add_argument(
        "--before",
        default=None,
        help="a checkout of an earlier dpsql: time its private SQL too, interleaved",
    )
    ap.add_argument(
        "--check-rounds",
        type=int,
        default=0,
        help="then N rounds of the unit-unique queries with and without people's CHECK "
        "constraints, interleaved with the plain query (plain PostgreSQL only)",
    )
    args = ap.parse_args()
    cluster = None
    dsn = args.dsn
    plain = not (args.citus and args.citus_only)
    if not dsn and plain:
        from dpsql.execute.embedded import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn()
    try:
        for rows in args.rows:
            if plain:
                assert dsn is not None
                run_scale(
                    dsn,
                    rows,
                    args.repeat,
                    citus=False,
                    reload=not args.no_load,
                    only=args.only,
                    before=args.before,
                )
                if args.check_rounds:
                    check_rounds(dsn, args.check_rounds, args.repeat)
            if args.citus:
                run_scale(
                    args.citus,
                    rows,
                    args.repeat,
                    citus=True,
                    reload=not args.no_load,
                    only=args.only,
                )
    finally:
        if cluster:
            cluster.stop()


if __name__ == "__main__":
    main()

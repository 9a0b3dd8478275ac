"""Golden check of the SQL dpsql sends upstream: every statement of a large corpus, its texts.

    python bench/golden_sql.py --compare REV_OR_DIR [--limit N] [--shrink N] [--keep DIR]
    python bench/golden_sql.py --out FILE [--limit N] [--shrink N] [--statements FILE]
    DPSQL_BENCH_TREE=OTHER_CHECKOUT python bench/golden_sql.py --out FILE  # another tree's dpsql

``--compare`` runs the statements of THIS checkout through another tree's dpsql (a git revision,
checked out in a temporary worktree, or a directory) and through this one's, one process each,
against one PostgreSQL, and says how many statements differ (exit status 1 when any does): an
optimisation of the rewrite must leave every text byte-identical. Both trees are asked the same
statements by construction (they are written once, to a file both processes read:
``--statements``); the first line of each output names the set (its source, size and sha256),
so two files made from different sets differ at line 1. ``--out`` alone makes one file.

Starts its own PostgreSQL with the demo data (or uses DPSQL_BENCH_DSN), then runs through
``Engine.prepare``/``execute`` (no ledger, as bench/engine.py) every statement of: the red-team
corpus (tests/redteam/corpus.yaml), the BI corpus (../shared/bi-corpus/statements.jsonl), the
queries of bench/engine.py, a grid of every measure kind by group shape, and the SQL string
literals of tests/ that name a demo table (all of the checkout this file is in, whichever tree's
dpsql runs them); under two policies: the demo's (``auto`` bounds: chosen by DP queries at each
execution) and bench/policy_5e50bd1.yaml (fixed bounds). Per statement it writes each text sent
upstream (private or not) and the outcome (SQLSTATE of a refusal, or the number of rows).

Deterministic, whatever the machine's load (so that two runs of one tree write the same file,
and two trees the same file when their SQL is the same): randomness is fixed
(:mod:`dpsql.dp.rng`'s CSPRNG: salts, noise, auto-bound choices; the bind marker: a byte stream
seeded per statement); dpsql's clock (what ``current_date`` reads) stands still at FIXED_NOW; and
the catalog reads an engine repeats on a timer (every ``dpsql.execute.shadows.REFRESH_S``
seconds: the upstream's shadowing functions, a joined public table's fan-out) are made once per
policy (the tool sets REFRESH_S to infinity in the tree it runs): on a timer, where they fall
among the statements depends on how fast the machine runs them. What still depends on the load:
a statement that runs into its statement timeout (its outcome says 57014).
Not a test (it needs minutes): the rewrite's optimisations are checked with it by hand. SIGTERM
or Ctrl-C: the PostgreSQL it started is stopped and its directory removed.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, os.environ.get("DPSQL_BENCH_TREE") or str(ROOT))
sys.path.append(str(HERE))
# SIGTERM unwinds as Ctrl-C does (its default ends the process before `finally:` stops the
# PostgreSQL this tool started); set before anything starts, whichever tree's dpsql runs
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

import yaml  # noqa: E402

from dpsql.demo import POLICY, load_demo  # noqa: E402
from dpsql.dp import rng  # noqa: E402
from dpsql.engine import Engine  # noqa: E402
from dpsql.errors import DpsqlError  # noqa: E402
from dpsql.execute.embedded import start_cluster  # noqa: E402
from dpsql.policy import load_policy  # noqa: E402
from dpsql.session import SessionContext  # noqa: E402
from dpsql.sql import bind  # noqa: E402

_STREAM = random.Random(0)


def _seed(text: str) -> None:
    _STREAM.seed(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def _urandom(n: int) -> bytes:
    return _STREAM.randbytes(n)


def _token_hex(n: int = 16) -> str:
    return _STREAM.randbytes(n).hex()


rng.os = SimpleNamespace(urandom=_urandom)  # type: ignore[attr-defined]
rng.secrets = SimpleNamespace(  # type: ignore[attr-defined]
    token_hex=_token_hex, randbelow=lambda n: _STREAM.randrange(n), randbits=_STREAM.getrandbits
)
bind.secrets = SimpleNamespace(token_hex=_token_hex)  # type: ignore[attr-defined]

FIXED_NOW = datetime(2025, 7, 1, 12, tzinfo=UTC)  # inside the demo data's year


def _steady() -> dict[str, Any]:
    """The timer-refreshed catalog reads made once per engine; the engine's keyword arguments
    that stop its clock (a tree without dpsql.clock, or without the timer, is left as it is)."""
    try:
        from dpsql.execute import shadows

        shadows.REFRESH_S = math.inf  # execute/precheck's fan-out memo reads this one too
    except ImportError:
        pass
    try:
        from dpsql.clock import FixedClock
    except ImportError:
        return {}
    return (
        {"clock": FixedClock(FIXED_NOW)} if "clock" in inspect.signature(Engine).parameters else {}
    )


TABLES = ("purchases", "pums", "regions")
MEASURES = (
    "COUNT(*)",
    "COUNT(amount)",
    "SUM(amount)",
    "AVG(amount)",
    "SUM(quantity)",
    "AVG(quantity)",
    "VARIANCE(amount)",
    "STDDEV(amount)",
    "MIN(amount)",
    "MAX(quantity)",
    "COUNT(DISTINCT user_id)",
    "COUNT(DISTINCT region)",
    "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount)",
    "PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY quantity)",
    "SUM(amount) FILTER (WHERE quantity > 2)",
    "COUNT(*) FILTER (WHERE category = 'books')",
)
SHAPES = (
    "SELECT {m} FROM purchases",
    "SELECT {m} FROM purchases WHERE quantity > 2",
    "SELECT category, {m} FROM purchases GROUP BY category",
    "SELECT region, {m} FROM purchases GROUP BY region",
    "SELECT category, region, {m} FROM purchases GROUP BY 1, 2",
    "SELECT purchased_at, {m} FROM purchases GROUP BY purchased_at",
    "SELECT date_trunc('month', purchased_at) AS m, {m} FROM purchases GROUP BY 1",
    "SELECT r.name, {m} FROM purchases p JOIN regions r ON r.code = p.region GROUP BY r.name",
    "SELECT category, {m} FROM purchases GROUP BY ROLLUP (category)",
    "SELECT x.category, SUM(v) FROM (SELECT category, region, {m} AS v FROM purchases "
    "GROUP BY 1, 2) AS x GROUP BY x.category",
)


def grid() -> list[str]:
    return [s.format(m=m) for s in SHAPES for m in MEASURES]


def test_literals() -> list[str]:
    """SQL string literals of tests/ that read a demo table (deduplicated, in file order)."""
    out: dict[str, None] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                s = node.value.strip()
                low = s.lower()
                if (
                    low.startswith(("select", "with"))
                    and any(f" {t}" in low for t in TABLES)
                    and "{" not in s
                    and len(s) < 4000
                ):
                    out[s] = None
    return list(out)


def corpus() -> Iterator[tuple[str, str, dict[str, Any]]]:
    import engine as bench_engine

    for i, item in enumerate(yaml.safe_load((ROOT / "tests/redteam/corpus.yaml").read_text())):
        yield f"redteam {i}", item["sql"], item
    bi = ROOT.parent.parent / "shared" / "bi-corpus" / "statements.jsonl"
    if not bi.exists():
        bi = Path("/work/shared/bi-corpus/statements.jsonl")
    for line in bi.read_text().splitlines():
        item = json.loads(line)
        yield f"bi {item['n']}", item["sql"], {}
    for q in bench_engine.QUERIES + bench_engine.TREE_QUERIES:
        yield "bench", q, {}
    for q in grid():
        yield "grid", q, {}
    for q in test_literals():
        yield "tests", q, {}


Statement = tuple[str, str, dict[str, Any]]


def statements(path: str | None) -> tuple[list[Statement], str]:
    """The statements to run (``--statements`` FILE, else this checkout's corpus) and a line
    naming the set: where from, how many, its sha256."""
    if path:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        got = [(r["where"], r["sql"], r["item"]) for r in rows]
        source = rows[0]["source"] if rows else path
    else:
        got = list(corpus())
        source = f"{ROOT} at {_commit(ROOT)}"
    digest = hashlib.sha256(json.dumps([g[:2] for g in got]).encode()).hexdigest()[:16]
    return got, f"# statements: {len(got)} from {source}, sha256 {digest}"


def _commit(tree: Path) -> str:
    res = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "tests", "bench"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return (res.stdout.strip() or "?") + (" (with uncommitted changes)" if dirty else "")


def run(engine: Engine, out: Any, label: str, todo: list[Statement], limit: int | None) -> int:
    calls: list[str] = []
    inner = engine.backend.run

    def record(query: str, params: Any = None, **kw: Any) -> Any:
        calls.append(f"{'P' if kw.get('private') else 'p'} {query}")
        if kw.get("then") is not None:  # dpsql's own read in the same round trip
            calls.append(f"+p {kw['then']}")
        return inner(query, params, **kw)

    engine.backend.run = record  # type: ignore[method-assign]
    n = 0
    for where, sql, item in todo:
        if limit is not None and n >= limit:
            break
        n += 1
        calls.clear()
        _seed(f"{label}\0{sql}")
        s = SessionContext(analyst="analyst")
        if "epsilon" in item:
            s.epsilon = float(item["epsilon"])  # type: ignore[assignment]
        params = tuple(item.get("params", ()))
        try:
            p = engine.prepare(sql)
            if getattr(p, "kind", None) in ("session", "empty"):
                outcome = "session"
            else:
                r = engine.execute(p, s, params)
                outcome = f"ok {len(getattr(r, 'rows', ()) or ())}"
        except DpsqlError as e:
            outcome = f"error {e.sqlstate}"
        except Exception as e:  # recorded: a crash must stay the same crash
            outcome = f"crash {type(e).__name__}: {e}"
        out.write(f"=== {label} {where}\n{sql}\n--- {outcome}\n")
        for c in calls:
            out.write(c + "\n")
    return n


def _shrink(dsn: str, n: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DELETE FROM purchases WHERE id % {n} <> 0")
        conn.execute(f"DELETE FROM pums WHERE pid % {n} <> 0")
        conn.execute("VACUUM ANALYZE purchases, pums")


def write(args: argparse.Namespace, dsn: str) -> None:
    """One tree (this process's dpsql): every statement under both policies, into ``--out``."""
    todo, names = statements(args.statements)
    print(names, flush=True)
    steady = _steady()
    with open(args.out, "w") as out:
        out.write(names + "\n")
        for label, pol in (("auto", str(POLICY)), ("fixed", str(HERE / "policy_5e50bd1.yaml"))):
            engine = Engine(load_policy(pol), dsn, pool_size=2, **steady)
            try:
                n = run(engine, out, label, todo, args.limit)
            finally:
                engine.close()
            print(f"{label}: {n} statements", flush=True)


def _blocks(path: Path) -> dict[str, str]:
    text = path.read_text()
    return {b.split("\n", 1)[0] + f" #{k}": b for k, b in enumerate(text.split("\n=== "))}


def compare(args: argparse.Namespace, dsn: str) -> int:
    """``--compare``: the other tree's dpsql and this one's, on one statement file."""
    from proxy_compare import checkout

    keep = Path(args.keep or tempfile.mkdtemp(prefix="dpsql-golden-"))
    keep.mkdir(parents=True, exist_ok=True)
    todo, names = statements(None)
    listing = keep / "statements.jsonl"
    source = names.split(" from ", 1)[1].rsplit(", sha256", 1)[0]
    listing.write_text("".join(json.dumps({"where": w, "sql": q, "item": i, "source": source})
                               + "\n" for w, q, i in todo))  # fmt: skip
    print(f"{names}; load average {os.getloadavg()[0]:.2f}", flush=True)
    with checkout(args.compare) as base:
        outs = {}
        for key, tree in (("base", base), ("this", ROOT)):
            outs[key] = keep / f"{key}.txt"
            cmd = [sys.executable, __file__, "--statements", str(listing), "--out", str(outs[key])]
            if args.limit is not None:
                cmd += ["--limit", str(args.limit)]
            env = {**os.environ, "DPSQL_BENCH_TREE": str(tree), "DPSQL_BENCH_DSN": dsn,
                   "PYTHONPATH": str(tree)}  # fmt: skip
            at = _commit(tree)  # before it runs: a checkout such as /work/main may move
            t0, c0 = time.monotonic(), os.times()
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            c1 = os.times()
            if res.returncode != 0:
                raise SystemExit(f"{key} ({tree}) failed:\n{res.stderr[-3000:]}")
            cpu = c1.children_user + c1.children_system - c0.children_user - c0.children_system
            print(f"{key}: {tree} at {at}: {time.monotonic() - t0:.0f} s, "
                  f"CPU {cpu:.0f} s ({res.stdout.strip().splitlines()[-1]}); {outs[key]}",
                  flush=True)  # fmt: skip
    a, b = _blocks(outs["base"]), _blocks(outs["this"])
    differ = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
    print(f"{len(a) - 1} statement runs; {len(differ)} differ"
          + (f" (diff {outs['base']} {outs['this']}), the first: {sorted(differ)[0]}" if differ
             else ": identical"))  # fmt: skip
    return 1 if differ else 0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--out", help="write this tree's texts to OUT")
    how.add_argument("--compare", metavar="REV_OR_DIR", help="compare another tree with this one")
    ap.add_argument("--statements", help="run the statements of this file (what --compare writes)")
    ap.add_argument("--keep", help="--compare: write the statements and both outputs here")
    ap.add_argument("--limit", type=int, help="at most N statements per policy")
    ap.add_argument(
        "--shrink",
        type=int,
        default=1,
        help="keep every N-th row of the demo's private tables (faster; compare runs of one N)",
    )
    args = ap.parse_args()
    dsn = os.environ.get("DPSQL_BENCH_DSN")
    cluster = None
    try:
        if not dsn:
            cluster = start_cluster()
            dsn = cluster.dsn()
            print(f"PostgreSQL up, data in {cluster.datadir}", flush=True)
            load_demo(dsn)
        if args.shrink > 1:
            _shrink(dsn, args.shrink)
        rc = compare(args, dsn) if args.compare else 0
        if args.out:
            write(args, dsn)
    finally:
        if cluster:
            cluster.stop()
    sys.exit(rc)


if __name__ == "__main__":
    main()

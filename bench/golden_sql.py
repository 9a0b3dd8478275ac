"""Golden check of the SQL dpsql sends upstream: every statement of a large corpus, its texts.

    python bench/golden_sql.py --out FILE [--limit N] [--shrink N]
    DPSQL_BENCH_TREE=OTHER_CHECKOUT python bench/golden_sql.py --out FILE  # another tree
    diff BEFORE AFTER   # an optimisation of the rewrite must leave it byte-identical

Starts its own PostgreSQL with the demo data (or uses DPSQL_BENCH_DSN), then runs through
``Engine.prepare``/``execute`` (no ledger, as bench/engine.py) every statement of: the red-team
corpus (tests/redteam/corpus.yaml), the BI corpus (../shared/bi-corpus/statements.jsonl), the
queries of bench/engine.py, a grid of every measure kind by group shape, and the SQL string
literals of tests/ that name a demo table; under two policies: the demo's (``auto`` bounds:
chosen by DP queries at each execution) and bench/policy_5e50bd1.yaml (fixed bounds). Per
statement it writes each text sent upstream (private or not) and the outcome (SQLSTATE of a
refusal, or the number of rows). Randomness is fixed: :mod:`dpsql.dp.rng`'s CSPRNG (salts,
noise, auto-bound choices) and the bind marker read a byte stream seeded per statement, so two
runs of one tree write the same file, and two trees the same file when their SQL is the same.
Not a test (it needs minutes): the rewrite's optimisations are checked with it by hand.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, os.environ.get("DPSQL_BENCH_TREE") or str(ROOT))
sys.path.append(str(HERE))

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


def run(engine: Engine, out: Any, label: str, limit: int | None) -> int:
    calls: list[str] = []
    inner = engine.backend.run

    def record(query: str, params: Any = None, **kw: Any) -> Any:
        calls.append(f"{'P' if kw.get('private') else 'p'} {query}")
        if kw.get("then") is not None:  # dpsql's own read in the same round trip
            calls.append(f"+p {kw['then']}")
        return inner(query, params, **kw)

    engine.backend.run = record  # type: ignore[method-assign]
    n = 0
    for where, sql, item in corpus():
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
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
    if not dsn:
        cluster = start_cluster()
        dsn = cluster.dsn()
        load_demo(dsn)
    if args.shrink > 1:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DELETE FROM purchases WHERE id % {args.shrink} <> 0")
            conn.execute(f"DELETE FROM pums WHERE pid % {args.shrink} <> 0")
            conn.execute("VACUUM ANALYZE purchases, pums")
    try:
        with open(args.out, "w") as out:
            for label, pol in (("auto", str(POLICY)), ("fixed", str(HERE / "policy_5e50bd1.yaml"))):
                engine = Engine(load_policy(pol), dsn, pool_size=2)
                try:
                    n = run(engine, out, label, args.limit)
                finally:
                    engine.close()
                print(f"{label}: {n} statements", flush=True)
    finally:
        if cluster:
            cluster.stop()


if __name__ == "__main__":
    main()

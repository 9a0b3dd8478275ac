"""Same noise, same answers: a corpus of private statements at another revision and this tree.

    python bench/same_releases.py --compare REV [--policy FILE] [--dsn DSN]
    python bench/same_releases.py --dump OUT.json [--policy FILE] [--dsn DSN]

For a change that must not alter any released value, interval or notice (issue 18's CPU work
on the release path: the noise, the intervals, the notices, the ledger's charging). Each tree
answers the same statements (several shapes: COUNT, SUM/AVG by declared keys, partition
selection, COUNT DISTINCT, quantiles, MIN/MAX, mode, ROLLUP, a join with a public table,
statements of several DP leaves) three times: plain, with ``dpsql.show_intervals``, and with
the Gaussian mechanism at confidence 0.9, on an engine with a ledger of its own, under a
seeded noise source (:class:`SeededNoise`, injected through the ``NoiseSource`` protocol as
the tests do) and salts from a counter (``dpsql.dp.rng.token_hex``: which rows a unit keeps).
Every column (name, type, mechanism, half-width), row value (``repr``), interval, notice, charge
and refusal is written as JSON; ``--compare`` runs both trees (a process each, importing its
own dpsql) and prints the statements whose outputs differ, exiting 1 if any does. The same
tree twice gives identical files (deterministic). Not a privacy test: the seeded source is
no mechanism; it only makes the release path's arithmetic comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

SHAPES = [
    "SELECT COUNT(*) FROM purchases WHERE amount < {n}",
    "SELECT category, COUNT(*), SUM(amount), AVG(amount) FROM purchases WHERE amount < {n} "
    "GROUP BY category",
    "SELECT purchased_at, COUNT(*) FROM purchases WHERE amount < {n} GROUP BY purchased_at",
    "SELECT region, COUNT(DISTINCT user_id) FROM purchases WHERE amount < {n} GROUP BY region",
    "SELECT category, PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases "
    "WHERE amount < {n} GROUP BY category",
    "SELECT r.name, COUNT(*), AVG(p.amount) FROM purchases p JOIN regions r "
    "ON r.code = p.region WHERE p.amount < {n} GROUP BY r.name",
    "SELECT category, SUM(revenue) FROM (SELECT category, region, SUM(amount) AS revenue "
    "FROM purchases WHERE amount < {n} GROUP BY 1, 2) AS t GROUP BY category",
    "SELECT sex, AVG(income), STDDEV(age) FROM pums WHERE age < {n} GROUP BY sex",
]
MORE = [
    "SELECT COUNT(*) FROM purchases",
    "SELECT AVG(amount) FROM purchases WHERE quantity > 2",
    "SELECT COUNT(*) FROM purchases WHERE quantity > 5",
    "SELECT category, COUNT(*), SUM(amount) FROM purchases GROUP BY category",
    "SELECT category, COUNT(DISTINCT region) FROM purchases GROUP BY category",
    "SELECT MIN(amount), MAX(amount), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY quantity) "
    "FROM purchases",
    "SELECT category, VARIANCE(amount), STDDEV(quantity) FROM purchases GROUP BY category",
    "SELECT MODE() WITHIN GROUP (ORDER BY category) FROM purchases",
    "SELECT date_trunc('month', purchased_at) AS m, SUM(amount) FROM purchases GROUP BY 1",
    "SELECT category, region, COUNT(*) FROM purchases GROUP BY ROLLUP (category, region)",
    "WITH r AS (SELECT category, SUM(amount) AS rev FROM purchases GROUP BY 1), "
    "n AS (SELECT category, COUNT(*) AS c FROM purchases GROUP BY 1) "
    "SELECT r.category, rev, c FROM r JOIN n ON n.category = r.category",
    "SELECT educ, COUNT(*), AVG(age) FROM pums GROUP BY educ",
    "SELECT COUNT(*) FILTER (WHERE quantity > 3), SUM(quantity) FROM purchases",
]
CORPUS = [s.format(n=n) for n in (50, 300) for s in SHAPES] + MORE


class SeededNoise:
    """A deterministic noise source (numpy's seeded generator): the same calls in the same order
    draw the same values, whatever the tree."""

    def __init__(self, seed: int = 1) -> None:
        self.g = np.random.default_rng(seed)

    def add(self, mech: Any, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        return np.asarray(v + np.round(self.g.laplace(0, 3.0, v.shape)))

    def keep(self, selection: Any, unit_counts: np.ndarray) -> np.ndarray:
        c = np.asarray(unit_counts)
        return np.asarray((c + self.g.laplace(0, 2.0, c.shape)) >= 5)

    def pick(self, mech: Any, utilities: np.ndarray) -> np.ndarray:
        u = np.asarray(utilities)
        return np.asarray(np.argmax(u + self.g.gumbel(0, 1, u.shape), axis=1), dtype=np.int64)

    def mode(self, mech: Any, counts: np.ndarray) -> np.ndarray:
        return self.pick(mech, counts)

    def bound(self, selection: Any, counts: np.ndarray) -> int:
        return int(selection.exact(counts))


_ANSWERED = re.compile(r"answered \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _json(r: Any) -> dict[str, Any]:
    return {
        "columns": [
            [c.name, c.type_oid, c.typmod, c.mechanism, repr(c.half_width)] for c in r.columns
        ],
        "rows": [[repr(x) for x in row] for row in r.rows],
        "tag": r.command_tag,
        # a free repeat's notice names when the answer was released: the clock, not the release
        "notices": [_ANSWERED.sub("answered <time>", n) for n in r.notices],
        "spent": [repr(r.epsilon_spent), repr(r.delta_spent), r.cached],
        "intervals": (
            None if r.intervals is None else [[repr(x) for x in row] for row in r.intervals]
        ),
        "fallbacks": [repr(f) for f in getattr(r, "interval_fallbacks", ())],
    }


def dump(out: str, dsn: str, policy: str) -> None:
    """This process's dpsql answers the corpus; JSON to ``out``."""
    from dpsql.budget.ledger import Ledger
    from dpsql.dp import rng
    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    counter = iter(range(10**9))
    rng.token_hex = lambda nbytes=16: format(next(counter), f"0{2 * nbytes}x")  # type: ignore[assignment]
    pol = load_policy(policy)
    ledger = Ledger.open(dsn, pol, schema=f"same_{uuid.uuid4().hex[:8]}")
    engine = Engine(pol, dsn, ledger, pool_size=2, noise=SeededNoise())  # type: ignore[arg-type]
    res: dict[str, Any] = {}
    try:
        for mode in ("plain", "intervals", "gaussian"):
            for q in CORPUS:
                s = SessionContext("analyst", Fraction(1), show_intervals=mode != "plain")
                if mode == "gaussian":
                    s.mechanism, s.confidence, s.delta = "gaussian", 0.9, Fraction(1, 10**7)
                try:
                    res[f"{mode} | {q}"] = _json(engine.execute(engine.prepare(q, "analyst"), s))
                except Exception as e:  # a refusal is an output too
                    res[f"{mode} | {q}"] = {"refused": f"{type(e).__name__}: {e}"}
    finally:
        engine.close()
        ledger.close()
    Path(out).write_text(json.dumps(res, indent=1, sort_keys=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare", metavar="REV", help="REV (or a checkout's path) against this tree")
    ap.add_argument("--dump", metavar="OUT", help="this tree's answers as JSON")
    ap.add_argument("--policy", help="policy file (default: bench/policy_5e50bd1.yaml: fixed "
                    "bounds, so no auto-bound step draws)")  # fmt: skip
    ap.add_argument("--dsn", default=os.environ.get("DPSQL_BENCH_DSN"))
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    policy = str(Path(args.policy or here / "policy_5e50bd1.yaml").resolve())
    cluster = None
    dsn = args.dsn
    if not dsn:
        sys.path.insert(0, str(here.parent))
        from dpsql.demo import load_demo
        from dpsql.execute.embedded import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn()
        load_demo(dsn)
    try:
        if args.dump:
            sys.path.insert(0, str(here.parent))
            dump(args.dump, dsn, policy)
            return
        if not args.compare:
            ap.error("--compare REV or --dump OUT")
        sys.path.insert(0, str(here))
        from proxy_compare import ROOT, checkout

        outs = {}
        with checkout(args.compare) as base, tempfile.TemporaryDirectory() as tmp:
            for name, tree in (("base", base), ("now", ROOT)):
                out = str(Path(tmp) / f"{name}.json")
                code = ("import sys; sys.path.insert(0, sys.argv[1]); "
                        "sys.path.insert(1, sys.argv[2]); import same_releases as s; "
                        "s.dump(sys.argv[3], sys.argv[4], sys.argv[5])")  # fmt: skip
                env = {**os.environ, "PYTHONPATH": str(tree)}
                subprocess.run([sys.executable, "-c", code, str(tree), str(here), out, dsn,
                                policy], env=env, check=True)  # fmt: skip
                outs[name] = json.loads(Path(out).read_text())
        differ = [k for k in outs["now"] if outs["base"].get(k) != outs["now"][k]]
        differ += [k for k in outs["base"] if k not in outs["now"]]
        refused = sum("refused" in v for v in outs["now"].values())
        print(f"{len(outs['now'])} answers ({refused} refused) at {args.compare} and this tree: "
              f"{len(differ)} differ")  # fmt: skip
        for k in differ:
            b, n = outs["base"].get(k) or {}, outs["now"].get(k) or {}
            print(f"  {k}")
            for f in sorted(set(b) | set(n)):
                if b.get(f) != n.get(f):
                    print(f"    {f}: {str(b.get(f))[:300]}\n      now: {str(n.get(f))[:300]}")
        sys.exit(1 if differ else 0)
    finally:
        if cluster:
            cluster.stop()


if __name__ == "__main__":
    main()

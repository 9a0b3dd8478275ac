"""Synthetic-data quality benchmark: mean 2-way marginal TVD at epsilon 0.1 / 1 / 10, one run.

Compares, on the same discretized table in a throwaway PostgreSQL:

* ours: ``dpsql release synthetic`` (MST on Private-PGM ``mbi`` 2.x, exact samplers);
* the baseline of independent noisy 1-way marginals (from the same release's measurements);
* smartnoise-synth's MST, when a Python with ``snsynth`` is given (``--snsynth-python``; it pins
  ``mbi<2`` and torch, so it lives in its own virtualenv: see docs/releases.md).

The table has row-level privacy (every row one person) so that all three see the same neighbours.
TVD is against the real (discretized) data; lower is better. Usage::

    python bench/synthetic.py [--rows 200000] [--reps 1] [--snsynth-python /path/to/venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsql.execute.embedded import start_cluster
from dpsql.policy import parse_policy
from dpsql.release.jobs import resolve
from dpsql.release.mst import marginal
from dpsql.release.quality import tvd
from dpsql.release.source import Bound, bounded_cells
from dpsql.release.synthetic import run_synthetic

EPSILONS = (0.1, 1.0, 10.0)
DELTA = 1e-6
COLUMNS = ["age", "sex", "educ", "income", "region", "employed"]

TABLE = """
SELECT setseed(0.5);
CREATE UNLOGGED TABLE census AS
WITH base AS (
  SELECT g, 18 + floor(random() * 70)::int AS age,
         random() AS r1, random() AS r2, random() AS r3, random() AS r4, random() AS r5
  FROM generate_series(1, {rows}) g
), ed AS (SELECT *, LEAST(16, GREATEST(1, age / 6 + floor(r2 * 6)::int)) AS educ FROM base)
SELECT age, CASE WHEN r1 < 0.5 THEN 'F' ELSE 'M' END AS sex, educ,
       round((educ * 8000 + r3 * 30000)::numeric, 2) AS income,
       (ARRAY['C','E','N','S','W'])[1 + floor(r4 * 5)::int] AS region,
       r5 < CASE WHEN age < 65 THEN 0.85 ELSE 0.15 END AS employed
FROM ed;
ANALYZE census;
"""

POLICY = """
dataset: bench
tables:
  census:
    privacy_unit: row
    columns:
      age: {type: integer, bounds: [0, 99]}
      sex: {type: text, keys: [F, M]}
      educ: {type: integer, keys: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}
      income: {type: numeric, bounds: [0, 200000]}
      region: {type: text, keys: [C, E, N, S, W]}
      employed: {type: boolean}
"""

SNSYNTH = """
import sys, pandas as pd
from snsynth import Synthesizer
data, eps, delta, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
df = pd.read_csv(data)
synth = Synthesizer.create("mst", epsilon=eps, delta=delta, verbose=False)
synth.fit(df, preprocessor_eps=0.0, categorical_columns=list(df.columns))
synth.sample(len(df)).to_csv(out, index=False)
"""


def mean_2way(
    shape: tuple[int, ...], real: tuple[np.ndarray, np.ndarray], rows: np.ndarray
) -> float:
    ones = np.ones(len(rows), dtype=np.int64)
    return float(
        np.mean(
            [
                tvd(marginal(*real, shape, pair), marginal(rows, ones, shape, pair))
                for pair in combinations(range(len(shape)), 2)
            ]
        )
    )


def snsynth_mst(
    python: str, shape: tuple[int, ...], real: tuple[np.ndarray, np.ndarray], eps: float, tmp: Path
) -> tuple[float, float]:
    """(mean 2-way TVD, seconds) of smartnoise-synth's MST on the same bin indices."""
    idx, n = real
    rows = np.repeat(idx, n, axis=0)
    data = tmp / "real.csv"
    np.savetxt(data, rows, fmt="%d", delimiter=",", header=",".join(COLUMNS), comments="")
    out = tmp / f"sn_{eps}.csv"
    t = time.perf_counter()
    subprocess.run([python, "-c", SNSYNTH, str(data), str(eps), str(DELTA), str(out)], check=True)
    secs = time.perf_counter() - t
    header = out.read_text().split("\n", 1)[0].strip().split(",")
    syn = np.loadtxt(out, delimiter=",", skiprows=1, dtype=np.int64).reshape(-1, len(header))
    syn = syn[:, [header.index(c) for c in COLUMNS]]  # in our column order, whatever theirs
    return mean_2way(shape, real, syn), secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--snsynth-python", help="a Python with smartnoise-synth installed")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    policy = parse_policy(POLICY)
    cluster = start_cluster()
    results = []
    try:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE.format(rows=int(args.rows)))
        src = resolve(policy, dsn, "census", COLUMNS, None)
        real = bounded_cells(dsn, src, Bound.for_source(src, "per_unit"))
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for eps in EPSILONS:
                for rep in range(args.reps):
                    t = time.perf_counter()
                    rel = run_synthetic(
                        policy, dsn, table="census", columns=COLUMNS, epsilon=eps, delta=DELTA,
                        out_dir=tmp / f"o{eps}_{rep}", progress=False,
                    )  # fmt: skip
                    row = {
                        "epsilon": eps,
                        "rep": rep,
                        "ours_seconds": time.perf_counter() - t,
                        **rel.quality.summary(),
                    }
                    if args.snsynth_python:
                        tv, secs = snsynth_mst(args.snsynth_python, src.shape, real, eps, tmp)
                        row["snsynth_mst_2way_tvd"], row["snsynth_seconds"] = tv, secs
                    results.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        cluster.stop()
    print(table(results, args.rows))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def table(results: list[dict[str, float]], rows: int) -> str:
    """The markdown table for docs/releases.md (means over repetitions)."""
    has_sn = any("snsynth_mst_2way_tvd" in r for r in results)
    head = "| epsilon | ours (MST + mbi) | independent baseline | "
    head += "smartnoise-synth MST | " if has_sn else ""
    head += "ours 1-way | seconds (ours" + (" / snsynth)" if has_sn else ")") + " |"
    lines = [f"mean 2-way TVD vs the real data, {rows:,} rows, 6 columns, delta={DELTA:g}", "",
             head, "|" + "---|" * (head.count("|") - 1)]  # fmt: skip
    for eps in EPSILONS:
        rs = [r for r in results if r["epsilon"] == eps]

        def m(k: str, rs: list[dict[str, float]] = rs) -> float:
            return float(np.mean([r[k] for r in rs]))

        cells = [
            f"{eps:g}",
            f"{m('mean_2way_tvd_synthetic'):.4f}",
            f"{m('mean_2way_tvd_baseline'):.4f}",
        ]
        if has_sn:
            cells.append(f"{m('snsynth_mst_2way_tvd'):.4f}")
        cells.append(f"{m('mean_1way_tvd_synthetic'):.4f}")
        secs = f"{m('ours_seconds'):.0f}" + (f" / {m('snsynth_seconds'):.0f}" if has_sn else "")
        cells.append(secs)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

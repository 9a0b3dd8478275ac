"""Synthetic-data quality benchmark: mean 2-way TVD over all column pairs, with standard errors.

Systems, all at the same (epsilon, delta = 1e-6) on the same bounded, binned cells read from a
throwaway PostgreSQL:

* ``independent``: every 1-way marginal with the whole budget (rho / d each, discrete Gaussian),
  rows sampled i.i.d. with independent columns: the trivial baseline;
* ``mst``: ``--synthesizer mst`` (MST with domain compression, no comparison);
* ``aim model``: AIM's fitted model sampled, whatever the comparison says;
* ``default``: what ``dpsql release synthetic`` publishes by default: AIM (95% of the budget) and,
  when the DP comparison (5%) says the model would not beat independent marginals, the baseline
  built from the model's own 1-way marginals (rows by rounding); in AIM's small-data regime the
  1-way-only model with all of the budget (no comparison).

Datasets: the PUMS extract of ../shared/datasets (1,000 people; age and income in 8 equal-width
bins over the declared bounds, sex, educ (16), race (9), married) and a generated table (default
100,000 rows, 8 correlated columns). Row-level privacy (R = 1) for both. TVD is against the real
binned data; lower is better. Runtime is bounded by ``--max-minutes`` (no new repetition starts
after it; 2 shared cores). Usage::

    python bench/synthetic.py [--reps 5] [--datasets pums,census] [--epsilons 1,0.3] [--no-mst]
                              [--gen-rows 100000] [--max-minutes 60] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsql.dp.accounting import epsilon_to_rho
from dpsql.dp.mechanisms import Gaussian
from dpsql.execute.embedded import start_cluster
from dpsql.policy import parse_policy
from dpsql.release.compare import baseline_rows, decide
from dpsql.release.jobs import resolve
from dpsql.release.marginals import marginal
from dpsql.release.quality import tvd
from dpsql.release.source import Bound, bounded_cells
from dpsql.release.synthesis import (
    compare_result,
    fit_result,
    make_plan,
    run_plan,
    sample_result,
)

DELTA = 1e-6
PUMS_CSV = next(
    (p / "shared" / "datasets" / "PUMS.csv" for p in Path(__file__).resolve().parents
     if (p / "shared" / "datasets" / "PUMS.csv").exists()),
    Path("../shared/datasets/PUMS.csv"),
)  # fmt: skip
SYSTEMS = ("independent", "mst", "aim model", "default")

GENERATED = """
SELECT setseed(0.5);
CREATE UNLOGGED TABLE census AS
WITH base AS (
  SELECT g, 18 + floor(random() * 70)::int AS age, random() AS r1, random() AS r2,
         random() AS r3, random() AS r4, random() AS r5, random() AS r6, random() AS r7
  FROM generate_series(1, {rows}) g
), ed AS (SELECT *, LEAST(16, GREATEST(1, age / 6 + floor(r2 * 6)::int)) AS educ FROM base),
emp AS (SELECT *, r5 < CASE WHEN age < 65 THEN 0.85 ELSE 0.15 END AS employed FROM ed),
mar AS (SELECT *, r6 < LEAST(0.9, (age - 18) / 40.0) AS married FROM emp)
SELECT age, CASE WHEN r1 < 0.5 THEN 'F' ELSE 'M' END AS sex, educ,
       round((educ * 8000 + CASE WHEN employed THEN 20000 ELSE 0 END + r3 * 30000)::numeric, 2)
         AS income,
       (ARRAY['C','E','N','S','W'])[1 + floor(r4 * 5)::int] AS region, employed, married,
       CASE WHEN married THEN LEAST(4, floor(r7 * 3 + (age < 45)::int)::int)
            ELSE floor(r7 * 1.3)::int END AS children
FROM mar;
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
      married: {type: boolean}
      children: {type: integer, keys: [0, 1, 2, 3, 4]}
  pums:
    privacy_unit: row
    columns:
      age: {type: integer, bounds: [0, 100]}
      sex: {type: integer, keys: [0, 1]}
      educ: {type: integer, keys: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}
      race: {type: integer, keys: [1, 2, 3, 4, 5, 6, 7, 8, 9]}
      income: {type: numeric, bounds: [0, 500000]}
      married: {type: integer, keys: [0, 1]}
"""

DATASETS = {
    "pums": (
        ["age", "sex", "educ", "race", "income", "married"],
        {"age": tuple(np.linspace(0, 101, 9)), "income": tuple(np.linspace(0, 500001, 9))},
    ),
    "census": (
        ["age", "sex", "educ", "income", "region", "employed", "married", "children"],
        None,
    ),
}


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


def independent(
    shape: tuple[int, ...], idx: np.ndarray, n: np.ndarray, rho: Fraction
) -> np.ndarray:
    """The baseline at the same rho: all of it on the d 1-way marginals, i.i.d. independent rows."""
    g = Gaussian(Fraction(1), rho / len(shape))
    noisy = [g.release(marginal(idx, n, shape, (c,)).astype(np.float64)) for c in range(len(shape))]
    total = max(1, int(round(float(np.mean([np.clip(x, 0, None).sum() for x in noisy])))))
    return baseline_rows(noisy, total)


def one_rep(names: list[str], shape: tuple[int, ...], real: tuple[np.ndarray, np.ndarray],
            eps: float, with_mst: bool = True) -> dict[str, float]:  # fmt: skip
    idx, n = real
    rho = epsilon_to_rho(Fraction(eps), Fraction(DELTA))
    out: dict[str, float] = {}
    t = time.perf_counter()
    out["independent"] = mean_2way(shape, real, independent(shape, idx, n, rho))
    if with_mst:
        mst = make_plan("mst", names, shape, rho, 1, compare_share=Fraction(0))
        res = run_plan(mst, idx, n)
        out["mst"] = mean_2way(shape, real, sample_result(res, fit_result(res, 1000), None))
        out["mst_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    plan = make_plan("aim", names, shape, rho, 1)
    res = run_plan(plan, idx, n)
    model = fit_result(res, 1000)
    comparison = compare_result(plan, res, model, idx, n)
    published = decide(comparison, "baseline")
    out["aim model"] = mean_2way(shape, real, sample_result(res, model, None))
    out["default"] = (
        out["aim model"]
        if published == "model"
        else mean_2way(shape, real, sample_result(res, model, None, baseline=True))
    )
    out["aim_seconds"] = time.perf_counter() - t
    out["aim_rounds"] = len(res.selected)
    out["published_baseline"] = float(published == "baseline")
    out["small_data"] = float(res.small)
    out["gap_rows"] = math.nan if comparison is None else comparison.gap_rows
    return out


def load(dsn: str, gen_rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(GENERATED.format(rows=int(gen_rows)))
        conn.execute(
            "CREATE TABLE pums (age int, sex int, educ int, race int, income float8, married int)"
        )
        with conn.cursor().copy("COPY pums FROM STDIN WITH (FORMAT csv, HEADER true)") as cp:
            cp.write(PUMS_CSV.read_bytes())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--epsilons", default="1,0.3")
    ap.add_argument("--datasets", default="pums,census")
    ap.add_argument("--gen-rows", type=int, default=100_000)
    ap.add_argument("--max-minutes", type=float, default=60.0)
    ap.add_argument("--json", type=Path, help="also write every repetition here")
    ap.add_argument("--no-mst", action="store_true", help="skip MST (the slowest system)")
    args = ap.parse_args()
    deadline = time.monotonic() + 60 * args.max_minutes
    policy = parse_policy(POLICY)
    cluster = start_cluster()
    results: list[dict[str, object]] = []
    try:
        dsn = cluster.dsn()
        load(dsn, args.gen_rows)
        cells = {}
        for ds in args.datasets.split(","):
            cols, bins = DATASETS[ds]
            src = resolve(policy, dsn, ds, cols, dict(bins) if bins else None)
            cells[ds] = (
                cols,
                src.shape,
                bounded_cells(dsn, src, Bound.for_source(src, "per_unit")),
            )
        for rep in range(args.reps):
            for ds, (cols, shape, real) in cells.items():
                for eps in (float(e) for e in args.epsilons.split(",")):
                    if time.monotonic() > deadline:
                        break
                    row = {"dataset": ds, "epsilon": eps, "rep": rep}
                    row.update(one_rep(cols, shape, real, eps, not args.no_mst))
                    results.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        cluster.stop()
    print(table(results, {ds: int(c[2][1].sum()) for ds, c in cells.items()}))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _mean(rs: list[dict[str, object]], key: str) -> float:
    v = [float(r[key]) for r in rs if key in r]  # type: ignore[arg-type]
    return float(np.mean(v)) if v else math.nan


def table(results: list[dict[str, object]], sizes: dict[str, int]) -> str:
    """Markdown: mean ± standard error (over repetitions) per dataset, epsilon and system."""
    head = (
        "| dataset (rows) | epsilon | reps | "
        + " | ".join(SYSTEMS)
        + " | AIM rounds | small data | baseline published | seconds MST / AIM |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    keys = sorted(
        {(str(r["dataset"]), float(r["epsilon"])) for r in results}, key=lambda k: (k[0], -k[1])
    )  # type: ignore[arg-type]
    for ds, eps in keys:
        rs = [r for r in results if r["dataset"] == ds and r["epsilon"] == eps]
        cells = []
        for s in SYSTEMS:
            v = np.array([float(r[s]) for r in rs if s in r])  # type: ignore[arg-type]
            se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
            cells.append(f"{v.mean():.3f} ± {se:.3f}" if len(v) else "-")

        small = sum(float(r.get("small_data", 0)) for r in rs)  # type: ignore[arg-type]
        base = sum(float(r["published_baseline"]) for r in rs)  # type: ignore[arg-type]
        lines.append(
            f"| {ds} ({sizes[ds]:,}) | {eps:g} | {len(rs)} | " + " | ".join(cells)
            + f" | {_mean(rs, 'aim_rounds'):.1f} | {small:.0f}/{len(rs)} | {base:.0f}/{len(rs)}"
            + f" | {_mean(rs, 'mst_seconds'):.0f} / {_mean(rs, 'aim_seconds'):.0f} |"
        )  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

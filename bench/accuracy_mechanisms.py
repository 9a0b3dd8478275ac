"""Accuracy of dpsql's mechanisms on PUMS, at the mechanism level (not a timed test).

For each query the exact answer is computed here in numpy (as PostgreSQL would after contribution
bounding and clamping), then released many times with the mechanism and budget split the engine
would use; we report the median relative error per output cell and, for partition selection, the
fraction of true groups suppressed. Compare choices at the same guarantee: Laplace vs Gaussian
(zCDP converted at delta = 1e-6) for many outputs, sum/count vs normalized-sum AVG, the split of
the budget between sum and count, and quantile bucket counts.

    python bench/accuracy_mechanisms.py [--reps 200] [--large]

``--large`` adds a 1.2M-row table bootstrapped from PUMS_pid (the recipe of the peer benchmark:
age jittered by +-2 years, income by a lognormal factor sigma 0.1 rounded to $100).
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpsql.dp.accounting import epsilon_to_rho
from dpsql.dp.mechanisms import Gaussian, Laplace, grid_for
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import Quantile

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
DELTA = Fraction(1, 10**6)
AGE = (0, 100)
INCOME = (0, 500_000)
Row = tuple[str, str, float, str]  # query, variant, median relative error, note


def load(large: bool) -> dict[str, np.ndarray]:
    path = DATA / "PUMS_pid.csv"
    if not path.exists():
        path = Path("/work/shared/datasets/PUMS_pid.csv")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    cols = {k: np.array([float(r[k]) for r in rows]) for k in ("age", "educ", "income", "sex")}
    if large:
        gen = np.random.default_rng(20240601)  # not noise: synthetic data
        idx = gen.integers(0, len(rows), 1_200_000)
        cols = {k: v[idx] for k, v in cols.items()}
        cols["age"] = np.clip(cols["age"] + gen.integers(-2, 3, idx.size), *AGE)
        factor = gen.lognormal(0, 0.1, idx.size)
        cols["income"] = np.clip(np.round(cols["income"] * factor / 100) * 100, *INCOME)
    return cols


def rel_err(noisy: np.ndarray, true: np.ndarray | float) -> float:
    true = np.asarray(true, dtype=float)
    return float(np.median(np.abs(noisy - true) / np.maximum(np.abs(true), 1e-9)))


def _rep(fn: Callable[[], np.ndarray], reps: int) -> np.ndarray:
    return np.stack([fn() for _ in range(reps)])


def count_queries(d: dict[str, np.ndarray], eps: Fraction, reps: int) -> list[Row]:
    n = float(d["age"].size)
    out: list[Row] = []
    lap = Laplace(Fraction(1), eps)
    out.append(("COUNT(*)", "laplace", rel_err(lap.release(np.full(reps, n)), n), ""))
    gau = Gaussian(Fraction(1), epsilon_to_rho(eps, DELTA))
    out.append(
        ("COUNT(*)", "gaussian zCDP->(eps,1e-6)", rel_err(gau.release(np.full(reps, n)), n), "")
    )
    # GROUP BY educ with public keys: one unit is in one group (L1 = L2 = 1)
    keys, true = np.unique(d["educ"], return_counts=True)
    noisy = _rep(lambda: lap.release(true.astype(float)), reps)
    out.append(("COUNT GROUP BY educ", "laplace", rel_err(noisy, true), f"{keys.size} groups"))
    # a unit contributing to k groups (e.g. k statistics in one query): L1 = k, L2 = sqrt(k)
    for k, root in ((16, 4), (256, 16)):
        lap_k = Laplace(Fraction(k), eps)
        gau_k = Gaussian(Fraction(root), epsilon_to_rho(eps, DELTA))
        for name, mech in ((f"laplace L1={k}", lap_k), (f"gaussian L2={root}", gau_k)):
            noisy = _rep(lambda m=mech: m.release(true.astype(float)), reps)
            out.append((f"{k} outputs per unit", name, rel_err(noisy, true), "same (eps, 1e-6)"))
    # partition selection instead of public keys
    ps = PartitionSelection(eps, DELTA, 1)
    kept = _rep(lambda: ps.keep(true), reps)
    suppressed = 1 - float(kept.mean())
    out.append(
        ("GROUP BY educ, keys private", "partition selection", suppressed, "fraction suppressed")
    )
    return out


def sum_avg_queries(d: dict[str, np.ndarray], eps: Fraction, reps: int) -> list[Row]:
    x, (lo, hi) = d["income"], INCOME
    n, s = float(x.size), float(x.sum())
    avg = s / n
    out: list[Row] = []
    span = Fraction(hi - lo)
    lap_sum = Laplace(span, eps, grid_for(span / eps))
    out.append(("SUM(income)", "laplace", rel_err(lap_sum.release(np.full(reps, s)), s), ""))
    for share in (Fraction(1, 2), Fraction(2, 3), Fraction(9, 10)):
        ms = Laplace(span, eps * share, grid_for(span / (eps * share)))
        mc = Laplace(Fraction(1), eps * (1 - share))
        noisy = ms.release(np.full(reps, s)) / np.maximum(mc.release(np.full(reps, n)), 1)
        out.append(("AVG(income)", f"sum/count, sum share {share}", rel_err(noisy, avg), ""))
    mid, half = Fraction(hi + lo, 2), span / 2
    centered = float((x - float(mid)).sum())
    for share in (Fraction(1, 2), Fraction(2, 3)):
        ms = Laplace(half, eps * share, grid_for(half / (eps * share)))
        mc = Laplace(Fraction(1), eps * (1 - share))
        noisy = float(mid) + ms.release(np.full(reps, centered)) / np.maximum(
            mc.release(np.full(reps, n)), 1
        )
        noisy = np.clip(noisy, lo, hi)
        out.append(("AVG(income)", f"normalized sum, share {share}", rel_err(noisy, avg), ""))
    return out


def quantile_queries(d: dict[str, np.ndarray], eps: Fraction, reps: int) -> list[Row]:
    out: list[Row] = []
    for col, (lo, hi), buckets in (("age", AGE, 100), ("income", INCOME, 1000)):
        x = d[col]
        edges = np.linspace(lo, hi, buckets + 1)
        counts = np.histogram(np.clip(x, lo, hi), edges)[0].astype(np.int64)
        for q, name in ((Fraction(1, 2), "MEDIAN"), (Fraction(1, 10), "PERCENTILE 0.1")):
            mech = Quantile(q, eps, Fraction(lo), Fraction(hi), buckets, integer=True)
            tq = float(np.quantile(x, float(q), method="inverted_cdf"))
            noisy = mech.release(np.tile(counts, (reps, 1)))
            err = float(np.median(np.abs(noisy - tq))) / (hi - lo)
            out.append((f"{name}({col})", f"{buckets} buckets", err, "error / (hi - lo)"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--large", action="store_true")
    args = ap.parse_args()
    tables = [("PUMS_pid (1,000 rows)", load(False))]
    if args.large:
        tables.append(("bootstrapped PUMS (1.2M rows)", load(True)))
    for title, d in tables:
        print(f"\n### {title}\n")
        print("| query | variant | eps 0.1 | eps 1 | eps 10 | note |")
        print("|---|---|---|---|---|---|")
        results = {}
        for eps in (Fraction(1, 10), Fraction(1), Fraction(10)):
            rows = count_queries(d, eps, args.reps)
            rows += sum_avg_queries(d, eps, args.reps)
            rows += quantile_queries(d, eps, args.reps)
            for q, v, e, note in rows:
                results.setdefault((q, v, note), []).append(e)
        for (q, v, note), errs in results.items():
            cells = " | ".join(f"{e:.3g}" for e in errs)
            print(f"| {q} | {v} | {cells} | {note or 'median rel. error'} |")


if __name__ == "__main__":
    main()

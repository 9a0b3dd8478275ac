"""Range-query benchmark: all ranges of a 1,024-value ordered domain, hierarchy vs flat histogram.

For each epsilon (pure DP, discrete Laplace; one row per unit) and repetition, the real
mechanisms of :mod:`dpsql.release.hierarchy` release the bins of a generated column (100,000 rows,
a skewed mixture over 1,024 values), and every one of the 524,800 ranges [a, b] is answered by
summing released bins. Reported: mean absolute error and root-mean-square error over all ranges
(mean ± standard error over repetitions), and the theory line: the exact RMSE of the linear
estimator, and its MAE if each range's error were Gaussian with that variance (sqrt(2/pi) sd,
averaged over ranges; for the flat histogram's short ranges, Laplace sums, this is approximate).
No database: the counts are generated in numpy (test data). Usage::

    python bench/ranges.py [--reps 20] [--epsilons 1,0.1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsql.release.hierarchy import (
    TreePlan,
    consistent_leaves,
    leaf_operator,
    measure_tree,
    plan_tree,
)

N_BINS = 1024


def data(rows: int = 100_000) -> np.ndarray:
    gen = np.random.default_rng(2026)  # test data, not noise
    a = gen.normal(300, 60, rows // 2)
    b = gen.exponential(150, rows // 2) + 500
    v = np.clip(np.concatenate([a, b]).astype(int), 0, N_BINS - 1)
    return np.bincount(v, minlength=N_BINS)


def all_range_errors(est: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """(MAE, RMSE) over all ranges [a, b], 0 <= a <= b < n, from prefix sums of the errors."""
    d = np.concatenate([[0.0], np.cumsum(est - true)])
    diff = d[None, :] - d[:, None]  # diff[a, b + 1] = error of [a, b] for a <= b
    iu = np.triu_indices(len(d), 1)
    e = diff[iu]
    return float(np.abs(e).mean()), float(math.sqrt((e * e).mean()))


def theory(plan: TreePlan) -> tuple[float, float]:
    """(MAE if Gaussian, exact RMSE) over all ranges, from the Gram matrix of prefix rows."""
    op = leaf_operator(plan)
    prefix = np.vstack([np.zeros(op.shape[1]), np.cumsum(op, axis=0)])
    gram = prefix @ prefix.T
    diag = np.diag(gram)
    var = float(plan.mechanism.std) ** 2 * (diag[None, :] + diag[:, None] - 2 * gram)
    v = var[np.triu_indices(len(diag), 1)]
    return float(np.sqrt(2 / np.pi) * np.sqrt(v).mean()), float(math.sqrt(v.mean()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--epsilons", default="1,0.1")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    true = data()
    out = []
    for eps in (float(e) for e in args.epsilons.split(",")):
        e = Fraction(repr(eps))
        plans = {
            "hierarchy (default)": plan_tree(N_BINS, e, Fraction(0), 1),
            "flat histogram": plan_tree(N_BINS, e, Fraction(0), 1, 2, flat=True),
            "binary tree (B=2)": plan_tree(N_BINS, e, Fraction(0), 1, 2),
            "B=32 tree": plan_tree(N_BINS, e, Fraction(0), 1, 32),
        }
        for name, plan in plans.items():
            t = time.perf_counter()
            errs = np.array(
                [all_range_errors(consistent_leaves(plan, measure_tree(plan, true)), true)
                 for _ in range(args.reps)]
            )  # fmt: skip
            th = theory(plan)
            row = {
                "epsilon": eps,
                "system": name,
                "shape": "flat" if plan.flat else f"B={plan.branching}, h={plan.height}",
                "mae": float(errs[:, 0].mean()),
                "mae_se": float(errs[:, 0].std(ddof=1) / math.sqrt(len(errs))),
                "rmse": float(errs[:, 1].mean()),
                "rmse_se": float(errs[:, 1].std(ddof=1) / math.sqrt(len(errs))),
                "theory_mae_gaussian": th[0],
                "theory_rmse": th[1],
                "seconds": time.perf_counter() - t,
            }
            out.append(row)
            print(json.dumps(row), flush=True)
    print(table(out, args.reps))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


def table(rows: list[dict[str, object]], reps: int) -> str:
    head = (
        f"| epsilon | release | tree | MAE ({reps} reps) | theory MAE | RMSE | theory RMSE |\n"
        "|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['epsilon']:g} | {r['system']} | {r['shape']} | {r['mae']:.1f} ± "
            f"{r['mae_se']:.1f} | {r['theory_mae_gaussian']:.1f} | {r['rmse']:.1f} ± "
            f"{r['rmse_se']:.1f} | {r['theory_rmse']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

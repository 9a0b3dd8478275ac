"""Where AIM's small-data rule should switch: a study on tuning data (neither PUMS nor census).

The rule (:func:`dpsql.release.aim.small_data`): AIM measures no pair when the noisy row count N
is below C d sigma_full (sigma_full = R sqrt(d / (2 rho)), the 1-way noise had all of rho been
split over the d columns). C must not be tuned on the tables the benchmark evaluates
(``bench/synthetic.py``: PUMS and census), so this study generates its own table: 7 columns
(10, 3, 12, 2, 6, 4, 7 values; a chain of planted dependencies a -> b -> c, a -> d, (c, d) -> f,
e -> g) drawn with numpy from a fixed seed, at several sizes N, and runs the default pipeline
(AIM + the DP comparison + the baseline fallback, delta 1e-6, R = 1) at several epsilons with the
rule forced both ways. It prints, per (N, epsilon), the ratio N / (d sigma_full) and the mean
2-way TVD (± standard error) of both regimes; C is set between the largest ratio where the
1-way-only release wins and the smallest where AIM wins. Usage::

    python bench/small_data.py [--sizes 1000,3000] [--epsilons 0.3,1,3] [--reps 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsql.dp.accounting import epsilon_to_rho
from dpsql.release.compare import decide
from dpsql.release.marginals import marginal
from dpsql.release.quality import tvd
from dpsql.release.synthesis import (
    SyntheticPlan,
    compare_result,
    fit_result,
    make_plan,
    run_plan,
    sample_result,
)

DELTA = 1e-6
NAMES = ["a", "b", "c", "d", "e", "f", "g"]
SHAPE = (10, 3, 12, 2, 6, 4, 7)


def tuning_table(rows: int, seed: int = 20261126) -> tuple[np.ndarray, np.ndarray]:
    """The tuning table's cells (idx, n): generated data, not noise (numpy's generator)."""
    gen = np.random.default_rng(seed)
    a = np.minimum(9, gen.poisson(3.0, rows))
    b = np.where(gen.random(rows) < 0.7, a // 4, gen.integers(0, 3, rows))
    c = np.clip(4 * b + gen.integers(0, 5, rows), 0, 11)
    d = (gen.random(rows) < np.where(a > 4, 0.8, 0.3)).astype(np.int64)
    e = gen.choice(6, rows, p=[0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    f = np.clip((c // 4 + d + gen.integers(0, 2, rows)), 0, 3)
    g = np.where(gen.random(rows) < 0.6, e, gen.integers(0, 7, rows))
    data = np.stack([a, b, c, d, e, f, g], axis=1).astype(np.int64)
    idx, n = np.unique(data, axis=0, return_counts=True)
    return idx, n.astype(np.int64)


def default_tvd(plan: SyntheticPlan, idx: np.ndarray, n: np.ndarray) -> tuple[float, bool]:
    """The default pipeline's mean 2-way TVD and whether it ran in the small-data regime."""
    res = run_plan(plan, idx, n)
    model = fit_result(res, 1000)
    published = decide(compare_result(plan, res, model, idx, n), "baseline")
    rows = sample_result(res, model, None, baseline=published == "baseline")
    ones = np.ones(len(rows), dtype=np.int64)
    pairs = list(combinations(range(len(SHAPE)), 2))
    return float(
        np.mean([tvd(marginal(idx, n, SHAPE, p), marginal(rows, ones, SHAPE, p)) for p in pairs])
    ), res.small


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,3000")
    ap.add_argument("--epsilons", default="0.3,1,3")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--max-minutes", type=float, default=40.0)
    args = ap.parse_args()
    deadline = time.monotonic() + 60 * args.max_minutes
    summary = []
    for size in (int(s) for s in args.sizes.split(",")):
        idx, n = tuning_table(size)
        for eps in (float(e) for e in args.epsilons.split(",")):
            rho = epsilon_to_rho(Fraction(eps), Fraction(DELTA))
            ratio = size / (len(SHAPE) * math.sqrt(len(SHAPE) / (2 * float(rho))))
            plan = make_plan("aim", NAMES, SHAPE, rho, 1)
            out: dict[str, list[float]] = {"small": [], "aim": []}
            for _ in range(args.reps):
                if time.monotonic() > deadline:
                    break
                for regime, rule in (("small", math.inf), ("aim", 0.0)):
                    forced = dataclasses.replace(
                        plan, model=dataclasses.replace(plan.model, small_rule=rule)
                    )
                    out[regime].append(default_tvd(forced, idx, n)[0])
            row = {"rows": size, "epsilon": eps, "ratio": round(ratio, 2)}
            for k, v in out.items():
                a = np.array(v)
                row[k] = (
                    f"{a.mean():.4f} ± {a.std(ddof=1) / math.sqrt(len(a)):.4f}"
                    if len(a) > 1
                    else "-"
                )
            print(json.dumps(row), flush=True)
            summary.append(row)
    print("| rows | epsilon | N / (d sigma_full) | 1-way only (small) | AIM |")
    print("|---|---|---|---|---|")
    for r in sorted(summary, key=lambda r: float(r["ratio"])):
        print(f"| {r['rows']:,} | {r['epsilon']:g} | {r['ratio']} | {r['small']} | {r['aim']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

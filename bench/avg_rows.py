"""Which rows-per-unit cap R suits an AVG: noise against the reweighting's chance bias (issue 16).

bench/accuracy.py's ``people`` table, redrawn ``--tables`` times from its recipe (12,000 units
with 1, 2, 3 and 4 rows, 3,000 each; incomes log-normal, median 35,000, sigma 0.8, independent
of the unit's row count; declared [0, 500,000], kept as the clamp as ``auto`` and hand-tuning
both chose). For each table and R = 1..4, the AVG the engine releases (simulated in numpy): each
unit counts with min(n, R) rows at its own mean (dpsql/sql/rewrite/bound_partials.py), the
normalised sum SUM(x - mid) and the count released with Laplace noise of scales R (c/2) / e_m
and R / e_m, e_m half the answer's epsilon, then mid + S / N clamped into [0, c].

Prints, per R: the spread of the relative bias over tables (the reweighting's, chance here), the
mean over tables of the median relative error at the answer's epsilon (1 - 1/10: later
statements; 0.7: a first statement, 1/5 choosing the bounds), how often each R is the best with
the truth in hand (the hand-tuned oracle, answer at 0.9), and the ratio of R at the median unit
(a coin flip between 2 and 3 on this table) to that oracle. docs/accuracy.md, "The two misses".

    python -m bench.avg_rows [--tables 100] [--draws 3000]
"""

from __future__ import annotations

import argparse

import numpy as np

UNITS = 12_000
HI = 500_000.0
RS = (1, 2, 3, 4)


def median_error(
    rng: np.random.Generator, n: np.ndarray, mu: np.ndarray, truth: float, r: int, eps: float,
    draws: int,
) -> float:  # fmt: skip
    """Median relative error of the released AVG at R = ``r``, answer epsilon ``eps``."""
    mid, half, eps_m = HI / 2, HI / 2, eps / 2
    k = np.minimum(n, r)
    s = (k * (mu - mid)).sum() + rng.laplace(0, r * half / eps_m, draws)
    c = k.sum() + rng.laplace(0, r / eps_m, draws)
    avg = np.clip(mid + s / c, 0, HI)
    return float(np.median(np.abs(avg - truth) / truth))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=100)
    ap.add_argument("--draws", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    n = 1 + np.arange(1, UNITS + 1) % 4
    unit = np.repeat(np.arange(UNITS), n)
    epss = (0.9, 0.7)
    err = {e: {r: [] for r in RS} for e in epss}  # type: dict[float, dict[int, list[float]]]
    bias: dict[int, list[float]] = {r: [] for r in RS}
    for _ in range(args.tables):
        rows = np.exp(np.log(35_000) + 0.8 * rng.standard_normal(int(n.sum())))
        rows = np.minimum(rows, HI)
        mu = np.bincount(unit, rows) / n
        truth = float(rows.mean())
        for r in RS:
            k = np.minimum(n, r)
            bias[r].append(float((k * mu).sum() / k.sum() / truth - 1))
            for e in epss:
                err[e][r].append(median_error(rng, n, mu, truth, r, e, args.draws))
    best = np.min([err[0.9][r] for r in RS], axis=0)
    wins = np.argmin([err[0.9][r] for r in RS], axis=0)
    print(f"{args.tables} tables, {UNITS} units (1-4 rows each)")
    print("| R | bias spread | error at 0.9 | error at 0.7 | best (oracle) on |")
    print("|---|---|---|---|---|")
    for i, r in enumerate(RS):
        print(
            f"| {r} | {np.std(bias[r]):.2g} | {np.mean(err[0.9][r]):.2g} | "
            f"{np.mean(err[0.7][r]):.2g} | {int((wins == i).sum())} tables |"
        )
    for e in epss:
        coin = (np.array(err[e][2]) + np.array(err[e][3])) / 2
        each = ", ".join(f"R={r} {np.median(np.array(err[e][r]) / best):.2f}" for r in RS)
        print(
            f"at {e}: median over tables of error / oracle's: median unit {np.median(coin / best):.2f}; {each}"
        )


if __name__ == "__main__":
    main()

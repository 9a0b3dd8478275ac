"""How to split a multi-level histogram's budget, and the error each split gives (exact formula).

Levels: the total (T), each column's 1-way marginal (M, k of them, one share split evenly) and the
cells (C, always). Level l measures A_l x with noise variance v_l, and the published values come
from the generalized least-squares estimate x^ = (sum_l A_l^T A_l / v_l)^-1 sum_l A_l^T y_l / v_l
(:mod:`dpsql.release.consistency`). Its covariance has a closed form: the normal matrix is a sum
of Kronecker products of I (kept axis) and J (summed axis), so it is diagonal in the basis built
from, per axis i of size n_i, the constant vector and its (n_i - 1)-dimensional complement. For
a set S of axes (complement on S, constant elsewhere) the eigenvalue is

    lambda_S = sum over levels l keeping every axis of S of  (prod of n_i over axes l sums) / v_l

with multiplicity dim_S = prod_{i in S} (n_i - 1). With N = prod n_i cells:

* a cell, on average:       Var = (1/N) sum_S dim_S / lambda_S
* a marginal value of axis a, on average:  Var = (N / n_a²) (1 / lambda_{} + (n_a - 1) / lambda_{a})
* the total:                Var = N / lambda_{}

(the GLS estimate before projection to non-negative integers, which only moves it closer on
average; tested against simulation). ``optimize`` searches the shares on a 1/100 grid for the
split minimizing the error of the chosen target; ``balanced`` minimizes the largest ratio of each
level's error to the best that level could get alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

TARGETS = ("cells", "marginals", "total", "balanced", "even")
GROUPS = ("total", "marginals", "cells")


@dataclass(frozen=True)
class Errors:
    """Standard deviations of the GLS estimate: a cell, a marginal value (mean over axes), the
    total."""

    cells: float
    marginals: float
    total: float

    def as_json(self) -> dict[str, float]:
        return {"cell_std": self.cells, "marginal_std": self.marginals, "total_std": self.total}


def gls_errors(shape: Sequence[int], levels: Sequence[tuple[tuple[int, ...], float]]) -> Errors:
    """The closed-form errors for levels given as (kept axes, noise variance): the total (()),
    1-way marginals ((a,)) and the cells (all axes), as a histogram measures them.

    Only three kinds of eigenvalue occur: lambda_{} (every level), lambda_{a} (the marginal of a,
    if measured, and the cells) and, for |S| >= 2, the cells' alone; the dimensions add up to N.
    """
    k = len(shape)
    n_cells = math.prod(shape)
    full = tuple(range(k))

    def scale(axes: tuple[int, ...]) -> float:  # cells summed into one value of the level
        return float(math.prod(shape[i] for i in range(k) if i not in axes))

    lam0 = sum(scale(axes) / v for axes, v in levels)
    v_cells = next(v for axes, v in levels if axes == full)
    lam_a = []
    for a in range(k):
        lam_a.append(sum(scale(axes) / v for axes, v in levels if a in axes))
    rest = n_cells - 1 - sum(n - 1 for n in shape)  # dimensions of the |S| >= 2 eigenspaces
    cell = 1 / lam0 + sum((shape[a] - 1) / lam_a[a] for a in range(k)) + rest * v_cells
    marg = [(n_cells / shape[a] ** 2) * (1 / lam0 + (shape[a] - 1) / lam_a[a]) for a in range(k)]
    return Errors(
        math.sqrt(cell / n_cells), math.sqrt(sum(marg) / max(k, 1)), math.sqrt(n_cells / lam0)
    )


def optimize(
    groups: dict[str, int],
    errors_for: Callable[[dict[str, Fraction]], Errors],
    target: str,
    step: int = 100,
) -> dict[str, Fraction]:
    """The shares (summing to 1, each a multiple of 1/step, the cells' > 0) of the measured groups
    (name -> number of levels in it) minimizing ``target``'s error; "even": the same share for
    every level. ``errors_for(shares)`` gives the errors of a split."""
    if target == "even" or len(groups) == 1:
        levels = sum(groups.values())
        return {g: Fraction(c, levels) for g, c in groups.items()}
    others = [g for g in groups if g != "cells"]
    grid = []
    for cuts in _compositions(step, len(others)):
        shares = {g: Fraction(c, step) for g, c in zip(others, cuts, strict=True)}
        shares["cells"] = 1 - sum(shares.values(), Fraction(0))
        if shares["cells"] > 0 and all(v > 0 for v in shares.values()):
            grid.append((shares, errors_for(shares)))
    if target != "balanced":
        return min(grid, key=lambda se: getattr(se[1], target))[0]
    best = {t: min(getattr(e, t) for _, e in grid) for t in ("cells", "marginals", "total")}
    wanted = [t for t in ("cells", "marginals", "total") if t in groups]
    return min(grid, key=lambda se: max(getattr(se[1], t) / best[t] for t in wanted))[0]


def _compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    """All tuples of ``parts`` positive integers with sum < total."""
    if parts == 0:
        return [()]
    out = []
    for first in range(1, total):
        for rest in _compositions(total - first, parts - 1):
            out.append((first, *rest))
    return out

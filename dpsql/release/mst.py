"""MST (McKenna, Miklau & Sheldon 2021): private marginal selection and measurement.

Input: the bounded cells (each privacy unit keeps at most R rows, :mod:`dpsql.release.source`), so
every marginal's count vector moves by at most R in L1 and in L2 between neighbours.

The budget rho (zCDP) is split in three equal parts:

1. every 1-way marginal with discrete Gaussian noise, rho/3 split over the d columns
   (sigma² = R² / (2 rho_1)); then rare values are merged by these noisy counts
   (:mod:`dpsql.release.compress`, post-processing) and everything below runs on the compressed
   domain;
2. a maximum spanning tree of d-1 edges chosen by d-1 exponential mechanisms (McSherry & Talwar
   2007) over the pairs that join two components (Kruskal): the score of a pair is the L1 distance
   between its true 2-way marginal and the one implied by the noisy 1-way marginals (independence),
   sensitivity R; each round with epsilon_s = sqrt(8 (rho/3) / (d-1)) (rounded down) is
   epsilon_s²/8-zCDP (Cesar & Rogers 2021, bounded range);
3. the selected 2-way marginals with discrete Gaussian noise, rho/3 split over the d-1 edges.

Composition gives at most rho-zCDP (``MstPlan.cost`` states the exact sum). Private-PGM
(:mod:`dpsql.release.pgm`) then fits a graphical model to the noisy marginals only and samples
rows from it: post-processing, which reads no data. The exponential mechanism samples exactly
(:func:`dpsql.release.marginals.exponential_mechanism`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.dp.accounting import Cost
from dpsql.dp.mechanisms import Gaussian
from dpsql.dp.quantiles import round_down
from dpsql.release.compress import (
    Compression,
    compress_cells,
    compress_measurement,
    plan_compression,
)
from dpsql.release.marginals import (
    SCORE_GRID,
    Synthesis,
    SynthesisPlan,
    exponential_mechanism,
    independent,
    l1_score,
    marginal,
    measure,
)
from dpsql.release.measurement import Measurement


@dataclass(frozen=True)
class MstPlan(SynthesisPlan):
    """The budget split of one MST run (fixed before any data is read)."""

    one_way: Gaussian
    two_way: Gaussian | None
    select_epsilon: Fraction
    compress: bool = True

    @property
    def cost(self) -> Cost:
        c = Fraction(self.d) * self.one_way.rho
        if self.two_way is not None:
            c += (self.d - 1) * (self.two_way.rho + self.select_epsilon**2 / 8)
        return Cost(rho=c)


def selection_epsilon(rho: Fraction) -> Fraction:
    """The largest epsilon on a 2**-20 grid with epsilon²/8 <= rho (an exponential mechanism
    costs epsilon²/8 in zCDP)."""
    eps = round_down(Fraction(math.sqrt(float(8 * rho))))
    while eps > 0 and eps**2 / 8 > rho:
        eps -= Fraction(1, 2**20)
    return max(eps, Fraction(0))


def plan_mst(
    names: Sequence[str],
    shape: Sequence[int],
    rho: Fraction,
    rows_bound: int,
    compress: bool = True,
) -> MstPlan:
    d = len(shape)
    r = Fraction(rows_bound)
    if d == 1:
        return MstPlan(
            tuple(names), tuple(shape), rho, rows_bound, Gaussian(r, rho), None, Fraction(0),
            compress,
        )  # fmt: skip
    third = rho / 3
    return MstPlan(
        tuple(names),
        tuple(shape),
        rho,
        rows_bound,
        Gaussian(r, third / d),
        Gaussian(r, third / (d - 1)),
        selection_epsilon(third / (d - 1)),
        compress,
    )


def select_tree(
    plan: MstPlan,
    shape: Sequence[int],
    idx: np.ndarray,
    n: np.ndarray,
    one_way: Sequence[np.ndarray],
) -> tuple[tuple[int, int], ...]:
    """Kruskal with an exponential mechanism per edge (scores read the true 2-way marginals).

    ``shape``, ``idx`` and ``one_way`` (noisy counts, unweighted) are over the compressed domain.
    """
    total = max(1.0, float(np.mean([np.clip(m, 0, None).sum() for m in one_way])))
    parent = list(range(plan.d))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    scores: dict[tuple[int, int], int] = {}
    for i in range(plan.d):
        for j in range(i + 1, plan.d):
            model = independent([one_way[i], one_way[j]], total)
            scores[(i, j)] = l1_score(marginal(idx, n, shape, (i, j)), model)
    edges: list[tuple[int, int]] = []
    for _ in range(plan.d - 1):
        cands = [e for e in scores if find(e[0]) != find(e[1])]
        pick = cands[
            exponential_mechanism(
                [scores[e] for e in cands], plan.select_epsilon, SCORE_GRID * plan.rows_bound
            )
        ]
        edges.append(pick)
        parent[find(pick[0])] = find(pick[1])
    return tuple(edges)


def compress_one_way(
    plan_compress: bool, one: Sequence[Measurement]
) -> tuple[Compression, tuple[Measurement, ...]]:
    """The compression decided by the noisy 1-way marginals, and those re-expressed over it."""
    comp = (
        plan_compression(one)
        if plan_compress
        else Compression.identity([m.noisy.size for m in one])
    )
    return comp, tuple(compress_measurement(comp, m) for m in one)


def run_mst(plan: MstPlan, idx: np.ndarray, n: np.ndarray) -> Synthesis:
    """Measure, compress, select and measure: the only step that reads the (bounded) data."""
    one = tuple(
        measure(plan.one_way, marginal(idx, n, plan.shape, (c,)), (c,)) for c in range(plan.d)
    )
    comp, cone = compress_one_way(plan.compress, one)
    if plan.two_way is None:
        return Synthesis(plan.names, plan.shape, one, comp, cone, ())
    cidx, cn = compress_cells(comp, idx, n)
    sums = [np.bincount(comp.maps[c], weights=m.noisy) for c, m in enumerate(one)]
    edges = select_tree(plan, comp.shape, cidx, cn, sums)
    two = tuple(measure(plan.two_way, marginal(cidx, cn, comp.shape, e), e) for e in edges)
    return Synthesis(plan.names, plan.shape, one, comp, cone + two, edges)

"""MST (McKenna, Miklau & Sheldon 2021): private marginal selection and measurement, fit with mbi.

Input: the bounded cells (each privacy unit keeps at most R rows, :mod:`dpsql.release.source`), so
every marginal's count vector moves by at most R in L1 and in L2 between neighbours.

The budget rho (zCDP) is split in three equal parts:

1. every 1-way marginal with discrete Gaussian noise, rho/3 split over the d columns
   (sigma² = R² / (2 rho_1));
2. a maximum spanning tree of d-1 edges chosen by d-1 exponential mechanisms (McSherry & Talwar
   2007) over the pairs that join two components (Kruskal): the score of a pair is the L1 distance
   between its true 2-way marginal and the one implied by the noisy 1-way marginals (independence),
   sensitivity R; each round with epsilon_s = sqrt(8 (rho/3) / (d-1)) (rounded down) is
   epsilon_s²/8-zCDP (Cesar & Rogers 2021, bounded range);
3. the selected 2-way marginals with discrete Gaussian noise, rho/3 split over the d-1 edges.

Composition gives at most rho-zCDP (``MstPlan.cost`` states the exact sum). Private-PGM (``mbi``,
McKenna et al. 2019) then estimates a graphical model from the noisy marginals only and samples
rows from it: post-processing, which reads no data. The exponential mechanism samples exactly
(rejection from a uniform proposal with Bernoulli(exp(-gap)) coins of :mod:`dpsql.dp.rng`).
Unlike the reference MST we do not compress rare domain values.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.dp import rng
from dpsql.dp.accounting import Cost
from dpsql.dp.mechanisms import Gaussian
from dpsql.dp.quantiles import round_down

_SCORE_GRID = 1024  # model marginals are rounded to 1/1024 so that scores are exact integers


@dataclass(frozen=True)
class MstPlan:
    """The budget split of one MST run (fixed before any data is read)."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    rho: Fraction
    rows_bound: int
    one_way: Gaussian
    two_way: Gaussian | None
    select_epsilon: Fraction

    @property
    def d(self) -> int:
        return len(self.shape)

    def mechanism_for(self, clique: tuple[int, ...]) -> Gaussian:
        """The mechanism that measured a 1-way or 2-way marginal."""
        if len(clique) == 1 or self.two_way is None:
            return self.one_way
        return self.two_way

    @property
    def cost(self) -> Cost:
        c = Fraction(self.d) * self.one_way.rho
        if self.two_way is not None:
            c += (self.d - 1) * (self.two_way.rho + self.select_epsilon**2 / 8)
        return Cost(rho=c)


def plan_mst(names: Sequence[str], shape: Sequence[int], rho: Fraction, rows_bound: int) -> MstPlan:
    d = len(shape)
    r = Fraction(rows_bound)
    if d == 1:
        return MstPlan(
            tuple(names), tuple(shape), rho, rows_bound, Gaussian(r, rho), None, Fraction(0)
        )
    third = rho / 3
    eps = round_down(Fraction(math.sqrt(float(8 * third / (d - 1)))))
    while eps > 0 and eps**2 / 8 > third / (d - 1):
        eps -= Fraction(1, 2**20)
    return MstPlan(
        tuple(names),
        tuple(shape),
        rho,
        rows_bound,
        Gaussian(r, third / d),
        Gaussian(r, third / (d - 1)),
        eps,
    )


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal over ``clique`` (column indices), flattened, with its noise std."""

    clique: tuple[int, ...]
    noisy: np.ndarray
    std: float


@dataclass(frozen=True)
class MstResult:
    one_way: tuple[Measurement, ...]
    edges: tuple[tuple[int, int], ...]
    two_way: tuple[Measurement, ...]

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        return self.one_way + self.two_way


def marginal(
    idx: np.ndarray, n: np.ndarray, shape: Sequence[int], clique: Sequence[int]
) -> np.ndarray:
    """The dense marginal over ``clique`` of sparse cells (idx: (rows, k) bin indices)."""
    dims = [shape[c] for c in clique]
    if not clique:
        return np.array([n.sum()], dtype=np.int64)
    flat = np.ravel_multi_index(tuple(idx[:, c] for c in clique), dims) if len(idx) else idx[:0, 0]
    return np.bincount(flat, weights=n, minlength=math.prod(dims)).astype(np.int64).reshape(dims)


def exponential_mechanism(scores: Sequence[int], epsilon: Fraction, sensitivity: int) -> int:
    """Index i chosen with probability ∝ exp(epsilon scores[i] / (2 sensitivity)), exactly.

    Rejection sampling: propose i uniformly, accept with Bernoulli(exp(-epsilon (max - s_i) /
    (2 sensitivity))); the accepted index has exactly the exponential mechanism's distribution.
    """
    s = [int(x) for x in scores]
    top = max(s)
    m = len(s)
    den = 2 * sensitivity * epsilon.denominator
    while True:
        cand = rng.uniform_below(m, size=m)
        num = [(top - s[int(c)]) * epsilon.numerator for c in cand]
        heads = rng.bernoulli_exp_rational(num, den)
        hit = np.flatnonzero(heads)
        if hit.size:
            return int(cand[hit[0]])


def _independent(one_way: Sequence[Measurement], i: int, j: int, total: float) -> np.ndarray:
    """The 2-way marginal implied by independence of the (non-negative) noisy 1-way marginals."""
    p = [np.clip(one_way[c].noisy, 0, None) for c in (i, j)]
    p = [x / x.sum() if x.sum() > 0 else np.full(x.shape, 1 / x.size) for x in p]
    return np.outer(p[0], p[1]) * total


def select_tree(
    plan: MstPlan, idx: np.ndarray, n: np.ndarray, one_way: Sequence[Measurement]
) -> tuple[tuple[int, int], ...]:
    """Kruskal with an exponential mechanism per edge (scores read the true 2-way marginals)."""
    total = max(1.0, float(np.mean([np.clip(m.noisy, 0, None).sum() for m in one_way])))
    parent = list(range(plan.d))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    scores: dict[tuple[int, int], int] = {}
    for i in range(plan.d):
        for j in range(i + 1, plan.d):
            model = np.round(_independent(one_way, i, j, total) * _SCORE_GRID).astype(np.int64)
            true = marginal(idx, n, plan.shape, (i, j)) * _SCORE_GRID
            scores[(i, j)] = int(np.abs(model - true).sum())
    edges: list[tuple[int, int]] = []
    for _ in range(plan.d - 1):
        cands = [e for e in scores if find(e[0]) != find(e[1])]
        pick = cands[
            exponential_mechanism(
                [scores[e] for e in cands], plan.select_epsilon, _SCORE_GRID * plan.rows_bound
            )
        ]
        edges.append(pick)
        parent[find(pick[0])] = find(pick[1])
    return tuple(edges)


def _measure(g: Gaussian, exact: np.ndarray, clique: tuple[int, ...]) -> Measurement:
    noisy = g.release(exact.reshape(-1).astype(np.float64))
    return Measurement(clique, noisy, g.std)


def run_mst(plan: MstPlan, idx: np.ndarray, n: np.ndarray) -> MstResult:
    """Measure, select and measure: the only step that reads the (bounded) data."""
    one = tuple(
        _measure(plan.one_way, marginal(idx, n, plan.shape, (c,)), (c,)) for c in range(plan.d)
    )
    if plan.two_way is None:
        return MstResult(one, (), ())
    edges = select_tree(plan, idx, n, one)
    two = tuple(_measure(plan.two_way, marginal(idx, n, plan.shape, e), e) for e in edges)
    return MstResult(one, edges, two)


def _mbi() -> Any:
    import jax

    jax.config.update("jax_enable_x64", True)  # type: ignore[no-untyped-call]
    jax.config.update("jax_enable_compilation_cache", False)  # type: ignore[no-untyped-call]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import mbi
    return mbi


def fit_model(plan: MstPlan, result: MstResult, iters: int = 1000) -> Any:
    """Private-PGM's estimate of a graphical model from the noisy marginals (post-processing)."""
    mbi = _mbi()
    domain = mbi.Domain(list(plan.names), list(plan.shape))
    ms = [
        mbi.LinearMeasurement(m.noisy, tuple(plan.names[c] for c in m.clique), stddev=m.std)
        for m in result.measurements
    ]
    return mbi.estimation.MirrorDescent().estimate(domain, ms, iters=iters)


def sample_rows(plan: MstPlan, model: Any, rows: int | None = None) -> np.ndarray:
    """Synthetic rows (bin indices, shape (N, d)) drawn from the model (post-processing).

    N defaults to the model's estimated total (from the noisy marginals).
    """
    n = max(1, int(round(float(rows if rows is not None else model.total))))
    data = model.synthetic_data(rows=n).to_dict()
    return np.stack([np.asarray(data[name], dtype=np.int64) for name in plan.names], axis=1)

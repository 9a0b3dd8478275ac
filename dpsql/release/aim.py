"""AIM (McKenna, Mullins, Sheldon & Miklau, VLDB 2022): adaptive, workload-aware marginal selection.

Input: the bounded cells (each privacy unit keeps at most R rows), so every marginal moves by at
most R in L1 and L2 between neighbours. The workload is every pair of columns (weight 1); the
candidates are its downward closure (all 1-way and 2-way marginals), each with the weight
w(c) = sum over workload pairs p of |c ∩ p| (AIM's ``compile_workload``).

With rho the budget (zCDP) and T nominal rounds:

1. every 1-way marginal is measured with discrete Gaussian noise, half of rho split evenly over
   the d columns (the paper spends 0.9 rho / T on each: on small tables such noisy 1-way counts
   merge too much and the model's 1-way marginals end up worse than the trivial baseline's);
   rare values are then merged by these noisy counts (:mod:`dpsql.release.compress`,
   post-processing) and everything below runs on the compressed domain; Private-PGM fits a model
   to the measurements (post-processing);
2. each round starts with rho_m = 0.9 (rho / 2) / T and rho_s = 0.1 (rho / 2) / T; if less than
   2 (rho_m + rho_s) is left, the round takes all that is left (90% to measure, 10% to select)
   and is the last. The candidate c that the current model approximates
   worst is chosen by the exponential mechanism with epsilon_s = sqrt(8 rho_s) (rounded down;
   epsilon_s²/8-zCDP, Cesar & Rogers 2021) on the score w(c) (||x_c - m_c||_1 - sqrt(2/pi)
   sigma |c|), sensitivity R max w (m_c the model's marginal: released values only). Only
   candidates whose model stays under max_model_mb * (rho spent / rho) are eligible (or already
   covered by the model). Then x_c is measured with discrete Gaussian noise of rho_m and the model
   re-fitted;
3. when the re-fitted model's marginal on c moved by less than the noise's expected L1 size
   (sqrt(2/pi) sigma |c|), rho_m and rho_s are multiplied by 4 (sigma halves, epsilon doubles).

Small data: right after the 1-way measurements, if the noisy row count N (inverse-variance
weighted mean of the noisy 1-way sums) is below C d sigma_full (C = SMALL_DATA; sigma_full =
R sqrt(d / (2 rho)), the 1-way noise with all of rho split evenly; a released-values decision),
the rest of rho and the spare (the comparison's share: the model is then the independent
baseline, there is nothing to compare) re-measure every 1-way marginal, split by
:func:`column_shares`, and the model has no 2-way marginal: at that size a 2-way measurement's
noise exceeds the dependence it could capture, and the 1-way marginals' own noise dominates the
2-way error. C = 4 was set on a generated tuning table, neither PUMS nor census
(``bench/small_data.py``, docs/releases.md): the 1-way-only release won up to N / (d sigma_full)
= 3.1 there, AIM from 5 on.

T = 4 d here (the paper: 16 d, for 3-way workloads; "AIM can take many hours"): each round refits
Private-PGM, which compiles a new JAX program for the new set of cliques (seconds each), so T
bounds the run time; with a workload of pairs, 4 d rounds of measurements are plenty.

Every round's costs are chosen from released values only and the spend never exceeds rho (exact
fractions), so by the Rényi filter of Feldman & Zrnic (2021, Theorem 3.1; for zCDP, every order
alpha at once) the whole run is rho-zCDP, as AIM's own analysis states. The ledger is charged rho
before the counting query, exactly as for MST.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np

from dpsql.dp.accounting import Cost
from dpsql.dp.mechanisms import Gaussian
from dpsql.release import pgm
from dpsql.release.compress import Compression, compress_cells
from dpsql.release.marginals import (
    SCORE_GRID,
    Synthesis,
    SynthesisPlan,
    exponential_mechanism,
    l1_score,
    marginal,
    measure,
)
from dpsql.release.measurement import Measurement
from dpsql.release.mst import compress_one_way, selection_epsilon

Clique = tuple[int, ...]
_BIAS = math.sqrt(2 / math.pi)  # E|Z| / sigma for a Gaussian Z
SMALL_DATA = 4  # C of the small-data rule: set on tuning data by bench/small_data.py


@dataclass(frozen=True)
class AimPlan(SynthesisPlan):
    """AIM's parameters (fixed before any data is read)."""

    rounds: int  # T: the nominal number of rounds (4 d; 16 d in the paper)
    max_model_mb: float = 80.0
    round_iters: int = 100  # Private-PGM iterations per round (warm-started)
    compress: bool = True
    one_way_share: Fraction = Fraction(1, 2)  # of rho, for the initial 1-way marginals
    spare: Fraction = Fraction(0)  # rho the small-data regime may use too (the comparison's)
    small_rule: float = SMALL_DATA  # 0: never small, inf: always (bench/small_data.py)

    @property
    def cost(self) -> Cost:
        """AIM spends exactly rho (the last round takes what is left); ``spare`` is charged
        by whoever owns it (the comparison), whether AIM uses it or not."""
        return Cost(rho=self.rho)

    @property
    def column_shares(self) -> tuple[Fraction, ...]:
        """Each column's share of a 1-way budget: proportional to n_c^(2/3) (n_c its number of
        values), summing to exactly 1. See :func:`column_shares`."""
        return column_shares(self.shape)

    def one_way(self, budget: Fraction | None = None) -> tuple[Gaussian, ...]:
        """The Gaussians measuring the d 1-way marginals: by default AIM's initial ones, the
        ``one_way_share`` of rho split evenly (as the reference AIM; they only start the model),
        else ``budget`` split by :attr:`column_shares` (the small-data regime, where the 1-way
        marginals are the whole release)."""
        r = Fraction(self.rows_bound)
        if budget is None:
            total = self.rho if self.d == 1 else self.rho * self.one_way_share
            return tuple(Gaussian(r, total / self.d) for _ in self.shape)
        return tuple(Gaussian(r, budget * w) for w in self.column_shares)

    def first_round(self) -> tuple[Fraction, Fraction]:
        """(rho_m, rho_s) of a round before any annealing: 0.9 and 0.1 of (what the 1-way
        marginals left) / T."""
        rest = self.rho * (1 - self.one_way_share) / self.rounds
        return rest * Fraction(9, 10), rest / 10


def column_shares(shape: Sequence[int]) -> tuple[Fraction, ...]:
    """Shares proportional to n_c^(2/3), exact fractions summing to 1.

    Why: a column's noisy 1-way marginal adds about sqrt(2/pi) sigma_c n_c / (2 N) to the total
    variation distance of every pair it is in, and every column is in d - 1 pairs; minimizing
    sum_c n_c sigma_c under the zCDP budget sum_c R² / (2 sigma_c²) = rho (Lagrange) gives
    sigma_c ∝ n_c^(-1/3), i.e. rho_c ∝ n_c^(2/3). Domain sizes are public: no data is read.

    >>> [str(w) for w in column_shares((8, 8))], sum(column_shares((2, 16, 9))) == 1
    (['1/2', '1/2'], True)
    """
    raw = [Fraction(float(n) ** (2 / 3)).limit_denominator(1000) for n in shape]
    total = sum(raw, Fraction(0))
    return tuple(w / total for w in raw)


def plan_aim(
    names: Sequence[str],
    shape: Sequence[int],
    rho: Fraction,
    rows_bound: int,
    *,
    max_model_mb: float = 80.0,
    round_iters: int = 100,
    compress: bool = True,
    one_way_share: Fraction = Fraction(1, 2),
    spare: Fraction = Fraction(0),
    small_rule: float = SMALL_DATA,
) -> AimPlan:
    d = len(shape)
    return AimPlan(
        tuple(names), tuple(shape), rho, rows_bound, 4 * d, max_model_mb, round_iters, compress,
        one_way_share, spare, small_rule,
    )  # fmt: skip


def workload_weights(d: int) -> dict[Clique, int]:
    """AIM's candidate weights for the workload of all pairs: 1-way d-1, 2-way 2(d-1).

    >>> workload_weights(3)
    {(0,): 2, (1,): 2, (2,): 2, (0, 1): 4, (0, 2): 4, (1, 2): 4}
    """
    pairs = list(combinations(range(d), 2))
    closure = [(c,) for c in range(d)] + pairs
    return {cl: sum(len(set(cl) & set(p)) for p in pairs) for cl in closure}


def select_marginal(
    candidates: Sequence[Clique],
    answers: Mapping[Clique, np.ndarray],
    estimates: Mapping[Clique, np.ndarray],
    weights: Mapping[Clique, int],
    sigma: float,
    epsilon: Fraction,
    rows_bound: int,
) -> Clique:
    """The exponential mechanism over candidates, score w(c)(||x_c - m_c||_1 - sqrt(2/pi) sigma |c|).

    ``answers`` are the true (bounded) marginals, ``estimates`` the model's (released values
    only). Scores are exact integers on a 1/SCORE_GRID grid; a unit moves x_c by at most R in L1,
    so score c by at most SCORE_GRID R w(c): sensitivity SCORE_GRID R max w.
    """
    scores = []
    for cl in candidates:
        bias = round(SCORE_GRID * _BIAS * sigma * answers[cl].size)
        scores.append(weights[cl] * (l1_score(answers[cl], estimates[cl]) - bias))
    sens = SCORE_GRID * rows_bound * max(weights[cl] for cl in candidates)
    return candidates[exponential_mechanism(scores, epsilon, sens)]


def round_mechanism(plan: AimPlan, rho: Fraction) -> Gaussian:
    """The Gaussian measuring a round's marginal: L2 sensitivity R (a unit keeps <= R rows)."""
    return Gaussian(Fraction(plan.rows_bound), rho)


@dataclass
class RoundBudget:
    """The running spend (exact) and the current per-round split."""

    total: Fraction
    used: Fraction
    measure: Fraction
    select: Fraction

    def next_round(self) -> bool:
        """Charge one round; True when it is the last (it takes what is left)."""
        last = self.total - self.used < 2 * (self.measure + self.select)
        if last:
            left = self.total - self.used
            self.measure, self.select = left * Fraction(9, 10), left / 10
        self.used += self.measure + self.select
        return last


def run_aim(
    plan: AimPlan,
    idx: np.ndarray,
    n: np.ndarray,
    on_round: Callable[[int, Clique], None] | None = None,
) -> Synthesis:
    """AIM's measurements and its last model: the only step that reads the (bounded) data."""
    gs = plan.one_way()
    one = tuple(measure(g, marginal(idx, n, plan.shape, (c,)), (c,)) for c, g in enumerate(gs))
    if plan.d > 1 and small_data(plan, one):
        return _one_way_only(plan, idx, n, one)
    comp, cone = compress_one_way(plan.compress, one)
    cshape = comp.shape
    ms: list[Measurement] = list(cone)
    model = pgm.fit(plan.names, cshape, ms, iters=plan.round_iters)
    if plan.d == 1:
        return Synthesis(plan.names, plan.shape, one, comp, tuple(ms), (), model, gs[0].rho)
    cidx, cn = compress_cells(comp, idx, n)
    weights = workload_weights(plan.d)
    answers = {cl: marginal(cidx, cn, cshape, cl).reshape(-1) for cl in weights}
    budget = RoundBudget(plan.rho, sum((g.rho for g in gs), Fraction(0)), *plan.first_round())
    measured: list[Clique] = [(c,) for c in range(plan.d)]
    selected: list[Clique] = []
    last = False
    while not last:
        last = budget.next_round()
        g = round_mechanism(plan, budget.measure)
        limit = plan.max_model_mb * float(budget.used / plan.rho)
        cands = _eligible(plan, cshape, weights, measured, limit)
        proj = pgm.Projector(model, plan.names, cshape)
        estimates = {cl: proj(cl) for cl in cands}
        cl = select_marginal(
            cands, answers, estimates, weights, g.std, selection_epsilon(budget.select),
            plan.rows_bound,
        )  # fmt: skip
        ms.append(measure(g, answers[cl], cl))
        measured.append(cl)
        selected.append(cl)
        if on_round is not None:
            on_round(len(selected), cl)
        model = pgm.fit(plan.names, cshape, ms, iters=plan.round_iters, warm_start=model)
        after = pgm.Projector(model, plan.names, cshape)(cl)
        moved = float(np.abs(after - estimates[cl]).sum())
        if moved <= g.std * _BIAS * answers[cl].size:
            budget.measure, budget.select = budget.measure * 4, budget.select * 4
    return Synthesis(
        plan.names, plan.shape, one, comp, tuple(ms), tuple(selected), model, budget.used
    )


def small_data(plan: AimPlan, one: Sequence[Measurement]) -> bool:
    """Whether the noisy row count N is under ``small_rule`` d sigma_full, sigma_full =
    R sqrt(d / (2 rho)) the noise of a 1-way marginal measured with all of rho split evenly over
    the columns. N is the inverse-variance weighted mean of the d noisy 1-way sums (each
    unbiased, variance n_c sigma_c²; not clipped, which would bias N upwards by about 0.4 sigma_c
    per empty value): released values only."""
    sums = np.array([float(np.sum(m.noisy)) for m in one])
    var = np.array([m.noisy.size * m.std**2 for m in one])
    n_hat = float(np.sum(sums / var) / np.sum(1 / var))
    sigma_full = plan.rows_bound * math.sqrt(plan.d / (2 * float(plan.rho)))
    return n_hat < plan.small_rule * plan.d * sigma_full


def _one_way_only(
    plan: AimPlan, idx: np.ndarray, n: np.ndarray, one: tuple[Measurement, ...]
) -> Synthesis:
    """The small-data regime: the rest of rho and the spare (the comparison's share, which has
    nothing left to compare: the model is the independent baseline) re-measure every 1-way
    marginal, split by the column shares; no compression, no 2-way marginal; the model is
    Private-PGM's fit of the 1-way marginals (their non-negative least-squares estimate)."""
    rest = plan.rho + plan.spare - sum((m.rho for m in plan.one_way()), Fraction(0))
    gs = plan.one_way(rest)
    again = tuple(measure(g, marginal(idx, n, plan.shape, (c,)), (c,)) for c, g in enumerate(gs))
    comp = Compression.identity(plan.shape)
    ms = one + again
    model = pgm.fit(plan.names, plan.shape, ms, iters=plan.round_iters)
    return Synthesis(
        plan.names, plan.shape, one, comp, ms, (), model, plan.rho + plan.spare, small=True
    )


def _eligible(
    plan: AimPlan,
    cshape: Sequence[int],
    weights: Mapping[Clique, int],
    measured: Sequence[Clique],
    limit_mb: float,
) -> list[Clique]:
    """Candidates already inside a measured clique, or whose model stays under the size limit."""
    covered = {sub for cl in measured for k in range(1, len(cl) + 1) for sub in combinations(cl, k)}
    out = []
    for cl in weights:
        if cl in covered or pgm.model_size_mb(plan.names, cshape, [*measured, cl]) <= limit_mb:
            out.append(cl)
    return out or [cl for cl in weights if cl in covered]

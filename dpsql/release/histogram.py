"""A DP histogram: noisy counts per cell over public axes, post-processed into a valid histogram.

Levels: the cells (always) and optionally the total and each column's 1-way marginal. Each level
is a linear function of the vector x of bounded cell counts (:mod:`dpsql.release.source`); a unit
changes x by dx with at most G non-zero entries, each at most R in absolute value. Hence:

* cells: ||dx||_1 <= G R and ||dx||_2 <= sqrt(G) R;
* a marginal or the total (sums of cells): L1 and L2 sensitivity at most G R.

Pure epsilon (delta = 0): discrete Laplace per level with a share of epsilon each, epsilon-DP by
sequential composition. delta > 0: discrete Gaussian with a share of rho = epsilon_to_rho(epsilon,
delta) each, rho-zCDP, i.e. (epsilon, delta)-DP. The shares (of the groups total, marginals, cells;
the marginals' share split evenly over the columns) sum to exactly 1 and are chosen before any
data is read by :mod:`dpsql.release.levels` (the split minimizing the error of the owner's target,
from the closed-form error of the consistent estimate), or given. Noise is drawn by
:mod:`dpsql.dp.mechanisms`.
The released histogram is :func:`dpsql.release.consistency.valid_histogram` of the GLS estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpsql.dp.accounting import Cost, epsilon_to_rho, sequential
from dpsql.dp.mechanisms import Gaussian, Laplace, Mechanism
from dpsql.errors import InvalidParameter
from dpsql.release.consistency import Level, estimate, project, valid_histogram
from dpsql.release.levels import GROUPS, TARGETS, Errors, gls_errors, optimize
from dpsql.release.source import Bound
from dpsql.release.spec import Source

LEVELS = ("total", "marginals", "cells")
MAX_CELLS = 2_000_000


@dataclass(frozen=True)
class LevelPlan:
    """One measured level: its name, the axes it keeps, its mechanism."""

    name: str
    axes: tuple[int, ...]
    mechanism: Mechanism


@dataclass(frozen=True)
class HistogramPlan:
    """Everything about a histogram release that is fixed before the data is read."""

    source: Source
    bound: Bound
    epsilon: Fraction
    delta: Fraction
    confidence: float
    levels: tuple[LevelPlan, ...]
    shares: dict[str, Fraction] = field(default_factory=dict)  # of the budget, per level group
    target: str = "even"

    @property
    def errors(self) -> Errors:
        """The predicted errors (std) of the consistent estimate: cell, marginal value, total."""
        return gls_errors(self.source.shape, [(lv.axes, lv.mechanism.std**2) for lv in self.levels])

    @property
    def cost(self) -> Cost:
        return sequential(lv.mechanism.cost for lv in self.levels)

    @property
    def mechanism(self) -> str:
        return self.levels[0].mechanism.name

    @property
    def cells_level(self) -> LevelPlan:
        return next(lv for lv in self.levels if lv.name == "cells")

    def fingerprint(self) -> str:
        axes = ";".join(f"{a.name}:{a.keys or a.edges}" for a in self.source.axes)
        names = ",".join(lv.name for lv in self.levels)
        return f"release histogram {self.source.table} [{axes}] levels={names}"


@dataclass(frozen=True)
class Histogram:
    """A released histogram: integer ``counts`` (shape of the axes) and the raw noisy levels."""

    plan: HistogramPlan
    counts: np.ndarray
    noisy: dict[str, np.ndarray] = field(default_factory=dict)


def _sqrt_up(n: int, bits: int = 20) -> Fraction:
    """A rational upper bound on sqrt(n), within 2**-bits."""
    return Fraction(math.isqrt(n * 4**bits - 1) + 1, 2**bits) if n > 0 else Fraction(0)


def parse_levels(text: str, ncols: int) -> tuple[str, ...]:
    """``"total,marginals,cells"`` -> the levels, checked; the cells are always included."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in LEVELS]
    if bad:
        raise InvalidParameter(
            f"unknown level(s) {', '.join(bad)}", hint="use some of: total, marginals, cells"
        )
    out = [n for n in LEVELS if n in names or n == "cells"]
    if "marginals" in out and ncols < 2:
        out.remove("marginals")
    return tuple(out)


def parse_weights(text: str) -> dict[str, Fraction]:
    """``"total=1,marginals=1,cells=8"`` -> shares summing to 1 ({"total": 1/10, ...}).

    >>> parse_weights("cells=3,total=1")
    {'cells': Fraction(3, 4), 'total': Fraction(1, 4)}
    """
    out: dict[str, Fraction] = {}
    hint = "write --weights total=1,marginals=1,cells=8 (positive numbers, relative)"
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, eq, value = part.partition("=")
        name = name.strip().lower()
        if not eq or name not in GROUPS:
            raise InvalidParameter(f"bad --weights item {part!r}", hint=hint)
        try:
            w = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise InvalidParameter(
                f"bad --weights item {part!r}: not a number", hint=hint
            ) from None
        if w <= 0:
            raise InvalidParameter(f"--weights must be positive in {part!r}", hint=hint)
        out[name] = w
    total = sum(out.values(), Fraction(0))
    return {k: v / total for k, v in out.items()}


def plan_histogram(
    src: Source,
    bound: Bound,
    epsilon: Fraction,
    delta: Fraction = Fraction(0),
    levels: Sequence[str] = ("cells",),
    confidence: float = 0.95,
    target: str = "balanced",
    weights: dict[str, Fraction] | None = None,
) -> HistogramPlan:
    """Split the budget over the levels and calibrate each level's noise to its sensitivity.

    ``weights`` (shares per group summing to 1) when given, else the split that minimizes
    ``target``'s error (:mod:`dpsql.release.levels`; "even": equal shares per level group).
    """
    if target not in TARGETS:
        raise InvalidParameter(
            f"unknown --optimize-for {target!r}", hint="use one of: " + ", ".join(TARGETS)
        )
    if src.cells > MAX_CELLS:
        raise InvalidParameter(
            f"the histogram would have {src.cells:,} cells (at most {MAX_CELLS:,})",
            hint="use fewer columns or coarser --bins",
        )
    k = len(src.axes)
    chosen: list[tuple[str, tuple[int, ...]]] = []
    if "total" in levels:
        chosen.append(("total", ()))
    if "marginals" in levels:
        chosen += [(f"marginal:{a.name}", (i,)) for i, a in enumerate(src.axes)]
    chosen.append(("cells", tuple(range(k))))
    groups = [g for g in GROUPS if any(_group(name) == g for name, _ in chosen)]
    if weights is not None:
        if set(weights) != set(groups):
            raise InvalidParameter(
                f"--weights must name exactly the measured levels: {', '.join(groups)}",
                hint="e.g. --weights " + ",".join(f"{g}=1" for g in groups),
            )
        shares = dict(weights)
    else:
        unit = _levels(src, bound, epsilon, delta, chosen, dict.fromkeys(groups, Fraction(1)))
        power = 2 if delta == 0 else 1  # Laplace variance ~ 1/share², Gaussian ~ 1/share
        base = [(lv.axes, _group(lv.name), lv.mechanism.std**2) for lv in unit.levels]

        def errors_for(sh: dict[str, Fraction]) -> Errors:
            return gls_errors(src.shape, [(a, v / float(sh[g]) ** power) for a, g, v in base])

        counts = {g: sum(1 for name, _ in chosen if _group(name) == g) for g in groups}
        shares = optimize(counts, errors_for, target)
    plan = _levels(src, bound, epsilon, delta, chosen, shares)
    return HistogramPlan(
        src, bound, epsilon, delta, confidence, plan.levels, shares,
        "given" if weights is not None else target,
    )  # fmt: skip


def _group(level_name: str) -> str:
    return "marginals" if level_name.startswith("marginal:") else level_name


def _levels(
    src: Source,
    bound: Bound,
    epsilon: Fraction,
    delta: Fraction,
    chosen: Sequence[tuple[str, tuple[int, ...]]],
    shares: dict[str, Fraction],
) -> HistogramPlan:
    """The plan for given shares (confidence and target filled in by the caller)."""
    k = len(src.axes)
    gr = Fraction(bound.cells * bound.rows)
    per_group = {g: sum(1 for name, _ in chosen if _group(name) == g) for g in shares}
    plans = []
    for name, axes in chosen:
        share = shares[_group(name)] / per_group[_group(name)]
        if delta == 0:
            mech: Mechanism = Laplace(sensitivity=gr, epsilon=epsilon * share)
        else:
            l2 = _sqrt_up(bound.cells) * bound.rows if axes == tuple(range(k)) else gr
            mech = Gaussian(sensitivity=l2, rho=epsilon_to_rho(epsilon, delta) * share)
        plans.append(LevelPlan(name, axes, mech))
    return HistogramPlan(src, bound, epsilon, delta, 0.95, tuple(plans), dict(shares))


def measure(plan: HistogramPlan, true_counts: np.ndarray) -> dict[str, np.ndarray]:
    """Noisy values of every level (the only step that touches the bounded counts)."""
    out: dict[str, np.ndarray] = {}
    for lv in plan.levels:
        exact = np.asarray(project(true_counts, lv.axes), dtype=np.float64)
        out[lv.name] = np.asarray(lv.mechanism.release(np.atleast_1d(exact))).reshape(exact.shape)
    return out


def postprocess(plan: HistogramPlan, noisy: dict[str, np.ndarray]) -> np.ndarray:
    """The valid histogram (non-negative integers, consistent levels) from the noisy levels."""
    levels = [
        Level(lv.axes, noisy[lv.name], max(lv.mechanism.std, 1e-12) ** 2) for lv in plan.levels
    ]
    return valid_histogram(estimate(plan.source.shape, levels))


def release_histogram(plan: HistogramPlan, true_counts: np.ndarray) -> Histogram:
    """Measure then post-process. ``true_counts`` must be the bounded counts of ``plan.bound``."""
    if true_counts.shape != plan.source.shape:
        raise ValueError("counts do not match the plan's axes")
    noisy = measure(plan, true_counts)
    return Histogram(plan, postprocess(plan, noisy), noisy)

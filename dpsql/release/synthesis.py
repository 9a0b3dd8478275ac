"""The synthetic-data pipeline as stages over frozen values: plan, measure, fit, compare, sample.

``make_plan`` fixes the budget split before any data is read (the synthesizer's share and the
comparison's, :mod:`dpsql.release.compare`); ``run_plan`` and ``compare_result`` are the only
stages that read the bounded cells; ``fit_result`` and ``sample_result`` are post-processing.
:mod:`dpsql.release.synthetic` runs them as the ``dpsql release synthetic`` job.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.dp.accounting import Cost
from dpsql.dp.mechanisms import Gaussian
from dpsql.release import pgm
from dpsql.release.aim import AimPlan, plan_aim, run_aim
from dpsql.release.compare import (
    DEFAULT_SHARE,
    Comparison,
    compare,
    comparison_mechanism,
    rounded_rows,
)
from dpsql.release.compress import compress_cells, expand_rows
from dpsql.release.marginals import Synthesis
from dpsql.release.mst import MstPlan, plan_mst, run_mst

SYNTHESIZERS = ("aim", "mst")
Plan = AimPlan | MstPlan


@dataclass(frozen=True)
class SyntheticPlan:
    """The synthesizer's plan and the comparison's mechanism (None: no comparison)."""

    model: Plan
    compare: Gaussian | None

    @property
    def cost(self) -> Cost:
        c = self.model.cost
        return c if self.compare is None else c + self.compare.cost

    @property
    def synthesizer(self) -> str:
        return "mst" if isinstance(self.model, MstPlan) else "aim"


def make_plan(
    synthesizer: str,
    names: list[str],
    shape: tuple[int, ...],
    rho: Fraction,
    rows_bound: int,
    compress: bool = True,
    compare_share: Fraction = DEFAULT_SHARE,
) -> SyntheticPlan:
    """``compare_share`` of rho for the comparison with the baseline (none with one column or a
    zero share), the rest for the synthesizer."""
    d = len(names)
    use = d > 1 and compare_share > 0
    cmp = comparison_mechanism(rho * compare_share, rows_bound, d) if use else None
    rest = rho if cmp is None else rho - cmp.rho
    if synthesizer == "mst":
        return SyntheticPlan(plan_mst(names, shape, rest, rows_bound, compress=compress), cmp)
    spare = Fraction(0) if cmp is None else cmp.rho  # AIM's small-data regime uses it instead
    return SyntheticPlan(
        plan_aim(names, shape, rest, rows_bound, compress=compress, spare=spare), cmp
    )


def run_plan(plan: SyntheticPlan, idx: np.ndarray, n: np.ndarray) -> Synthesis:
    """Measure (reads the bounded cells)."""
    if isinstance(plan.model, MstPlan):
        return run_mst(plan.model, idx, n)
    return run_aim(plan.model, idx, n)


def fit_result(result: Synthesis, iters: int) -> Any:
    """Private-PGM on the compressed domain, warm-started from AIM's last model (post-processing)."""
    return pgm.fit(result.names, result.compression.shape, result.measurements, iters, result.model)


def compare_result(
    plan: SyntheticPlan, result: Synthesis, model: Any, idx: np.ndarray, n: np.ndarray
) -> Comparison | None:
    """The DP comparison of the fitted model with the baseline (reads the bounded cells).

    None when there is nothing to compare: no comparison planned, or AIM's small-data regime,
    whose model is the independent baseline and which spent the comparison's share on it."""
    if plan.compare is None or result.small:
        return None
    shape = result.compression.shape
    cidx, cn = compress_cells(result.compression, idx, n)
    return compare(plan.compare, shape, cidx, cn, pgm.Projector(model, result.names, shape))


def sample_result(
    result: Synthesis, model: Any, rows: int | None, baseline: bool = False
) -> np.ndarray:
    """Rows over the original domain: sampled from the model (or, ``baseline``, from its 1-way
    marginals independently, each column rounded as mbi rounds), merged values expanded.
    Post-processing."""
    if not baseline:
        return expand_rows(result.compression, pgm.sample_rows(result.names, model, rows))
    proj = pgm.Projector(model, result.names, result.compression.shape)
    count = max(1, int(round(float(rows if rows is not None else model.total))))
    one = [proj((c,)) for c in range(len(result.names))]
    return expand_rows(result.compression, rounded_rows(one, count))

"""Level weights of multi-level histograms: the closed-form error and the chosen splits."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.policy.tables import PrivateTable
from dpsql.release.consistency import Level, estimate, project
from dpsql.release.histogram import measure, parse_weights, plan_histogram
from dpsql.release.levels import gls_errors
from dpsql.release.source import Bound
from dpsql.release.spec import Axis, Source

ALPHA = 1e-6
LEVELS = ("total", "marginals", "cells")


def _source(sizes: list[int]) -> Source:
    private = PrivateTable(
        privacy_unit="u", max_rows_per_unit=1, max_groups_per_unit=1,
        columns={"u": {"type": "integer", "identifier": True}},  # type: ignore[dict-item]
    )  # fmt: skip
    axes = tuple(Axis(f"c{i}", "text", keys=tuple(map(str, range(n)))) for i, n in enumerate(sizes))
    return Source("public.t", private, axes)


def test_formula_matches_the_dense_gls_covariance() -> None:
    """The closed form equals (sum A^T A / v)^-1 computed densely, for every level mix."""
    shape = (3, 4, 2)
    n = math.prod(shape)
    eye = np.eye(n).reshape((n, *shape))
    for kept in [
        [(0, 1, 2)],
        [(), (0, 1, 2)],
        [(), (0,), (1,), (2,), (0, 1, 2)],
        [(1,), (0, 1, 2)],
    ]:
        var = {axes: 1.0 + i for i, axes in enumerate(kept)}
        normal = sum(
            (lambda a: a.T @ a)(np.stack([project(e, axes).reshape(-1) for e in eye], 1)) / v
            for axes, v in var.items()
        )
        cov = np.linalg.inv(normal)
        got = gls_errors(shape, list(var.items()))
        assert got.cells**2 == pytest.approx(np.trace(cov) / n)
        assert got.total**2 == pytest.approx(cov.sum())
        margs = []
        for a in range(3):
            m = np.stack([project(e, (a,)).reshape(-1) for e in eye], 1)
            margs.append(np.trace(m @ cov @ m.T) / shape[a])
        assert got.marginals**2 == pytest.approx(np.mean(margs))


def test_formula_matches_simulation_and_rejects_a_wrong_one() -> None:
    """Property: the mean squared cell error of the GLS estimate is the formula's. 2,000 releases
    of a 4 x 3 table with all levels (Laplace noise): the mean of the per-release mean squared
    error is within a z of 5.3 of the formula (false failure < 1e-7 by the CLT; the squared errors
    have finite variance). Twin: the formula that ignores the total and marginals (cells only:
    the measurement's own variance) is far outside."""
    src = _source([4, 3])
    plan = plan_histogram(src, Bound.for_source(src, "per_cell"), Fraction(1), levels=LEVELS,
                          target="even")  # fmt: skip
    true = np.arange(12, dtype=float).reshape(4, 3) * 10
    errs = []
    for _ in range(2000):
        noisy = measure(plan, true)
        lv = [Level(p.axes, noisy[p.name], p.mechanism.std**2) for p in plan.levels]
        errs.append(float(((estimate(src.shape, lv) - true) ** 2).mean()))
    e = np.array(errs)
    z = abs(e.mean() - plan.errors.cells**2) / (e.std(ddof=1) / math.sqrt(e.size))
    assert z < stats.norm.isf(ALPHA / 20), z
    wrong = plan.levels[-1].mechanism.std ** 2
    assert abs(e.mean() - wrong) / (e.std(ddof=1) / math.sqrt(e.size)) > 10


def test_splits_follow_the_target_and_cost_the_whole_budget() -> None:
    src = _source([10, 16])
    bound = Bound.for_source(src, "per_cell")
    plans = {t: plan_histogram(src, bound, Fraction(1), levels=LEVELS, target=t)
             for t in ("even", "cells", "marginals", "total", "balanced")}  # fmt: skip
    for p in plans.values():
        assert p.cost.epsilon == 1  # the shares sum to exactly 1
        assert sum(p.shares.values()) == 1
    even = plans["even"].errors
    assert plans["cells"].errors.cells < even.cells / 2  # the 4x (std) mostly recovered
    assert plans["total"].errors.total < even.total
    assert plans["marginals"].errors.marginals <= even.marginals
    b = plans["balanced"].errors
    # balanced: no level more than its even-split error, and cells much better than even
    assert b.cells < even.cells and b.total <= even.total * 1.01
    delta = Fraction(1, 10**6)
    g = plan_histogram(src, bound, Fraction(1), delta, LEVELS, target="cells")
    g_even = plan_histogram(src, bound, Fraction(1), delta, LEVELS, target="even")
    assert g.cost.rho == g_even.cost.rho > 0 and g.errors.cells < g_even.errors.cells / 1.5


def test_explicit_weights() -> None:
    src = _source([3, 3])
    bound = Bound.for_source(src, "per_cell")
    w = parse_weights("total=1,marginals=1,cells=8")
    assert w == {"total": Fraction(1, 10), "marginals": Fraction(1, 10), "cells": Fraction(4, 5)}
    p = plan_histogram(src, bound, Fraction(2), levels=LEVELS, weights=w)
    eps = {lv.name: lv.mechanism.epsilon for lv in p.levels}  # type: ignore[union-attr]
    assert eps == {"total": Fraction(1, 5), "marginal:c0": Fraction(1, 10),
                   "marginal:c1": Fraction(1, 10), "cells": Fraction(8, 5)}  # fmt: skip
    assert p.target == "given"
    with pytest.raises(Exception, match="exactly the measured levels"):
        plan_histogram(src, bound, Fraction(1), levels=LEVELS, weights={"cells": Fraction(1)})
    for bad in ("cells=0", "cubes=1", "cells=x"):
        with pytest.raises(Exception, match="weights"):
            parse_weights(bad)

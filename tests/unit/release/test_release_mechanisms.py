"""Release planning and mechanisms: sensitivities, costs, the exponential mechanism (no database)."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.dp.accounting import epsilon_to_rho
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.policy.tables import PrivateTable
from dpsql.release.histogram import parse_levels, plan_histogram
from dpsql.release.marginals import exponential_mechanism, marginal
from dpsql.release.mst import plan_mst, run_mst
from dpsql.release.quality import quality_report, tvd
from dpsql.release.source import Bound
from dpsql.release.spec import Axis, Source

ALPHA = 1e-6


def _source(sizes: list[int]) -> Source:
    private = PrivateTable(
        privacy_unit="u", max_rows_per_unit=4, max_groups_per_unit=9,
        columns={"u": {"type": "integer", "identifier": True}},  # type: ignore[dict-item]
    )  # fmt: skip
    axes = tuple(Axis(f"c{i}", "text", keys=tuple(map(str, range(n)))) for i, n in enumerate(sizes))
    return Source("public.t", private, axes)


def test_histogram_laplace_split_and_sensitivity() -> None:
    src = _source([3, 5])
    bound = Bound.for_source(src, "per_cell")
    assert (bound.rows, bound.cells) == (4, 9)
    plan = plan_histogram(src, bound, Fraction(1), levels=("total", "marginals", "cells"))
    assert [lv.name for lv in plan.levels] == ["total", "marginal:c0", "marginal:c1", "cells"]
    assert all(isinstance(lv.mechanism, Laplace) for lv in plan.levels)
    assert all(lv.mechanism.sensitivity == 36 for lv in plan.levels)  # G R
    assert plan.cost.epsilon == 1 and plan.cost.rho == 0


def test_histogram_gaussian_sensitivity_and_cost() -> None:
    src = _source([2, 2])  # 4 cells < G = 9: a unit touches at most 4 cells
    bound = Bound.for_source(src, "per_cell")
    assert bound.cells == 4
    plan = plan_histogram(src, bound, Fraction(1), Fraction(1, 10**6), ("total", "cells"))
    total, cells = (lv.mechanism for lv in plan.levels)
    assert isinstance(cells, Gaussian) and isinstance(total, Gaussian)
    assert cells.sensitivity >= 2 * 4 and cells.sensitivity - 8 < Fraction(1, 2**18)  # sqrt(G) R
    assert total.sensitivity == 16  # G R
    assert plan.cost.rho == epsilon_to_rho(Fraction(1), Fraction(1, 10**6))


def test_levels_parsing() -> None:
    assert parse_levels("cells", 2) == ("cells",)
    assert parse_levels("marginals,total", 2) == ("total", "marginals", "cells")
    assert parse_levels("marginals", 1) == ("cells",)
    with pytest.raises(Exception, match="unknown level"):
        parse_levels("cubes", 2)


@pytest.mark.parametrize("d", [1, 2, 6])
def test_mst_cost_within_rho(d: int) -> None:
    rho = epsilon_to_rho(Fraction(1), Fraction(1, 10**6))
    plan = plan_mst([f"c{i}" for i in range(d)], [4] * d, rho, 3)
    assert plan.cost.rho <= rho
    assert plan.cost.rho >= rho * Fraction(999, 1000)
    assert plan.one_way.sensitivity == 3


def _em_pvalue(samples: list[int], scores: list[int], eps: Fraction, sens: int) -> float:
    w = np.exp(float(eps) * np.array(scores) / (2 * sens))
    exp = w / w.sum() * len(samples)
    c = Counter(samples)
    obs = np.array([c.get(i, 0) for i in range(len(scores))])
    return float(stats.chisquare(obs, exp).pvalue)


def test_exponential_mechanism_distribution() -> None:
    """Property: P(i) ∝ exp(eps s_i / (2 Δ)). Chi-square over 4,000 draws (false failure 1e-6);
    a mechanism with twice the epsilon (a broken calibration) is rejected."""
    scores, eps = [0, 2, 4, 6], Fraction(1)
    good = [exponential_mechanism(scores, eps, 1) for _ in range(4000)]
    assert _em_pvalue(good, scores, eps, 1) > ALPHA
    broken = [exponential_mechanism(scores, 2 * eps, 1) for _ in range(4000)]
    assert _em_pvalue(broken, scores, eps, 1) < ALPHA


def test_mst_selects_the_dependent_pairs_and_quality_report() -> None:
    gen = np.random.default_rng(3)  # not noise: test data
    n = 50_000
    a = gen.integers(0, 6, n)
    b = (a + gen.integers(0, 2, n)) % 6  # depends on a
    c = gen.integers(0, 4, n)
    d = (c * 2 + gen.integers(0, 2, n)) % 8  # depends on c
    idx, cnt = np.unique(np.stack([a, b, c, d], axis=1), axis=0, return_counts=True)
    plan = plan_mst(["a", "b", "c", "d"], [6, 6, 4, 8], Fraction(5), 1)
    res = run_mst(plan, idx, cnt)
    assert {(0, 1), (2, 3)} <= set(res.selected)
    assert len(res.measurements) == 4 + 3
    assert res.compression.shape == plan.shape  # no rare values at this size
    # quality: the real data against itself is perfect, the independent baseline is not
    rows = np.repeat(idx, cnt, axis=0)
    q = quality_report(plan.names, plan.shape, idx, cnt, rows, [m.noisy for m in res.one_way])
    assert q.summary()["mean_2way_tvd_synthetic"] == pytest.approx(0.0, abs=1e-12)
    assert q.two_way["a,b"][1] > 0.3
    assert marginal(idx, cnt, plan.shape, (0,)).sum() == n
    assert tvd(np.array([1, 0]), np.array([0, 1])) == 1.0

"""Post-processing into a valid histogram: projection, rounding, GLS consistency (no database)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dpsql.release.consistency import (
    Level,
    estimate,
    project,
    round_preserving_sum,
    simplex_projection,
    valid_histogram,
)

finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(1, 40), elements=finite), st.floats(0, 1e6))
def test_simplex_projection_is_the_projection(v: np.ndarray, total: float) -> None:
    z = simplex_projection(v, total)
    assert (z >= 0).all()
    assert abs(z.sum() - total) <= 1e-6 * max(1.0, total)
    if total > 0 and (z > 1e-9 * max(1.0, total)).any():
        # KKT: z = max(v - theta, 0) for one theta; positive entries share v - z
        pos = z > 1e-9 * max(1.0, total)
        theta = (v - z)[pos]
        assert np.ptp(theta) <= 1e-6 * max(1.0, np.abs(v).max(), total)
        assert (v[~pos] <= theta.mean() + 1e-6 * max(1.0, np.abs(v).max(), total)).all()


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(1, 40), elements=st.floats(0, 1e5)))
def test_rounding_keeps_the_sum_and_moves_each_cell_less_than_one(v: np.ndarray) -> None:
    total = int(round(v.sum()))
    r = round_preserving_sum(v, total)
    assert r.sum() == total and (r >= 0).all()
    assert (np.abs(r - v) < 1 + 1e-9).all()


def test_valid_histogram_of_a_negative_total_is_empty() -> None:
    assert valid_histogram(np.array([-5.0, 2.0, -1.0])).tolist() == [0, 0, 0]


def test_exact_consistent_levels_give_back_the_cells() -> None:
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    levels = [
        Level((), project(x, ()), 4.0),
        Level((0,), project(x, (0,)), 2.0),
        Level((1, 2), project(x, (1, 2)), 3.0),
        Level((0, 1, 2), x, 1.0),
    ]
    assert np.allclose(estimate(x.shape, levels), x)


def test_gls_reduces_the_cells_variance() -> None:
    """With exact marginals and noisy cells, GLS moves cells toward the truth (a sanity check)."""
    gen = np.random.default_rng(7)  # not noise: test data
    x = gen.poisson(50, (8, 6)).astype(np.float64)
    raw, fused = [], []
    for _ in range(200):
        y = x + gen.normal(0, 5, x.shape)
        m0 = project(x, (0,)) + gen.normal(0, 5, 8)
        m1 = project(x, (1,)) + gen.normal(0, 5, 6)
        est = estimate(
            x.shape, [Level((0,), m0, 25.0), Level((1,), m1, 25.0), Level((0, 1), y, 25.0)]
        )
        raw.append(((y - x) ** 2).sum())
        fused.append(((est - x) ** 2).sum())
    assert np.mean(fused) < np.mean(raw)

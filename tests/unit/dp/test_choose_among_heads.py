"""Permute-and-flip's last step (dpsql.dp.quantiles.choose_among_heads: a uniform heads of each
row) picks, for the same uniform draws, the column the former running-count form picked: the
pick-th heads of the row in column order. Only how the column is found changed (the heads' flat
indices, not a cumulative sum over the whole matrix), so the law is the same, draw for draw."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.dp import quantiles, rng


def _running_count(heads: np.ndarray, pick: np.ndarray) -> np.ndarray:
    rank = np.cumsum(heads, axis=1) - 1
    return np.asarray(np.argmax(heads & (rank == pick[:, None]), axis=1), dtype=np.int64)


def test_the_same_column_for_the_same_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    g = np.random.default_rng(5)  # the matrices only: the draws are rng's
    real = rng.uniform_below
    drawn: list[np.ndarray] = []

    def record(n: np.ndarray) -> np.ndarray:
        drawn.append(real(n))
        return drawn[-1]

    monkeypatch.setattr(quantiles.rng, "uniform_below", record)
    for _ in range(300):
        r, c = int(g.integers(1, 12)), int(g.integers(1, 60))
        heads = g.random((r, c)) < g.random()
        heads[np.arange(r), g.integers(0, c, r)] = True  # every row has a heads
        got = quantiles.choose_among_heads(heads)
        assert (got == _running_count(heads, drawn[-1])).all()
        assert heads[np.arange(r), got].all()


def test_a_row_without_heads_is_refused() -> None:
    with pytest.raises(RuntimeError):
        quantiles.choose_among_heads(np.array([[True, False], [False, False]]))

"""Domain compression: merge each column's rare values into one, judged by a noisy 1-way count.

As the reference MST and AIM do (McKenna, Miklau & Sheldon 2021, ``compress_domain``): a value of
a column is kept when its *noisy* 1-way count is at least ``3 sigma`` (sigma the noise std of that
measurement); the column's other values are merged into one extra value (when there are at least
two of them). The models are then measured and fitted over the compressed domain, where a pair of
a 16-value column with a 9-value one may become 5 x 4 cells instead of 144, each with the same
noise: fewer, larger cells measured at the same budget.

Privacy: the decision reads only the released noisy 1-way marginals, so it is post-processing and
costs nothing (a threshold on the *true* counts would not be; ``tests/dp_audit`` shows the
difference). The 1-way measurement is re-expressed over the compressed domain without new noise:
a merged value's noisy count is the sum of k noisy counts (variance k sigma²), scaled by
1/sqrt(k) so that every coordinate has std sigma (mbi's ``WeightedQuery``).

Synthetic rows are drawn over the compressed domain, then a merged value is replaced by one of
its original values drawn with probability proportional to their clipped noisy counts (uniform
when all are <= 0): post-processing again, drawn from :mod:`dpsql.dp.rng`.

>>> from dpsql.release.measurement import Measurement
>>> c = plan_compression([Measurement((0,), np.array([50.0, 1.0, -2.0, 3.0]), 10.0)])
>>> c.maps[0].tolist(), c.shape
([0, 1, 1, 1], (2,))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.dp import rng
from dpsql.release.measurement import Measurement

THRESHOLD_SIGMAS = 3


@dataclass(frozen=True)
class Compression:
    """Per column: ``maps[c][v]`` is the compressed index of original value v; ``fill[c]`` the
    weights (integers, over original values) used to expand the merged value back."""

    maps: tuple[np.ndarray, ...]
    fill: tuple[np.ndarray, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(m.max()) + 1 for m in self.maps)

    def merged(self, c: int) -> np.ndarray:
        """The original values of column c merged into one (empty when nothing is merged)."""
        m = self.maps[c]
        counts = np.bincount(m)
        return np.flatnonzero(counts[m] > 1)

    @classmethod
    def identity(cls, shape: Sequence[int]) -> Compression:
        return cls(tuple(np.arange(s) for s in shape), tuple(np.zeros(s, np.int64) for s in shape))


def plan_compression(
    one_way: Sequence[Measurement], sigmas: float = THRESHOLD_SIGMAS
) -> Compression:
    """Keep values with noisy count >= sigmas * std; merge the rest (if two or more) into one."""
    maps, fill = [], []
    for m in one_way:
        y = np.asarray(m.noisy, dtype=np.float64)
        keep = y >= sigmas * m.std
        if (~keep).sum() <= 1:
            maps.append(np.arange(y.size))
            fill.append(np.zeros(y.size, np.int64))
            continue
        mapping = np.full(y.size, int(keep.sum()))
        mapping[keep] = np.arange(int(keep.sum()))
        maps.append(mapping)
        w = np.where(keep, 0, np.floor(np.clip(y, 0, None) * 1024)).astype(np.int64)
        if w.sum() == 0:
            w = (~keep).astype(np.int64)
        fill.append(w)
    return Compression(tuple(maps), tuple(fill))


def compress_cells(
    comp: Compression, idx: np.ndarray, n: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The bounded cells over the compressed domain (duplicates summed). Private, like its input."""
    if not len(idx):
        return idx, n
    mapped = np.stack([comp.maps[c][idx[:, c]] for c in range(idx.shape[1])], axis=1)
    uniq, inverse = np.unique(mapped, axis=0, return_inverse=True)
    return uniq, np.bincount(inverse.reshape(-1), weights=n, minlength=len(uniq)).astype(np.int64)


def compress_measurement(comp: Compression, m: Measurement) -> Measurement:
    """A 1-way measurement re-expressed over the compressed domain (no new noise)."""
    (c,) = m.clique
    mapping = comp.maps[c]
    size = int(mapping.max()) + 1
    total = np.bincount(mapping, weights=m.noisy, minlength=size)
    w = 1.0 / np.sqrt(np.bincount(mapping, minlength=size).astype(np.float64))
    weights = None if np.all(w == 1.0) else w
    return Measurement(m.clique, total * w, m.std, weights, m.half_width)


def expand_rows(comp: Compression, rows: np.ndarray) -> np.ndarray:
    """Synthetic rows over the compressed domain -> rows over the original domain."""
    out = np.empty_like(rows, dtype=np.int64)
    for c, mapping in enumerate(comp.maps):
        inverse = np.full(int(mapping.max()) + 1, -1, dtype=np.int64)
        singles = np.bincount(mapping) == 1
        for v, cv in enumerate(mapping):
            if singles[cv]:
                inverse[cv] = v
        col = inverse[rows[:, c]]
        todo = np.flatnonzero(col < 0)
        if todo.size:
            cum = np.cumsum(comp.fill[c])
            draws = rng.uniform_below(int(cum[-1]), size=todo.size)
            col[todo] = np.searchsorted(cum, draws, side="right")
        out[:, c] = col
    return out

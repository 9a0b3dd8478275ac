"""Post-processing noisy counts into one valid histogram (no privacy cost: it reads no data).

1. Consistency (generalized least squares): when several levels of the same cells are measured
   (the total, 1-way marginals, the cells themselves), the cell vector x minimizing
   sum_l ||A_l x - y_l||² / v_l is found by conjugate gradients on the normal equations
   (sum_l A_l^T A_l / v_l) x = sum_l A_l^T y_l / v_l, where A_l sums x over the axes not in level l
   and v_l is the noise variance of level l. This is the best linear unbiased estimate and its
   projections agree by construction (Hay et al. 2010 do the same for a hierarchy).
2. Validity: project x onto {z >= 0, sum z = T} (Euclidean, Duchi et al. 2008) with T the
   estimated total rounded to a non-negative integer, then round to integers with the same sum
   (largest remainders; ties by position, no randomness).

>>> y = np.array([[3.2, -1.0], [0.4, 5.9]])
>>> valid_histogram(estimate(y.shape, [Level((0, 1), y, 1.0)]))
array([[3, 0],
       [0, 5]])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Level:
    """A noisy measurement of x summed onto ``axes`` (() = the total), with noise ``variance``."""

    axes: tuple[int, ...]
    values: np.ndarray
    variance: float


def project(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """x summed over every axis not in ``axes`` (kept in ``axes`` order, which is ascending)."""
    drop = tuple(i for i in range(x.ndim) if i not in axes)
    return x.sum(axis=drop) if drop else x


def _expand(y: np.ndarray, axes: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """A_l^T y: y broadcast back over the summed axes."""
    full = [shape[i] if i in axes else 1 for i in range(len(shape))]
    return np.broadcast_to(np.asarray(y, dtype=np.float64).reshape(full), shape)


def estimate(
    shape: tuple[int, ...], levels: Sequence[Level], *, tol: float = 1e-10, max_iter: int = 500
) -> np.ndarray:
    """The GLS estimate of the cells from the levels (real-valued, may be negative).

    The levels must identify x: include the cells level (all axes).
    """
    full = tuple(range(len(shape)))
    if not any(lv.axes == full for lv in levels):
        raise ValueError("the cells level is needed to estimate every cell")
    if len(levels) == 1:
        return np.asarray(levels[0].values, dtype=np.float64).reshape(shape).copy()

    def normal(x: np.ndarray) -> np.ndarray:
        out = np.zeros(shape)
        for lv in levels:
            out += _expand(project(x, lv.axes), lv.axes, shape) / lv.variance
        return out

    b = np.zeros(shape)
    for lv in levels:
        b += _expand(lv.values, lv.axes, shape) / lv.variance
    cells = next(lv for lv in levels if lv.axes == full)
    x = np.asarray(cells.values, dtype=np.float64).reshape(shape).copy()
    r = b - normal(x)
    p = r.copy()
    rs = float((r * r).sum())
    stop = tol * max(1.0, float((b * b).sum()))
    for _ in range(max_iter):
        if rs <= stop:
            break
        ap = normal(p)
        alpha = rs / float((p * ap).sum())
        x += alpha * p
        r -= alpha * ap
        new = float((r * r).sum())
        p = r + (new / rs) * p
        rs = new
    return x


def simplex_projection(v: np.ndarray, total: float) -> np.ndarray:
    """The Euclidean projection of v onto {z >= 0, sum z = total} (total >= 0).

    >>> simplex_projection(np.array([2.0, -1.0, 0.5]), 2.0)
    array([1.75, 0.  , 0.25])
    """
    flat = np.asarray(v, dtype=np.float64).reshape(-1)
    if total <= 0 or flat.size == 0:
        return np.zeros_like(v, dtype=np.float64)
    u = np.sort(flat)[::-1]
    css = np.cumsum(u) - total
    ks = np.arange(1, flat.size + 1)
    hits = np.flatnonzero(u - css / ks > 0)
    rho = int(hits[-1]) if hits.size else 0  # empty only through float underflow of a tiny total
    theta = float(css[rho]) / (rho + 1)
    out: np.ndarray = np.maximum(flat - theta, 0.0).reshape(np.shape(v))
    return out


def round_preserving_sum(v: np.ndarray, total: int) -> np.ndarray:
    """Non-negative integers summing to ``total``: floors plus one for the largest remainders."""
    flat = np.asarray(v, dtype=np.float64).reshape(-1)
    base = np.floor(flat).astype(np.int64)
    extra = int(total - base.sum())
    if extra > 0:
        order = np.argsort(-(flat - base), kind="stable")
        base[order[:extra]] += 1
    elif extra < 0:  # only from float error: take from the smallest remainders among positives
        order = np.argsort(flat - base, kind="stable")
        for i in order:
            if extra == 0:
                break
            if base[i] > 0:
                base[i] -= 1
                extra += 1
    return base.reshape(np.shape(v))


def valid_histogram(x: np.ndarray) -> np.ndarray:
    """Non-negative integer counts nearest to x with total round(sum x) (at least 0)."""
    total = max(0, int(round(float(np.sum(x)))))
    return round_preserving_sum(simplex_projection(x, float(total)), total)

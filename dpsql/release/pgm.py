"""Private-PGM (``mbi`` 2.x, McKenna et al. 2019): a graphical model fitted to noisy marginals.

Everything here is post-processing: it reads only noisy measurements (never the data) and samples
rows from the fitted model. This is the only release module that imports mbi/jax (lazily), so
histograms and the hierarchy work without them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsql.release.measurement import Measurement


def mbi_module() -> Any:
    """mbi with jax in float64 and no persistent compilation cache (as mbi recommends)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import mbi
    return mbi


def linear_measurements(names: Sequence[str], ms: Sequence[Measurement]) -> list[Any]:
    mbi = mbi_module()
    out = []
    for m in ms:
        clique = tuple(names[c] for c in m.clique)
        if m.weights is None:
            out.append(mbi.LinearMeasurement(m.noisy, clique, stddev=m.std))
        else:
            query = mbi.WeightedQuery(np.asarray(m.weights, dtype=np.float64))
            out.append(mbi.LinearMeasurement(m.noisy, clique, stddev=m.std, query=query))
    return out


def fit(
    names: Sequence[str],
    shape: Sequence[int],
    ms: Sequence[Measurement],
    iters: int = 1000,
    warm_start: Any = None,
) -> Any:
    """Private-PGM's estimate of a graphical model from the noisy marginals (post-processing).

    The total is the minimum-variance unbiased one of the unweighted measurements' sums.
    """
    mbi = mbi_module()
    domain = mbi.Domain(list(names), [int(s) for s in shape])
    lms = linear_measurements(names, ms)
    total = mbi.estimation.minimum_variance_unbiased_total(lms)
    return mbi.estimation.MirrorDescent().estimate(
        domain, lms, known_total=total, iters=iters, warm_start=warm_start
    )


MAX_DENSE_CELLS = 4_000_000


class Projector:
    """The model's marginals (counts scaled to its total, flattened), computed in numpy from the
    dense joint distribution exp(sum of the potentials) when the domain has at most
    ``MAX_DENSE_CELLS`` cells (no JAX compilation per query), else by mbi's variable elimination.
    """

    def __init__(self, model: Any, names: Sequence[str], shape: Sequence[int]) -> None:
        self.model, self.names = model, tuple(names)
        self.joint: np.ndarray | None = None
        if math.prod(shape) <= MAX_DENSE_CELLS:
            logp = np.zeros(tuple(shape))
            for factor in model.potentials.tables.values():
                axes = [self.names.index(a) for a in factor.domain.attributes]
                vals = np.asarray(factor.values, dtype=np.float64)
                order = np.argsort(axes)
                vals = np.transpose(vals, order)
                full = [1] * len(shape)
                for a in axes:
                    full[a] = shape[a]
                logp = logp + vals.reshape(full)
            p = np.exp(logp - logp.max())
            self.joint = p * (float(model.total) / p.sum())

    def __call__(self, clique: Sequence[int]) -> np.ndarray:
        if self.joint is not None:
            drop = tuple(i for i in range(self.joint.ndim) if i not in clique)
            return np.asarray(self.joint.sum(axis=drop), dtype=np.float64).reshape(-1)
        f = self.model.project(tuple(self.names[c] for c in clique))
        return np.asarray(f.datavector(), dtype=np.float64)


def model_size_mb(names: Sequence[str], shape: Sequence[int], cliques: Sequence[Any]) -> float:
    """The size of the junction tree a model over ``cliques`` would need (megabytes, mbi's measure)."""
    mbi = mbi_module()
    domain = mbi.Domain(list(names), [int(s) for s in shape])
    named = [tuple(names[c] for c in cl) for cl in cliques]
    return float(mbi.junction_tree.hypothetical_model_size(domain, named))


def sample_rows(names: Sequence[str], model: Any, rows: int | None = None) -> np.ndarray:
    """Synthetic rows (indices, shape (N, d)) drawn from the model (post-processing).

    N defaults to the model's estimated total (from the noisy marginals). mbi's randomized
    rounding draws from numpy's global generator: this is not privacy noise.
    """
    n = max(1, int(round(float(rows if rows is not None else model.total))))
    data = model.synthetic_data(rows=n).to_dict()
    return np.stack([np.asarray(data[name], dtype=np.int64) for name in names], axis=1)

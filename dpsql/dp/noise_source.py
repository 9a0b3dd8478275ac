"""The noise source: every random choice of the engine's releases is drawn through a NoiseSource.

The engine holds one (``Engine(noise=...)``, default :data:`CSPRNG`) and its stages
(:mod:`dpsql.execute.noise`, :mod:`dpsql.execute.bias`, :mod:`dpsql.execute.auto_bounds`) draw
through it unconditionally: there is no switch in the mechanisms or the stages. The product's
only implementation is :class:`CsprngNoise`, which calls the mechanisms' own samplers (exact
draws from :mod:`dpsql.dp.rng`, the CSPRNG-fed module). Tests inject another implementation
where they build an engine (a zero-noise one, ``tests/helpers.py``'s ``EXACT``: the exact,
un-noised answer, every group with a unit kept: the oracle their exact comparisons need). Neither
``dpsql serve`` nor the CLI nor the policy can name a source: a data owner's proxy always
samples.

Scope: the SQL engine's answers (noise, partition selection, quantiles and mode, ``auto``
contribution bounds). Not routed through it: the salts that order contribution bounding
(``rng.token_hex``: which rows a unit keeps, not noise) and the offline release jobs of
:mod:`dpsql.release` (histograms, synthetic data), which call the mechanisms and
:mod:`dpsql.dp.rng` directly (they have no test switch either).

A source decides only the random part. What a release costs (the ledger's charge) and how wide
its intervals are (``half_width``, the quantiles' miss probabilities) are properties of the
mechanism, not of the source, so an engine on another source charges and reports the same.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from dpsql.dp.bounds import Selection
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import Mode, Quantile


class NoiseSource(Protocol):
    """The random part of each kind of release (one method per mechanism family)."""

    def add(self, mech: Laplace | Gaussian, values: np.ndarray) -> np.ndarray:
        """``values`` (same shape) with the mechanism's additive noise, on its grid."""
        ...

    def keep(self, selection: PartitionSelection, unit_counts: np.ndarray) -> np.ndarray:
        """Partition selection: a boolean mask of the groups released (distinct units per group)."""
        ...

    def pick(self, mech: Quantile, utilities: np.ndarray) -> np.ndarray:
        """The exponential mechanism of a quantile or an interval end: a candidate index per
        group from its (groups, candidates) scaled utilities (``Quantile.scaled_utilities`` or
        ``Quantile.end_utilities``)."""
        ...

    def mode(self, mech: Mode, counts: np.ndarray) -> np.ndarray:
        """Report-noisy-max over public candidates: a candidate index per group from its
        (groups, candidates) row counts."""
        ...

    def bound(self, selection: Selection, counts: np.ndarray) -> int:
        """A contribution bound chosen from units per bucket: a bucket index, or ``len(counts)``
        (the guard's fallback to the fixed defaults)."""
        ...


class CsprngNoise:
    """The product's noise source: each mechanism's exact sampler (:mod:`dpsql.dp.rng`)."""

    def add(self, mech: Laplace | Gaussian, values: np.ndarray) -> np.ndarray:
        return np.asarray(mech.release(values), dtype=np.float64)

    def keep(self, selection: PartitionSelection, unit_counts: np.ndarray) -> np.ndarray:
        return selection.keep(unit_counts)

    def pick(self, mech: Quantile, utilities: np.ndarray) -> np.ndarray:
        return mech.select(utilities)

    def mode(self, mech: Mode, counts: np.ndarray) -> np.ndarray:
        return np.atleast_1d(mech.release(counts))

    def bound(self, selection: Selection, counts: np.ndarray) -> int:
        return selection.choose(counts)


CSPRNG: NoiseSource = CsprngNoise()
"""The noise source of every engine the product builds."""

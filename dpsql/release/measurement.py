"""One noisy measurement of a marginal: the value every synthesizer step passes on
(:mod:`dpsql.release.marginals` makes them, :mod:`dpsql.release.compress` merges their cells,
:mod:`dpsql.release.pgm` fits a model to them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal over ``clique`` (column indices), flattened, with its noise std.

    ``weights`` (None: all 1) scale the measured vector: the measurement is weights * x + noise,
    each coordinate with noise std ``std`` (a merged cell of k values measured as their sum /
    sqrt(k), :mod:`dpsql.release.compress`).
    """

    clique: tuple[int, ...]
    noisy: np.ndarray
    std: float
    weights: np.ndarray | None = None
    half_width: float = math.nan  # of the 0.95 interval of one coordinate's noise

"""The measures released by a selection from bucket counts, not by additive noise on a total:
a quantile and a mode per group (the exponential mechanism over the buckets of
:mod:`dpsql.sql.rewrite.bucket_values`), a quantile's interval ends, and COUNT(DISTINCT x) over
declared keys (each key's noisy rows, the keys counted present and their interval). Every draw is
the engine's :class:`~dpsql.dp.noise_source.NoiseSource`'s (called by
:func:`dpsql.execute.noise.release`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.noise_source import NoiseSource
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.errors import InternalError
from dpsql.sql.plan import MeasurePlan, Plan
from dpsql.sql.rewrite.buckets import bucket_specs, code_bucket

Hist = dict[tuple[int, tuple[str | None, ...]], dict[Any, int]]


def split_bucket_rows(
    plan: Plan, rows: list[tuple[Any, ...]]
) -> tuple[list[tuple[Any, ...]], Hist]:
    """Separate the per-group rows from the per-bucket rows of
    :mod:`dpsql.sql.rewrite.bucket_values`.

    Returns the per-group rows (without the bucket columns) and, per (measure index, group key),
    the count of rows per bucket (quantile: bucket index; mode: candidate text).
    """
    a = plan.analysis
    specs = bucket_specs(a)
    if not specs:
        return rows, {}
    nk, nb = len(a.group_keys), len(specs)
    width = len(rows[0]) - nb - 1 if rows else 0
    spec_of = {j: specs.index(_spec_key(m)) for j, m in enumerate(a.measures) if m.selected}
    full = 2**nb - 1
    main: list[tuple[Any, ...]] = []
    hist: Hist = {}
    for r in rows:
        gset = int(r[-1])
        if gset == full:
            main.append(tuple(r[:width]))
            continue
        b = nb - (full - gset).bit_length()  # GROUPING's bit for _dp_b<b> is 2^(nb-1-b)
        bucket = r[width + b]
        if bucket is None:
            continue  # NULL values (or, for mode, values outside the public keys)
        key = tuple(r[:nk])
        for j, sj in spec_of.items():
            if sj == b:
                m = a.measures[j]
                # a value outside a quantile's range has a code of its own (an outside count
                # reads it): counted in the bucket its clamped value is in
                cell = code_bucket(m, int(bucket)) if m.kind == "quantile" else bucket
                h = hist.setdefault((j, key), {})
                h[cell] = h.get(cell, 0) + int(r[nk + j])
    return main, hist


def _spec_key(m: Any) -> tuple[str, ...]:
    from dpsql.sql.rewrite.buckets import spec

    return spec(m)


def select_values(
    mp: MeasurePlan, hists: list[dict[Any, int]], candidates: tuple[str, ...], noise: NoiseSource
) -> list[Any]:
    """Release a quantile or mode per group from its bucket counts."""
    mech = mp.mechanism
    if not hists:
        return []
    if isinstance(mech, Quantile):
        mat = np.zeros((len(hists), mech.buckets), dtype=np.int64)
        for i, h in enumerate(hists):
            for b, c in h.items():
                mat[i, int(b)] = c
        chosen = noise.pick(mech, mech.scaled_utilities(mat))
        return [float(x) for x in mech.midpoints()[chosen]]
    assert isinstance(mech, Mode)
    cands = list(candidates)  # public: never derived from the data
    if not cands:
        return [None] * len(hists)
    mat = np.array([[h.get(c, 0) for c in cands] for h in hists], dtype=np.int64)
    chosen = noise.mode(mech, mat)
    return [cands[int(c)] for c in chosen]


def key_rows(
    mp: MeasurePlan, hists: list[dict[Any, int]], candidates: tuple[str, ...], noise: NoiseSource
) -> np.ndarray:
    """COUNT(DISTINCT x) over declared keys: the rows of each (group, public key), with Laplace
    noise (a unit's kept rows in a group are <= R, spread over the keys: L1 <= G·R)."""
    mat = np.array([[h.get(c, 0) for c in candidates] for h in hists], dtype=np.float64)
    mat = mat.reshape(len(hists), len(candidates))
    if not mat.size:
        return mat
    return np.asarray(noise.add(_additive(mp), mat), dtype=np.float64).reshape(mat.shape)


def _additive(mp: MeasurePlan) -> Laplace | Gaussian:
    """The measure's additive noise mechanism (a count of keys' rows is never a selection)."""
    mech = mp.mechanism
    if isinstance(mech, (Quantile, Mode)):
        raise InternalError(f"{mp.key}: a selection mechanism where additive noise is expected")
    return mech


def present_keys(mp: MeasurePlan, row: np.ndarray) -> int:
    """The keys counted present: noisy rows at least the noise's half-width at 1 - 1/(2n) for n
    keys (an absent key passes with probability <= 1/(2n): on average half a key invented)."""
    if not row.size:
        return 0
    tau = _additive(mp).half_width(1 - 1 / (2 * row.size))
    return int((row >= tau).sum())


def present_interval(mp: MeasurePlan, row: np.ndarray, level: float) -> tuple[float, float]:
    """An interval for the number of keys with a kept row: with every key's noise within w
    (union bound over the n keys), a key is surely present when its noisy rows exceed w, and
    possibly present when they reach 1 - w."""
    if not row.size:
        return 0.0, 0.0
    w = _additive(mp).half_width(1 - (1 - level) / row.size)
    return float((row - w > 0).sum()), float((row + w >= 1).sum())


def quantile_ends(mp: MeasurePlan, hists: list[dict[Any, int]], noise: NoiseSource) -> np.ndarray:
    """A quantile's interval per group, (groups, 2): the lowest value of the bucket chosen for
    the target OFFSET rows below, the highest of the one chosen OFFSET rows above. Each end
    is on the wrong side of the true quantile (of the kept rows) with probability at most
    ``miss_probability(OFFSET)`` (dpsql.dp.quantiles.Quantile)."""
    assert mp.bounds is not None
    low_q, high_q = mp.bounds
    mat = np.zeros((len(hists), low_q.buckets), dtype=np.int64)
    for i, h in enumerate(hists):
        for b, c in h.items():
            mat[i, int(b)] = c
    out = np.zeros((len(hists), 2), dtype=np.float64)
    if not hists:
        return out
    out[:, 0] = low_q.end_values(noise.pick(low_q, low_q.end_utilities(mat)))
    out[:, 1] = high_q.end_values(noise.pick(high_q, high_q.end_utilities(mat)))
    return out


def quantile_level(mp: MeasurePlan) -> float:
    """The confidence of a quantile's interval: 1 - the two ends' miss probabilities."""
    if mp.bounds is None:
        return 0.0
    return 1.0 - sum(q.miss_probability(abs(q.offset)) for q in mp.bounds)

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
from dpsql.sql.rewrite.buckets import bucket_specs, code_bucket, outside_codes, spec

Key = tuple[str | None, ...]
# per (measure index, group key): a quantile's rows per bucket (int64, length B), a mode's or
# COUNT(DISTINCT key)'s rows per candidate text
Cells = np.ndarray | dict[Any, int]
Hist = dict[tuple[int, Key], Cells]


def split_bucket_rows(
    plan: Plan, rows: list[tuple[Any, ...]]
) -> tuple[list[tuple[Any, ...]], Hist]:
    """Separate the per-group rows from the per-bucket rows of
    :mod:`dpsql.sql.rewrite.bucket_values`.

    Returns the per-group rows (without the bucket columns) and, per (measure index, group key),
    the count of rows per cell: a quantile's as an int64 array over its B buckets (a code
    outside the grid counted in the bucket its clamped value is in), a mode's as a dict from
    candidate text. A quantile's upstream rows (one per group and non-empty bucket: thousands
    with 4,096 buckets) are read column-wise with numpy, not row by row.
    """
    a = plan.analysis
    specs = bucket_specs(a)
    if not specs:
        return rows, {}
    if not rows:
        return [], {}
    nk, nb = len(a.group_keys), len(specs)
    width = len(rows[0]) - nb - 1
    full = 2**nb - 1
    sets = np.array([r[-1] for r in rows], dtype=np.int64)
    main = [tuple(rows[i][:width]) for i in np.flatnonzero(sets == full).tolist()]
    hist: Hist = {}
    for b in range(nb):
        # GROUPING's bit for _dp_b<b> is 2^(nb-1-b): the rows of bucketing b
        mine = [rows[i] for i in np.flatnonzero(sets == full - 2 ** (nb - 1 - b)).tolist()]
        if None in (cells := [r[width + b] for r in mine]):
            # NULL values (or, for mode, values outside the public keys) are in no cell
            mine = [r for r, c in zip(mine, cells, strict=True) if c is not None]
            cells = [c for c in cells if c is not None]
        if not mine:
            continue
        # a group's index per row (one key column: the value itself, whose hash str caches)
        keys: list[Any] = [r[0] for r in mine] if nk == 1 else [tuple(r[:nk]) for r in mine]
        index: dict[Any, int] = dict.fromkeys(keys, 0)
        for i, k in enumerate(index):
            index[k] = i
        group = np.fromiter(map(index.__getitem__, keys), dtype=np.int64, count=len(keys))
        for j, m in enumerate(a.measures):
            if not m.selected or specs.index(spec(m)) != b:
                continue
            counts = np.array([r[nk + j] for r in mine], dtype=np.int64)
            if m.kind != "quantile":
                for k, cell, c in zip(keys, cells, counts.tolist(), strict=True):
                    h = hist.setdefault((j, (k,) if nk == 1 else k), {})
                    assert isinstance(h, dict)
                    h[cell] = h.get(cell, 0) + c
                continue
            codes = np.array(cells, dtype=np.int64)
            below, above = outside_codes(m)
            if codes.min() < below or codes.max() > above:
                raise InternalError(f"{m.key}: a bucket code outside {below} .. {above}")
            # a value outside a quantile's range has a code of its own (an outside count reads
            # it): counted in the bucket its clamped value is in
            codes[codes == below] = code_bucket(m, below)
            codes[codes == above] = code_bucket(m, above)
            mat = np.zeros((len(index), m.buckets), dtype=np.int64)
            np.add.at(mat, (group, codes), counts)
            for k, i in index.items():
                hist[(j, (k,) if nk == 1 else k)] = mat[i]
    return main, hist


def bucket_matrix(hists: list[Cells | None], buckets: int) -> np.ndarray:
    """The (groups, B) rows per bucket of a quantile's groups (a group without a row: zeros)."""
    mat = np.zeros((len(hists), buckets), dtype=np.int64)
    for i, h in enumerate(hists):
        if h is None:
            continue
        if not isinstance(h, np.ndarray) or h.shape != (buckets,):
            raise InternalError(f"a quantile's bucket counts where {buckets} were expected")
        mat[i] = h
    return mat


def _cells(h: Cells | None) -> dict[Any, int]:
    """A mode's or key count's rows per candidate text (none: empty)."""
    if isinstance(h, np.ndarray):
        raise InternalError("bucket counts where a mode's candidates are expected")
    return h or {}


def select_values(
    mp: MeasurePlan, hists: list[Cells | None], candidates: tuple[str, ...], noise: NoiseSource
) -> list[Any]:
    """Release a quantile or mode per group from its bucket counts."""
    mech = mp.mechanism
    if not hists:
        return []
    if isinstance(mech, Quantile):
        mat = bucket_matrix(hists, mech.buckets)
        chosen = noise.pick(mech, mech.scaled_utilities(mat))
        return [float(x) for x in mech.midpoints()[chosen]]
    assert isinstance(mech, Mode)
    cands = list(candidates)  # public: never derived from the data
    if not cands:
        return [None] * len(hists)
    mat = np.array([[_cells(h).get(c, 0) for c in cands] for h in hists], dtype=np.int64)
    chosen = noise.mode(mech, mat)
    return [cands[int(c)] for c in chosen]


def key_rows(
    mp: MeasurePlan, hists: list[Cells | None], candidates: tuple[str, ...], noise: NoiseSource
) -> np.ndarray:
    """COUNT(DISTINCT x) over declared keys: the rows of each (group, public key), with Laplace
    noise (a unit's kept rows in a group are <= R, spread over the keys: L1 <= G·R)."""
    mat = np.array([[_cells(h).get(c, 0) for c in candidates] for h in hists], dtype=np.float64)
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


def quantile_ends(mp: MeasurePlan, hists: list[Cells | None], noise: NoiseSource) -> np.ndarray:
    """A quantile's interval per group, (groups, 2): the lowest value of the bucket chosen for
    the target OFFSET rows below, the highest of the one chosen OFFSET rows above. Each end
    is on the wrong side of the true quantile (of the kept rows) with probability at most
    ``miss_probability(OFFSET)`` (dpsql.dp.quantiles.Quantile)."""
    assert mp.bounds is not None
    low_q, high_q = mp.bounds
    mat = bucket_matrix(hists, low_q.buckets)
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

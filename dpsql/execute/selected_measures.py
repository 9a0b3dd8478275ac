"""The measures released by a selection from bucket counts, not by additive noise on a total:
a quantile and a mode per group (the exponential mechanism over the buckets of
:mod:`dpsql.sql.rewrite.bucket_values`), a quantile's interval ends, and COUNT(DISTINCT x) over
declared keys (each key's noisy rows, the keys counted present and their interval). Every draw is
the engine's :class:`~dpsql.dp.noise_source.NoiseSource`'s (called by
:func:`dpsql.execute.noise.release`)."""

from __future__ import annotations

import math
from fractions import Fraction
from operator import itemgetter
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
    with 4,096 buckets) are read column-wise with numpy, not row by row (each column through
    ``map(itemgetter)``: no Python frame per row).
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
    sets = np.fromiter(map(itemgetter(-1), rows), dtype=np.int64, count=len(rows))
    main = [tuple(rows[i][:width]) for i in np.flatnonzero(sets == full).tolist()]
    hist: Hist = {}
    for b in range(nb):
        # GROUPING's bit for _dp_b<b> is 2^(nb-1-b): the rows of bucketing b
        mine = list(
            map(rows.__getitem__, np.flatnonzero(sets == full - 2 ** (nb - 1 - b)).tolist())
        )
        if None in (cells := list(map(itemgetter(width + b), mine))):
            # NULL values (or, for mode, values outside the public keys) are in no cell
            mine = [r for r, c in zip(mine, cells, strict=True) if c is not None]
            cells = [c for c in cells if c is not None]
        if not mine:
            continue
        # a group's index per row (one key column: the value itself, whose hash str caches)
        keys: list[Any] = (
            list(map(itemgetter(0), mine)) if nk == 1 else [tuple(r[:nk]) for r in mine]
        )
        index: dict[Any, int] = dict.fromkeys(keys, 0)
        for i, k in enumerate(index):
            index[k] = i
        group = np.fromiter(map(index.__getitem__, keys), dtype=np.int64, count=len(keys))
        for j, m in enumerate(a.measures):
            if not m.selected or specs.index(spec(m)) != b:
                continue
            counts = np.fromiter(map(itemgetter(nk + j), mine), dtype=np.int64, count=len(mine))
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
            col = _more_column(plan, j)
            if col is not None:  # the rows its interval ends rank besides (more_key)
                more = np.zeros((len(index), m.buckets), dtype=np.int64)
                extra = np.fromiter(map(itemgetter(nk + col), mine), np.int64, len(mine))
                np.add.at(more, (group, codes), extra)
                for k, i in index.items():
                    hist[(more_key(j), (k,) if nk == 1 else k)] = more[i]
    return main, hist


def more_key(j: int) -> int:
    """Where :func:`split_bucket_rows` keeps quantile measure j's ``_dp_le`` cells: the rows
    past R (up to END_ROWS R) of each unit its interval ends rank besides the answer's
    (:func:`dpsql.sql.rewrite.rank_rows.left_out_rows`), by bucket."""
    return -(j + 1)


def _more_column(plan: Plan, j: int) -> int | None:
    """The column (after the group keys) of quantile measure j's ``_dp_le``: after the measures,
    the selection count, the outside and alarm counts and two removed-mass columns per bias
    target, one per quantile target in order (left_out_rows); None when it has none."""
    a = plan.analysis
    quantiles = [b.target.index for b in plan.bias if b.target.measure.kind == "quantile"]
    if j not in quantiles:
        return None
    x = sum(1 for b in plan.bias if b.outside is not None)
    first = len(a.measures) + (1 if a.needs_selection else 0) + x + len(plan.alarms)
    return first + 2 * len(plan.bias) + quantiles.index(j)


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


def quantile_ends(
    mp: MeasurePlan,
    hists: list[Cells | None],
    noise: NoiseSource,
    left_out: np.ndarray | None = None,
    reach: float = 0.0,
    more: list[Cells | None] | None = None,
) -> np.ndarray:
    """A quantile's interval per group, (groups, 2): the lowest value of the bucket chosen for
    the target OFFSET rows below, the highest of the one chosen OFFSET rows above. Each end
    is on the wrong side of the true quantile (of the kept rows) with probability at most
    ``miss_probability(OFFSET)`` (dpsql.dp.quantiles.Quantile).

    A quantile of all the rows (dpsql.sql.bias.quantile_targets): the ends rank E = END_ROWS
    R rows of a unit (``more``: per group, the bucket counts of each unit's rows past R up to
    E, added to the kept rows'; the ends' contribution bound is E: dpsql.sql.plan), and
    ``left_out`` (per group, released) with ``reach`` (its noise's one-sided reach at
    ``mp.left_out_alpha``) moves them past the rows beyond E, D <= D' = max(0, left_out +
    reach) but with that chance. With n rows K ranked (up to E a unit) of the N = n + D rows T,
    the truth lies between T's positions floor(p) and ceil(p), p = q (N - 1) = q (n - 1) + q D. The high end aims k + ceil(q D') rows past q (n - 1): but
    with its miss probability its value H has at least q (n - 1) + ceil(q D') + 5/2 kept rows
    at or below it (Quantile.miss_probability, with k's slack), so T has as many, more than
    ceil(p) + 1: H is at or above the truth. The low end aims k + ceil((1 - q) D') rows below:
    fewer than q (n - 1) - (1 - q) D' - 3/2 kept rows lie below its value L, so fewer than that
    plus D <= p - 3/2 rows of T: L is at or below the truth. The offsets are functions of a
    release (post-processing); each end is the same selection, at the same epsilon, for any
    public offset (its utility's sensitivity is R whatever the offset)."""
    assert mp.bounds is not None
    low_q, high_q = mp.bounds
    mat = bucket_matrix(hists, low_q.buckets)
    if more is not None:  # the rows past R up to END_ROWS R (bias.end_rows) ranked too
        mat = mat + bucket_matrix(more, low_q.buckets)
    out = np.zeros((len(hists), 2), dtype=np.float64)
    if not hists:
        return out
    lows = highs = None
    if left_out is not None:  # each group's own offsets: one selection over all groups' rows
        q = high_q.target  # (a row's candidates and coins are its own: the same law per group)
        d = [Fraction(max(0.0, float(x) + reach)) for x in left_out[: len(hists)]]
        lows = np.array([low_q.offset - math.ceil((1 - q) * x) for x in d], dtype=np.int64)
        highs = np.array([high_q.offset + math.ceil(q * x) for x in d], dtype=np.int64)
    out[:, 0] = low_q.end_values(noise.pick(low_q, low_q.end_utilities(mat, lows)))
    out[:, 1] = high_q.end_values(noise.pick(high_q, high_q.end_utilities(mat, highs)))
    return out


def quantile_level(mp: MeasurePlan) -> float:
    """The confidence of a quantile's interval: 1 - the two ends' miss probabilities (and,
    where its left-out rows are counted, that count's: ``left_out_alpha``)."""
    if mp.bounds is None:
        return 0.0
    return 1.0 - sum(q.miss_probability(abs(q.offset)) for q in mp.bounds) - mp.left_out_alpha


def clear_rows(mech: Quantile, confidence: float) -> int | None:
    """The fewest ranked rows a group needs for its quantile's answer to say something (None:
    MIN and MAX, whose answer may lie anywhere up to the bound at any size). The q quantile's
    answer is within t = rank_error(confidence) positions of the target q (n - 1); once t
    reaches past the rows on the target's nearer side, q n or (1 - q) n, the answer is the
    selection's noise, anywhere in the group's range (newcomer25 #6: a median of 311,340 for a
    true 38,500). Public: a function of the mechanism and the session's confidence only."""
    q = float(mech.quantile)
    side = min(q, 1 - q)
    if side <= 0:
        return None
    return math.ceil(mech.rank_error(confidence) / side)


def unclear_groups(
    mp: MeasurePlan, hists: list[Cells | None], noise: NoiseSource, confidence: float
) -> np.ndarray:
    """Per group, whether its quantile gets no clear estimate: a noisy count of its ranked rows
    (``mp.rows``: Laplace, a unit adds or removes at most R of them in each of its G groups,
    L1 = G R, charged with the statement) below :func:`clear_rows`. The release puts NULL
    there (value and interval columns), as an AVG below its clear count is (avg_unclear): the
    decision is a function of that release and public numbers only, never of a true count."""
    need = clear_rows(mp.mechanism, confidence) if isinstance(mp.mechanism, Quantile) else None
    if mp.rows is None or need is None or not hists:
        return np.zeros(len(hists), dtype=bool)
    assert isinstance(mp.mechanism, Quantile)
    n = bucket_matrix(hists, mp.mechanism.buckets).sum(axis=1).astype(np.float64)
    return np.asarray(noise.add(mp.rows, n), dtype=np.float64) < need

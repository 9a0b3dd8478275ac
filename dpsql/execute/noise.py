"""Turn the true per-group measures into released statistics (the only place noise is added).

Input: the upstream rows of the private query (group keys as text, then one column per measure,
then, with partition selection, the count used to select). Output: a :class:`Release` — the group
keys kept, each statistic's noisy value and interval — which is all that ever leaves this module.
The selections (quantile, mode, COUNT(DISTINCT) over declared keys) are released by
:mod:`dpsql.execute.selected_measures`, the columns shown besides the values (expressions'
intervals, the COUNT(DISTINCT) cap) worked out by :mod:`dpsql.execute.release_columns`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.noise_source import NoiseSource
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.errors import InternalError
from dpsql.execute import avg_unclear
from dpsql.execute import bias as bias_module
from dpsql.execute.accuracy_text import accuracy_notes
from dpsql.execute.bias import (
    Removed,
    avg_interval,
    avg_targets,
    avg_widths,
    corrected,
    outside_plans,
    parts,
    release_alarms,
    release_removed,
    round_interval,
    round_nearest,
    target_interval,
    target_of,
)
from dpsql.execute.disowned import Disowned, owned
from dpsql.execute.key_texts import canonical_rows, check_declared, key_name
from dpsql.execute.release_columns import (
    cap_note,
    capped,
    derived_columns,
    half,
    one_end_notes,
)
from dpsql.execute.selected_measures import (
    key_rows,
    more_key,
    present_interval,
    present_keys,
    quantile_ends,
    quantile_level,
    select_values,
    split_bucket_rows,
    unclear_groups,
)
from dpsql.sql.plan import Plan
from dpsql.sql.postprocess import derive


@dataclass(frozen=True)
class Release:
    """What a private query releases. JSON-serializable via ``as_json``."""

    key_types: tuple[str, ...]
    groups: list[list[str | None]]
    stats: list[list[Any]]
    intervals: list[list[tuple[float, float] | None]]
    # per row, the intervals of the outputs that are expressions over statistics
    # (dpsql.sql.intervals.derived_outputs order)
    derived: list[list[tuple[float, float] | None]] = field(default_factory=list)
    confidence: float | None = None  # the level of the stored intervals
    notes: tuple[str, ...] = ()  # the accuracy summary (dpsql.execute.accuracy_text.accuracy_notes)
    # per row, per statistic: its interval's half-width before the accuracy notice disowned
    # it (dpsql.execute.disowned): the noise's resolution, for presentation rounding only
    # (a release stored before these existed has none: its intervals' are used)
    half_widths: list[list[float | None]] = field(default_factory=list)
    derived_half_widths: list[list[float | None]] = field(default_factory=list)  # (the same)
    # the ``auto`` contribution bounds it was measured with (repeat_keys.applied_bounds): a
    # repeat under other bounds stored since is measured again (None: none, or stored before)
    bounds: str | None = None
    # the words its plan gave it when released (execute.finish: the quantiles' and modes'
    # notices, the partition selection's thresholds): a free repeat says them again, whatever
    # the bounds it is planned with now (newcomer23 #4; None: stored before they were kept)
    words: dict[int, str] | None = None  # by statistic index (notices.plan_words)
    thresholds: tuple[int, ...] | None = None
    # per row, per statistic: the interval its measures' noise alone gives at the stated level
    # (no removed-mass reach): what the words of rows picked by a noisy value read
    # (dpsql.execute.picked_words; empty: stored before it was kept, or no additive noise)
    noise: list[list[tuple[float, float] | None]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "key_types": list(self.key_types),
            "groups": self.groups,
            "stats": self.stats,
            "intervals": [[list(i) if i else None for i in row] for row in self.intervals],
            "derived": [[list(i) if i else None for i in row] for row in self.derived],
            "confidence": self.confidence,
            "notes": list(self.notes),
            "half_widths": self.half_widths,
            "derived_half_widths": self.derived_half_widths,
            **({"bounds": self.bounds} if self.bounds is not None else {}),
            **(
                {"words": {str(k): v for k, v in self.words.items()}}
                if self.words is not None
                else {}
            ),
            **({"thresholds": list(self.thresholds)} if self.thresholds is not None else {}),
            **(
                {"noise": [[list(i) if i else None for i in r] for r in self.noise]}
                if self.noise
                else {}
            ),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Release:
        return cls(
            tuple(d["key_types"]),
            d["groups"],
            d["stats"],
            [[tuple(i) if i else None for i in row] for row in d["intervals"]],
            [[tuple(i) if i else None for i in row] for row in d.get("derived", [])],
            d.get("confidence"),
            tuple(d.get("notes", ())),
            d.get("half_widths", []),
            d.get("derived_half_widths", []),
            d.get("bounds"),
            {int(k): v for k, v in d["words"].items()} if "words" in d else None,
            tuple(d["thresholds"]) if "thresholds" in d else None,
            [[tuple(i) if i else None for i in row] for row in d.get("noise", [])],
        )


def _snapped(values: Sequence[Any], grid: Fraction) -> np.ndarray:
    """Upstream values (int, Decimal or float; NULL is 0) rounded to the grid in exact
    arithmetic, as floats (exact: multiples of 2^k): ``float(round(Fraction(v) / grid) * grid)``
    in Python integers, without a Fraction per value. v = n/d (``as_integer_ratio``, as
    ``Fraction(v)`` reads a Decimal or float), grid = gn/gd: v / grid = n gd / (d gn), rounded
    half to even as ``Fraction.__round__`` does (the rounding of a rational does not depend on
    its terms), times the grid is q gn / gd, and int / int is the correctly rounded float, as
    ``float(Fraction)`` (which divides its reduced terms) is."""
    gn, gd = grid.numerator, grid.denominator
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        if v is None:
            n, d = 0, 1
        elif isinstance(v, int):
            n, d = v, 1
        elif isinstance(v, (Decimal, float)):
            n, d = v.as_integer_ratio()
        else:
            n, d = Fraction(v).as_integer_ratio()
        x, y = n * gd, d * gn
        q, r = divmod(x, y)
        if 2 * r > y or (2 * r == y and q % 2):
            q += 1
        out[i] = q * gn / gd
    return out


def release(
    plan: Plan,
    rows: list[tuple[Any, ...]],
    key_types: Sequence[str],
    declared_keys: list[tuple[str | None, ...]] | None,
    confidence: float,
    noise: NoiseSource,
    candidates: dict[str, tuple[str, ...]] | None = None,
) -> Release:
    """Noisy statistics per released group, every random choice drawn from ``noise`` (the
    engine's source); ``candidates``: mode candidates from ``keys_from``, resolved from the
    public table, by measure key."""
    a = plan.analysis
    nk = len(a.group_keys)
    nm = len(a.measures)
    names = [key_name(g.expr) for g in a.group_keys]
    if declared_keys is not None:
        # a group prints as its one declared text only if no two are one value (key_texts)
        check_declared(declared_keys, key_types[:nk], names)
    else:  # keys selected from the data: one text per value, not a row's (key_texts)
        rows = canonical_rows(rows, key_types[:nk], names)
    rows, hist = split_bucket_rows(plan, rows)
    by_key: dict[tuple[str | None, ...], tuple[Any, ...]] = {
        tuple(r[:nk]): tuple(r[nk:]) for r in rows
    }
    nsel = 1 if a.needs_selection else 0
    if declared_keys is not None:
        keys = [tuple(k) for k in itertools.product(*declared_keys)] if nk else [()]
        zero = (0,) * (nm + nsel + len(outside_plans(plan)) + len(plan.alarms) + 2 * len(plan.bias))
        table = [(k, by_key.get(k, zero)) for k in keys]
    else:
        # in key order, not PostgreSQL's: a hash aggregate's output order depends on every
        # group it held, those partition selection drops too (one unit's own group can reorder
        # the others): the order must be a function of the released keys only
        table = sorted(by_key.items(), key=lambda t: tuple((v is None, v or "") for v in t[0]))
    if a.needs_selection and table:
        sel = np.array([float(v[nm]) for _, v in table])
        assert plan.selection is not None
        keep = noise.keep(plan.selection, sel)
        table = [t for t, k in zip(table, keep, strict=True) if k]
    # the bias targets' outside counts, the VARIANCE alarms' (dpsql.sql.alarms.AlarmPlan), then
    # the targets' removed-mass columns follow the measures
    x0 = nm + nsel
    a0 = x0 + len(outside_plans(plan))
    b0 = a0 + len(plan.alarms)
    removed = release_removed(
        plan,
        [([v[b0 + 2 * i] for _, v in table], [v[b0 + 2 * i + 1] for _, v in table])
         for i in range(len(plan.bias))],
        noise,
        [[v[x0 + j] for _, v in table] for j in range(a0 - x0)],
    )  # fmt: skip
    alarms = release_alarms(plan, [[v[a0 + j] for _, v in table] for j in range(b0 - a0)], noise)
    noisy: dict[str, np.ndarray | list[Any]] = {}  # a selected measure's values: a list
    # count_keys: noisy rows per (group, key); quantiles: (low, high) interval ends per group
    present: dict[str, np.ndarray] = {}
    for j, mp in enumerate(plan.measures):
        if mp.measure.selected:
            cands = mp.measure.candidates or (candidates or {}).get(mp.key, ())
            hists = [hist.get((j, k)) for k, _ in table]
            if mp.measure.kind == "count_keys":
                present[mp.key] = key_rows(mp, hists, cands, noise)
                noisy[mp.key] = np.array(
                    [present_keys(mp, row) for row in present[mp.key]], dtype=np.float64
                )
                continue
            noisy[mp.key] = select_values(mp, hists, cands, noise)
            if mp.rows is not None:  # no clear estimate: NULL (selected_measures.clear_rows)
                unclear = unclear_groups(mp, hists, noise, confidence)
                noisy[mp.key] = [
                    None if u else v for v, u in zip(noisy[mp.key], unclear, strict=True)
                ]
            if mp.bounds is not None:
                rm = removed.get(mp.key)  # its left-out rows (dpsql.sql.bias.quantile_targets)
                if rm is None:
                    present[mp.key] = quantile_ends(mp, hists, noise)
                else:
                    reach = rm.plan.dropped.half_width(1 - 2 * mp.left_out_alpha)
                    more = [hist.get((more_key(j), k)) for k, _ in table]
                    present[mp.key] = quantile_ends(mp, hists, noise, rm.dropped, reach, more)
            continue
        mech = mp.mechanism
        if isinstance(mech, (Quantile, Mode)):
            raise InternalError(f"{mp.key}: a selection mechanism on an additive measure")
        vals = _snapped([v[j] for _, v in table], mech.grid)
        noisy[mp.key] = noise.add(mech, vals)
    stats: list[list[Any]] = [[] for _ in table]
    intervals: list[list[tuple[float, float] | None]] = [[] for _ in table]
    noise_ivs: list[list[tuple[float, float] | None]] = [[] for _ in table]
    # an AVG whose own noisy count is below its clear count: NULL, value and interval
    # (dpsql.execute.avg_unclear; the released count and public numbers only)
    nulls = {
        si: avg_unclear.unclear(plan, s, noisy[s.measures[-1]], confidence)
        for si, s in enumerate(a.statistics)
        if s.func == "avg" and len(s.measures) == 2
    }
    if nulls:  # and one whose interval came out spanning all of its range, as it is shown
        whole = _stat_interval(plan, noisy, removed, present)
        for si, u in nulls.items():
            s = a.statistics[si]
            ivs = [None if x else whole(i, si, confidence) for i, x in enumerate(u)]
            shown = [iv if iv is None else round_interval(s, iv, half(iv)) for iv in ivs]
            nulls[si] = [
                x or avg_unclear.spans(plan, s, iv) for x, iv in zip(u, shown, strict=True)
            ]
    interval = _stat_interval(plan, noisy, removed, present, nulls)
    clamped: set[int] = set()  # statistics the declared domain's size clamped
    for si, s in enumerate(a.statistics):
        selected = s.func in ("quantile", "mode")  # (rounded by derive, to its buckets)
        ws = None if selected else noise_widths(plan, s.measures, confidence)
        b = None if selected else target_of(s, plan)
        adds = removed[b.target.key] if b is not None and b.adds else None
        for i in range(len(table)):
            row_vals: list[Any] = [noisy[m][i] for m in s.measures]
            if adds is not None:  # the fallback: the kept answer plus what it left out
                row_vals = [corrected(s, float(row_vals[0]), adds, i)]
            v, _ = derive(s, row_vals, [0.0] * len(s.measures))
            if si in nulls and nulls[si][i]:
                v = None  # no clear estimate (its interval too: _stat_interval)
            iv = interval(i, si, confidence)
            iv = iv if iv is None else round_interval(s, iv, half(iv))
            # presentation: the digits below the step of its noise are dropped (a function of
            # the released values and interval only; stored so, a free repeat reads the same;
            # round_nearest keeps any value but a float or numeric: a count's int as it is)
            rounds = iv is not None and not selected and isinstance(v, (float, Decimal))
            # its interval from its noise alone (over the noise's widths; worked out once)
            own = (
                derive(s, row_vals, ws)[1]
                if ws is not None and (rounds or (adds is None and v is not None))
                else None
            )
            if rounds:
                assert iv is not None and v is not None
                r = round_nearest(v, noise_resolution(own, half(iv)))
                v = r if not iv[0] <= v <= iv[1] or iv[0] <= r <= iv[1] else v
            if s.at_most is not None:  # the declared domain's size (post-processing)
                cap = s.at_most
                if (v is not None and v > cap) or (iv is not None and iv[1] > cap):
                    clamped.add(si)
                v = v if v is None else min(v, cap)
                iv = iv if iv is None else (min(iv[0], float(cap)), min(iv[1], float(cap)))
            stats[i].append(v)
            intervals[i].append(iv)
            # its noise alone (at the fallback the column adds the left-out estimate: both
            # parts' noise, its interval)
            niv = iv if adds is not None else None if ws is None or v is None else own
            noise_ivs[i].append(None if niv is None else (float(niv[0]), float(niv[1])))
    groups = [list(k) for k, _ in table]
    acc = accuracy_notes(
        a, plan, removed, confidence, len(table), noisy, intervals, alarms, values=stats
    )
    held = _held(acc.disowned, interval)
    derived, derived_halves = derived_columns(
        a, len(table), confidence, interval, held, acc.disowned
    )
    halves = [[None if iv is None else half(iv) for iv in row] for row in intervals]
    owned_ivs = [  # an interval the notice says does not hold: NULL columns (issue 16)
        [owned(acc.disowned, r, si, iv) for si, iv in enumerate(row)]
        for r, row in enumerate(intervals)
    ]
    for row in owned_ivs:  # an end left open by the notice shows the cap: say it too
        for si, iv in enumerate(row):
            at_most = a.statistics[si].at_most
            if at_most is not None and iv is not None and iv[1] > at_most:
                clamped.add(si)
    cap_notes = tuple(cap_note(a, si) for si in sorted(clamped))
    intervals = [[capped(a, si, iv) for si, iv in enumerate(row)] for row in owned_ivs]
    return Release(
        tuple(key_types),
        groups,
        stats,
        intervals,
        derived,
        confidence,
        acc.notes + cap_notes + one_end_notes(a, derived),
        halves,
        derived_halves,
        noise=noise_ivs,
    )


def noise_widths(plan: Plan, keys: Sequence[str], level: float) -> list[float] | None:
    """The half-widths of measures ``keys``' noise at ``level`` jointly (Bonferroni over them):
    what the noise alone moves a statistic by, without the removed-mass reach its interval adds;
    None when one is not released by additive noise."""
    lv = 1 - (1 - level) / max(1, len(keys))
    out = []
    for k in keys:
        mech = plan.measure_plan(k).mechanism
        if not isinstance(mech, (Laplace, Gaussian)):
            return None
        out.append(mech.half_width(lv))
    return out


def noise_resolution(own: tuple[float, float] | None, hw: float) -> float:
    """The half-width a released value is rounded at (:func:`dpsql.execute.bias.round_nearest`):
    its noise's own at the stated level, not its interval's where that is wider (a removed-mass
    reach: an AVG of incomes near 48,000 with noise of about +-200 rounded to the nearest 100 or
    1,000 by its interval's +-18,000, as large as its error); never coarser than the interval's
    (``hw``), whose ends round outwards at that step, so the value stays inside them. ``own``:
    the statistic's interval over its measures' noise widths alone (``derive(s, values,
    noise_widths)``; None when it has none)."""
    if own is None or not all(map(math.isfinite, own)) or own[1] <= own[0]:
        return hw
    h = (own[1] - own[0]) / 2
    return h if not math.isfinite(hw) or h < hw else hw


def _held(
    disowned: Disowned, interval: Callable[[int, int, float], tuple[float, float] | None]
) -> Callable[[int, int, float], tuple[float, float] | None]:
    """``interval`` as its columns show it (:func:`~dpsql.execute.disowned.owned`): None where
    the accuracy notice disowns it, the end that still holds with an infinite other end where
    one does (an expression over it keeps that end where it is monotone in it:
    :mod:`dpsql.sql.intervals`)."""

    def held(r: int, si: int, level: float) -> tuple[float, float] | None:
        return owned(disowned, r, si, interval(r, si, level))

    return held


def _stat_interval(
    plan: Plan,
    noisy: dict[str, Any],
    removed: dict[str, Removed],
    present: dict[str, np.ndarray] | None = None,
    nulls: dict[int, list[bool]] | None = None,
) -> Callable[[int, int, float], tuple[float, float] | None]:
    """Statistic si's interval in row r at a given confidence (Bonferroni over its measures and,
    for a COUNT or SUM whose removed mass is estimated, that estimate: dpsql.execute.bias)."""
    widths: dict[tuple[str, float], float] = {}

    def width(key: str, level: float) -> float:
        if (key, level) not in widths:
            mech = plan.measure_plan(key).mechanism
            widths[key, level] = (
                math.nan if isinstance(mech, (Quantile, Mode)) else mech.half_width(level)
            )
        return widths[key, level]

    # what a statistic's interval needs besides the row's values is the same for every row:
    # worked out once per (statistic, level), as a function of the row
    rules: dict[tuple[int, float], Callable[[int], tuple[float, float] | None]] = {}

    def rule(si: int, level: float) -> Callable[[int], tuple[float, float] | None]:
        s = plan.analysis.statistics[si]
        if present and s.measures[0] in present:
            mp = plan.measure_plan(s.measures[0])
            ends = present[mp.key]
            if s.func == "quantile":
                ok = level <= quantile_level(mp)
                vals = noisy[mp.key]  # a group with no clear estimate: NULL, its interval too
                return lambda r: (
                    (float(ends[r][0]), float(ends[r][1])) if ok and vals[r] is not None else None
                )
            return lambda r: present_interval(mp, ends[r], level)
        b = target_of(s, plan)
        if b is not None:
            mech = plan.measure_plan(s.measures[0]).mechanism
            if not isinstance(mech, (Laplace, Gaussian)):
                raise InternalError(f"{s.sql}: a bias target released by {mech.name}")
            rm = removed[b.target.key]
            tw = bias_module.target_widths(mech, rm.plan, level)  # (read from its module)
            col = noisy[s.measures[0]]
            return lambda r: target_interval(s, float(col[r]), mech, rm, r, level, tw)
        avg = avg_targets(s, plan)
        if avg is not None:
            m0, m1 = (plan.measure_plan(m).mechanism for m in s.measures)
            if not isinstance(m0, (Laplace, Gaussian)) or not isinstance(m1, (Laplace, Gaussian)):
                raise InternalError(f"{s.sql}: an AVG released by a selection")
            aw = avg_widths((m0, m1), avg, level)
            pair = (removed[avg[0].target.key], removed[avg[1].target.key] if avg[1] else None)
            ws2 = (width(s.measures[0], aw.sum_level), width(s.measures[1], aw.count_level))
            c0, c1 = noisy[s.measures[0]], noisy[s.measures[1]]
            return lambda r: avg_interval(s, (float(c0[r]), float(c1[r])), ws2, pair, r, aw)
        lv = 1 - (1 - level) / parts(s, plan)
        ws = [width(m, lv) for m in s.measures]
        cols = [noisy[m] for m in s.measures]
        return lambda r: derive(s, [c[r] for c in cols], ws)[1]

    def interval(r: int, si: int, level: float) -> tuple[float, float] | None:
        if nulls and si in nulls and nulls[si][r]:
            return None  # an AVG with no clear estimate: NULL at every level
        got = rules.get((si, level))
        if got is None:
            got = rules[si, level] = rule(si, level)
        return got(r)

    return interval

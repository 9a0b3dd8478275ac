"""What contribution bounding removes: which measures get a private estimate of it, and at what cap.

Bounding keeps at most R = max_rows_per_unit rows of a privacy unit per group and at most
G = max_groups_per_unit groups per unit. For a COUNT, or a SUM of values of one sign, what it
removes has a known direction: the bounded answer is never above the truth (never below it for
a SUM of non-positive values). So the error bar of such a statistic is made honest by adding an
interval for the removed mass on the far side (:mod:`dpsql.execute.bias`), measured privately in
the same SQL (:mod:`dpsql.sql.rewrite.measure_dropped`):

* ``dropped``: per group, the sum over units of the unit's removed mass ``d(u, g)`` (its rows or
  its values beyond R in a group, all of it in a group beyond G, rounded up to the grid), each
  unit counted up to ``cap`` C over all its groups (in its own order of groups). One unit moves
  this vector by at most C in L1: Laplace noise of scale C / epsilon is epsilon-DP.
* ``over_cap``: per group, the units whose total removed mass passes C in that group (each unit
  once: L1 sensitivity 1). Their sum tells whether the interval's assumption -- no unit lost
  more than C -- is plainly false.

* ``outside`` (a SUM, or AVG's centred sum, of columns with declared ``bounds``): per group, the
  units with a kept value outside its column's declared range, each unit counted once (in the
  first of its kept groups that holds one; in each such group when the cap is split over K
  declared groups: L1 sensitivity ``split``). Clamping into the declared range is a premise of
  the interval, not measured (a value beyond it is unbounded: no interval can hold what its
  clamp removed), so this count only tells when the premise is plainly false
  (:mod:`dpsql.execute.declared_text` then says so).

C = ``CAP_FACTOR`` · R · c (c: what one row adds, 1 for counts), or ``CAP_FACTOR`` · L when the
measure's partials are scaled into an L1 cap L over the unit's groups (``Measure.total``): a
public number.
The estimate costs ``BIAS_SHARE`` of the statement's epsilon, split evenly over the measures
estimated: ``dropped`` 3/4 of a measure's part, ``over_cap`` 1/4 (``OUTSIDE_SHARE`` of it goes to
``outside`` when that is measured: the two alarms share it, the interval's own term keeps its
epsilon). ``BoundingStats`` is the hook for a private
measurement of the data's spread (item 1 of issue 16, chosen bounds) to choose the cap instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from fractions import Fraction
from typing import Literal

from sqlglot import exp

from dpsql.dp.accounting import Cost, sequential
from dpsql.dp.mechanisms import Laplace, floor_log2
from dpsql.sql.analysis import Analysis, Measure, decomposable, needs_group_rank

BIAS_SHARE = Fraction(1, 10)
# ... and at the fixed-default fallback (Analysis.fell_back), where a COUNT's or one-signed SUM's
# column adds the estimate: half of epsilon (same total charge: the answer gets the other half)
FALLBACK_SHARE = Fraction(1, 2)
DROPPED_SHARE = Fraction(3, 4)  # of BIAS_SHARE; over_cap gets the rest
OUTSIDE_SHARE = Fraction(1, 2)  # of over_cap's part, when the target's outside count is measured
CAP_FACTOR = 4
GRID_BITS = 20

BiasKind = Literal["dropped", "over_cap", "outside"]


@dataclass(frozen=True)
class BoundingStats:
    """Released (already private) statistics about how far units exceed the bounds.

    ``removed_cap``: the per-unit removed mass, as a multiple of R·c, up to which the interval
    accounts for bounding (e.g. from a DP high quantile of rows per unit). None: ``CAP_FACTOR``.
    """

    removed_cap: Fraction | None = None


@dataclass(frozen=True)
class BiasTarget:
    """A measure whose bounding bias is estimated. ``index``: its position in the measures."""

    index: int
    measure: Measure
    sign: int  # +1: bounding only lowers it (counts, SUM over lo >= 0); -1: only raises it
    cap_steps: int  # C, in grid steps
    grid: Fraction  # 1 for integer measures, else a power of two about 2**-20 of the cap
    # SUM: the range a row's value is clamped into for its *raw* partial: the declared bounds
    # (interval arithmetic), so mass clamped off by a narrower chosen range (clamp: auto) counts
    # as removed too; (0, 0) for counts
    raw_lo: Fraction = Fraction(0)
    raw_hi: Fraction = Fraction(0)
    # AVG's centred sum: the index of its count measure; the removed mass is then of the plain
    # sum, kept plain partial = centred partial + mid · count partial
    count_index: int | None = None
    # groups the cap is split over: 1 when a unit's groups are counted in order against one cap
    # C (ungrouped, or ranked groups: a window per unit); K when the declared keys leave at most
    # K <= G groups and nothing is ranked: C/K per group, no window (over_cap then has L1 <= K)
    split: int = 1
    # the columns of the measure's argument with declared numeric bounds: the units with a kept
    # value outside them are counted (``outside``); () when none (counts, capped columns)
    declared: tuple[str, ...] = ()
    # one row per unit and the clamp at the declared range (a ``clamp: auto`` that kept it):
    # bounding removes nothing, given the declared range the outside count checks. The
    # estimate is still drawn and charged as planned (the plan is made before the clamp is
    # chosen), but it is known to be 0: the interval and the words leave it out (newcomer22
    # #2: AVG(birth_year) over one row per patient, clamped at its declared 2,025, was given
    # [1975.9, 2025.0] and 'clamping cut off about 831,110 of birth_year', all of it noise)
    nothing_removed: bool = False
    # AVG's value mass is measured from this base (its declared low end, >= 0): the removed
    # mass of (value - base) over the rows left out, so a removed row's part is at most
    # hi - base, not hi (AVG(birth_year) declared 1,920 to 2,025: 105 a row, not 2,025), and
    # the truth is (kept plain sum + base x removed rows + removed mass) / (kept + removed rows)
    base: Fraction = Fraction(0)

    @property
    def group_cap_steps(self) -> int:
        """The cap a unit's removed steps meet in one group when the cap is split."""
        return max(1, self.cap_steps // self.split)

    @property
    def l1_cap(self) -> Fraction:
        """What one unit moves ``dropped`` by in L1, in the measure's units: C, or K times the
        per-group cap where that is more (C/K rounded up to one step: a cap of 4 rows over 5
        groups is 1 row in each, 5 in all)."""
        return max(self.cap_steps, self.group_cap_steps * self.split) * self.grid

    @property
    def raw_clamp(self) -> bool:
        """True when the raw values need a column of their own: a SUM clamped narrower than
        declared, or AVG's centred sum (its raw partial is a plain sum)."""
        m = self.measure
        if m.kind == "sum_centered":
            return True
        return m.kind == "sum" and (self.raw_lo, self.raw_hi) != (m.lo, m.hi)

    @property
    def key(self) -> str:
        return self.measure.key

    @property
    def cap(self) -> Fraction:
        """C in the measure's units (a multiple of the grid)."""
        return self.cap_steps * self.grid


def _grid(cap: Fraction) -> Fraction:
    """A power of two with cap / grid between 2**20 and 2**21 (a value-free, exact step)."""
    if cap <= 0:
        return Fraction(1)
    return Fraction(2) ** (floor_log2(Fraction(cap)) - GRID_BITS)


def direction(m: Measure, lo: Fraction | None = None, hi: Fraction | None = None) -> int:
    """+1 / -1 when bounding can only lower / raise measure ``m`` (a SUM: when its values'
    declared range [lo, hi] and its clamp range lie on one side of 0); 0 when it can move it both
    ways (centred sums, sums of mixed sign)."""
    if m.kind in ("count_rows", "count_values", "count_units"):
        return 1
    if m.kind == "sum":
        lo, hi = (m.lo if lo is None else lo), (m.hi if hi is None else hi)
        if lo >= 0 and m.lo >= 0:
            return 1
        if hi <= 0 and m.hi <= 0:
            return -1
    return 0


def declared_range(a: Analysis, m: Measure) -> tuple[Fraction, Fraction]:
    """The range of a SUM's argument from the declared bounds (the measure's own when the
    argument has none, e.g. a literal)."""
    from dpsql.sql.sensitivity import value_range

    r = value_range(m.arg, a.column) if m.arg is not None else None
    return (r.lo, r.hi) if r is not None else (m.lo, m.hi)


_MEMO: dict[int, tuple[Analysis, BoundingStats | None, tuple[BiasTarget, ...]]] = {}
_MEMO_SIZE = 256


def bias_targets(a: Analysis, stats: BoundingStats | None = None) -> tuple[BiasTarget, ...]:
    """:func:`targets_of`, kept for the analysis object ``a`` itself (the rewrite and the plan
    ask for one statement's targets several times): an entry holds ``a`` (so its id is not
    reused while it lives) and is used for that very object with equal ``stats`` only. ``a``
    is frozen, and the targets a function of ``a`` and ``stats`` alone."""
    hit = _MEMO.get(id(a))
    if hit is not None and hit[0] is a and hit[1] == stats:
        return hit[2]
    out = targets_of(a, stats)
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    _MEMO[id(a)] = (a, stats, out)
    return out


SQL_TYPING = frozenset(
    {
        "integer_keys",
        "integer_values",
        "hashed_keys",
        "hashed_key_types",
        "unit_type",
        "row_value_types",
    }
)
"""The fields of :class:`Analysis` that only say how the SQL is typed (from the zero-row
probes): none of them is read by :func:`targets_of`."""


def share_targets(a: Analysis, typed: Analysis) -> None:
    """Let ``typed``, a copy of ``a`` that differs from it in :data:`SQL_TYPING` fields only
    (the bounded SQL's typed analysis), use the targets already worked out for ``a`` (with no
    ``stats``) instead of working them out again."""
    hit = _MEMO.get(id(a))
    if hit is None or hit[0] is not a or hit[1] is not None:
        return
    if any(
        getattr(a, f.name) != getattr(typed, f.name)
        for f in fields(a)
        if f.name not in SQL_TYPING and getattr(a, f.name) is not getattr(typed, f.name)
    ):
        return  # differs elsewhere: worked out for itself
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    _MEMO[id(typed)] = (typed, None, hit[2])


def targets_of(a: Analysis, stats: BoundingStats | None = None) -> tuple[BiasTarget, ...]:
    """The measures of ``a`` whose removed mass the private SQL measures (in measure order):
    those a COUNT or SUM statistic reads alone, when bounding moves them one way only.

    None for row-level privacy (nothing is bounded), for the row path (COUNT(DISTINCT x),
    quantiles, mode), for joins of several private tables with fixed R (each is capped at R
    before the join; with ``auto`` R at a wider P, dpsql.sql.join_cap, whose removal is stated
    as an assumption, and the raw partials are those of the P-capped join) and
    for rows known to be one per unit (``one_row_per_unit``: a per-unit derived table;
    ``unique_unit``: the catalog proves it) the bounds drop no row and no group: only a SUM (or
    AVG's centred sum) clamped narrower than declared (``clamp: auto``) still loses mass there,
    and only those are measured (an AVG's rows then need no estimate: none is dropped).
    """
    if a.private.row_privacy:
        return ()
    if not decomposable(a):
        return quantile_targets(a, stats)
    if sum(1 for _, _, p in a.sources if p is not None) > 1 and not a.pre_join_rows:
        return ()  # each table capped at R before the join: the raw partials would miss it
    factor = (stats.removed_cap if stats and stats.removed_cap else None) or CAP_FACTOR
    r = a.max_rows
    wanted = {s.measures[0] for s in a.statistics if s.func in ("count", "sum", "count_distinct")}
    out = list(_avg_targets(a, Fraction(factor), wanted))
    for i, m in enumerate(a.measures):
        if any(t.index == i for t in out):
            continue
        raw = declared_range(a, m) if m.kind == "sum" else (Fraction(0), Fraction(0))
        s = direction(m, *raw) if m.kind == "sum" else direction(m)
        if m.kind == "count_units" and not needs_group_rank(a):
            continue  # every unit counts once in each of its groups: nothing is removed
        if s and m.key in wanted:
            # a unit loses at most R·c per group, or a whole group (1) for COUNT(DISTINCT unit);
            # with an L1 cap L over its groups (Measure.total), C = factor · L over them all
            per_unit = r * m.per_row() if m.total is None else min(r * m.per_row(), m.total)
            cap = Fraction(factor) * (a.max_groups if m.kind == "count_units" else per_unit)
            grid = Fraction(1) if m.integral else _grid(cap)
            steps = max(1, math.floor(cap / grid))
            out.append(BiasTarget(i, m, s, steps, grid, raw[0], raw[1]))
    if a.one_row_per_unit or a.unique_unit:
        # one row per unit: no row beyond R, no group beyond G; only clamping removes mass
        out = [
            replace(t, nothing_removed=not _clamps_narrower(t))
            for t in out
            if _clamps_narrower(t) or _auto_clamped(a, t)
        ]
        if not out:
            return ()
    out.sort(key=lambda t: t.index)
    out = [replace(t, declared=declared_columns(a, t.measure)) for t in out]
    k = _key_combinations(a)
    return tuple(replace(t, split=k) for t in out) if k > 1 else tuple(out)


_ARITHMETIC = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Paren,
    exp.Neg,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Cast,
    exp.DataType,
)


def declared_columns(a: Analysis, m: Measure) -> tuple[str, ...]:
    """The columns of a SUM's (or AVG's centred sum's) argument clamped into declared numeric
    bounds (not a per-unit derived table's capped columns, whose cap is said elsewhere), in the
    order the argument reads them; () unless the argument is arithmetic over columns and
    literals, where a value outside its bounds always enters the sum (not in a CASE branch or a
    FILTER a row may skip: its value would be counted as outside though never summed)."""
    if m.kind not in ("sum", "sum_centered") or m.arg is None:
        return ()
    if not all(isinstance(n, _ARITHMETIC) for n in m.arg.walk()):
        return ()
    out: dict[str, None] = {}
    for c in m.arg.find_all(exp.Column):
        col = a.column(c)
        if col is None or col.bounds is None or col.temporal or c.name in a.capped_columns:
            continue
        out.setdefault(c.name, None)
    return tuple(out)


def _auto_clamped(a: Analysis, t: BiasTarget) -> bool:
    """A SUM (or AVG's centred sum) of a column with ``clamp: auto`` still at its declared range:
    its clamp is chosen when the statement runs (:mod:`dpsql.execute.auto_bounds`), after the
    answer's cost is reserved, so the plan keeps the estimate it will need then (the same
    releases, the same cost; it measures 0 if the choice keeps the declared range)."""
    m = t.measure
    if m.kind not in ("sum", "sum_centered") or not isinstance(m.arg, exp.Column):
        return False
    col = a.column(m.arg)
    return col is not None and col.bounds is not None and col.clamp == "auto"


def _clamps_narrower(t: BiasTarget) -> bool:
    """A SUM (or AVG's centred sum) clamped into a range narrower than its declared one
    (``clamp: auto``): clamping may remove value mass even with one row per unit."""
    return t.measure.kind in ("sum", "sum_centered") and (t.raw_lo, t.raw_hi) != (
        t.measure.lo,
        t.measure.hi,
    )


def _key_combinations(a: Analysis) -> int:
    """K when a GROUP BY over declared ``keys:`` lists leaves K <= G groups (nothing ranked),
    else 1."""
    if not a.group_keys or needs_group_rank(a):
        return 1
    k = 1
    for g in a.group_keys:
        k *= len(set(g.keys or ()))
    return max(1, k)


def _avg_targets(a: Analysis, factor: Fraction, wanted: set[str]) -> list[BiasTarget]:
    """For AVG over values declared >= 0: its count (rows removed) and its centred sum (the
    removed rows' value mass above the declared low end ``lo``, and what clamping cut off), so
    its interval can cover (kept sum + lo x removed rows + removed) / (kept + removed rows).
    Values of mixed sign: no estimate (the notice says so)."""
    out: list[BiasTarget] = []
    index = {m.key: i for i, m in enumerate(a.measures)}
    r = a.max_rows
    for s in a.statistics:
        if s.func != "avg" or len(s.measures) != 2:
            continue
        ci, ni = index[s.measures[0]], index[s.measures[1]]
        c, n = a.measures[ci], a.measures[ni]
        lo, hi = declared_range(a, replace(c, kind="sum"))
        if c.kind != "sum_centered" or n.kind != "count_values" or lo < 0 or c.lo < 0:
            continue
        if any(t.index == ci for t in out):
            continue
        # the clamp range (chosen or declared), from the declared low end: each removed row's
        # part of the mass is its value less that base (centred on the range, not on 0); with
        # rows one per unit none is removed, the mass is what clamping cut off: from 0
        base = Fraction(0) if a.one_row_per_unit or a.unique_unit else lo
        cap = factor * r * max(abs(c.lo - base), abs(c.hi - base))
        grid = _grid(cap)
        steps = max(1, math.floor(cap / grid))
        out.append(BiasTarget(ci, c, 1, steps, grid, lo, hi, ni, base=base))
        if n.key not in wanted and not any(t.index == ni for t in out):
            out.append(BiasTarget(ni, n, 1, max(1, math.floor(factor * r)), Fraction(1)))
    return out


def quantile_targets(a: Analysis, stats: BoundingStats | None = None) -> tuple[BiasTarget, ...]:
    """MEDIAN / PERCENTILE of all the rows (no GROUP BY, one private table, rows bounded per
    unit): its interval ends rank E = ``END_ROWS`` R rows of a unit (:func:`end_rows`; the
    answer ranks R), and the rows past E are counted per unit up to C = ``CAP_FACTOR`` E, so
    that the ends can be moved past them (:func:`dpsql.execute.selected_measures.quantile_ends`).

    In the ranked rows (:func:`dpsql.sql.rewrite.rank_rows.rank_rows`, one window per unit: a
    unit's rows numbered 1, 2, ...), ``dropped`` counts the non-NULL values numbered E + 1 ..
    E + C: min(C, the unit's values past E) for a unit with at most E + C rows, between 0 and
    C for any unit (L1 sensitivity C, grid 1); ``over_cap`` the rows numbered E + C + 1, one per
    unit with more than E + C rows (sensitivity 1): the units whose rows the count may miss.
    MIN and MAX (q 0 or 1) keep their one end without it (:mod:`dpsql.execute.disowned`)."""
    if (
        needs_group_rank(a)
        or unranked(a)
        or a.one_row_per_unit
        or a.capped_columns
        or sum(1 for _, _, p in a.sources if p is not None) > 1
    ):
        return ()
    factor = (stats.removed_cap if stats and stats.removed_cap else None) or CAP_FACTOR
    steps = max(1, math.floor(Fraction(factor) * END_ROWS * a.max_rows))
    # by group (declared keys, K <= G combinations: no group is ranked away, so a unit's rows
    # are all in its groups): the cap is split over the K groups, C/K in each (the window
    # numbers a unit's rows per group), so one unit still moves the counts by C and K in L1
    k = _key_combinations(a)
    return tuple(
        BiasTarget(i, m, 1, steps, Fraction(1), split=k)
        for i, m in enumerate(a.measures)
        if m.kind == "quantile" and m.quantile is not None and 0 < m.quantile < 1
    )


END_ROWS = 4
"""A quantile target's interval ends rank up to ``END_ROWS`` R rows of a unit (R for its
answer): fewer rows left out for the count to move the ends past, for a utility of sensitivity
4R (:func:`end_rows`)."""


def end_rows(a: Analysis, m: Measure) -> int:
    """The rows of a unit a quantile's interval ends rank: ``END_ROWS`` R for a quantile target
    (:func:`quantile_targets`), else R (the rows its answer ranks)."""
    if any(t.measure is m or t.key == m.key for t in bias_targets(a)):
        return END_ROWS * a.max_rows
    return a.max_rows


def unranked(a: Analysis) -> bool:
    """Rows not bounded per unit: each row is its own unit (``privacy_unit: row``), or the
    catalog proves one row per unit (``unique_unit``); a unit then lies in one group."""
    return a.private.row_privacy or a.unique_unit


def statistic_target(
    targets: tuple[BiasTarget, ...], measures: tuple[str, ...], func: str
) -> BiasTarget | None:
    """The target whose bias moves a statistic: COUNT and SUM of one measure only."""
    if func not in ("count", "sum", "count_distinct") or len(measures) != 1:
        return None
    return next((t for t in targets if t.key == measures[0]), None)


@dataclass(frozen=True)
class BiasPlan:
    """The releases estimating one target's removed mass (pure epsilon, Laplace)."""

    target: BiasTarget
    dropped: Laplace  # sensitivity C (L1 over groups), on the target's grid
    over_cap: Laplace  # sensitivity 1 (split: K)
    outside: Laplace | None = None  # sensitivity 1 (split: K); None when not measured
    # the fixed-default fallback (Analysis.fell_back): a COUNT's or one-signed SUM's released
    # value of this target is its kept answer plus this estimate (dpsql.execute.bias.corrected),
    # its interval centred on it (dpsql.execute.bias.target_widths)
    adds: bool = False

    @property
    def cost(self) -> Cost:
        extra = [self.outside.cost] if self.outside is not None else []
        return sequential([self.dropped.cost, self.over_cap.cost, *extra])

    @property
    def key(self) -> str:
        return self.target.key


def corrected_targets(a: Analysis, targets: tuple[BiasTarget, ...]) -> frozenset[str]:
    """The keys of the targets whose statistic's column adds its estimate at the fixed-default
    fallback (``a.fell_back``): a COUNT, a one-signed SUM or a COUNT(DISTINCT unit) of one
    measure (:func:`statistic_target`); an AVG keeps the ratio of its kept parts, its interval
    the estimates (docs/accuracy.md, "The fallback's column"). Empty without a fallback."""
    if not a.fell_back:
        return frozenset()
    keys = set()
    for s in a.statistics:
        t = statistic_target(targets, s.measures, s.func)
        if t is not None and t.sign and t.measure.kind != "quantile" and not t.nothing_removed:
            keys.add(t.key)
    return frozenset(keys)


def bias_plans(
    targets: tuple[BiasTarget, ...], epsilon: Fraction, adds: frozenset[str] = frozenset()
) -> tuple[BiasPlan, ...]:
    """Split ``epsilon`` (the statement's share for bias) over the targets' two releases;
    ``adds``: the keys of the targets whose estimate the released value adds (the fallback).

    Every value released is an integer number of grid steps (the SQL counts in steps), so no
    rounding slack is added to the sensitivities.
    """
    if not targets:
        return ()
    each = epsilon / len(targets)
    out = []
    for t in targets:
        alarms = each * (1 - DROPPED_SHARE)
        outside = alarms * OUTSIDE_SHARE if t.declared else Fraction(0)
        k = Fraction(t.split)
        out.append(
            BiasPlan(
                t,
                Laplace(t.l1_cap, each * DROPPED_SHARE, t.grid),
                Laplace(k, alarms - outside, Fraction(1)),
                Laplace(k, outside, Fraction(1)) if outside else None,
                t.key in adds,
            )
        )
    return tuple(out)

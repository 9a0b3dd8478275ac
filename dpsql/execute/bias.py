"""Error bars that include what contribution bounding removed, and the accuracy notice.

For a COUNT or one-signed SUM (a bias target, :mod:`dpsql.sql.bias`) the truth T of a group is
the bounded value B plus the removed mass D (>= 0 for counts and SUMs of non-negative values).
The released B' = B + noise is within w_B of B on each side, and the released D' (the removed
mass of units within the cap C) below D + w_D+ and above D - w_D-, alpha split over these four
one-sided tails (:func:`target_widths`: the last, which alone can lift the lower end above the
answer, at 1e-6 of it at 95%). If no unit lost more than
C, then with probability >= 1 - alpha (union bound)::

    B' - w_B + max(0, D' - w_D-)  <=  T  <=  B' + w_B + max(0, D' + w_D+)

(for a SUM that is not an integer measure on grid 1 the lower end keeps B' - w_B: its removed
mass is rounded up, so D' is only an upper bound: :func:`exact_steps`). The interval is asymmetric, reaching further on the side bounding
pulled the answer from. The answer B' itself is unchanged. The notice that explains it in words is
:mod:`dpsql.execute.accuracy_text`. The over-cap count tells whether the
assumption is plainly false: when some group's count is above 0 beyond its noise, the notice says
that the interval does not cover the truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.dp.mechanisms import Laplace, Mechanism
from dpsql.dp.noise_source import NoiseSource
from dpsql.errors import InternalError
from dpsql.sql.analysis import Analysis, Statistic
from dpsql.sql.bias import BiasPlan, BiasTarget
from dpsql.sql.plan import Plan

Interval = tuple[float, float]
ALARM = 1e-3  # the over-cap alarm's false-alarm probability per answer


OUTSIDE_ALARM = 1e-6  # the outside-the-declared-range warning's false-alarm probability


@dataclass(frozen=True)
class Removed:
    """One target's released removed mass per group (measure units, >= 0 means 'removed on the
    side of its sign'), over-cap unit counts and (when measured) the count of units with a value
    outside the declared bounds, one total over all groups (an array of one, empty with no
    group)."""

    plan: BiasPlan
    dropped: np.ndarray
    over_cap: np.ndarray
    outside: np.ndarray | None = None

    def outside_alarm(self) -> float | None:
        """About how many units have a kept value outside the declared bounds (the released
        total over all groups), when it is above 0 beyond its noise; else None. Threshold: with
        no such unit, the total passes it with probability at most OUTSIDE_ALARM (one-sided
        tail of its noise: 2 P(noise > t) = 1 - level)."""
        x = self.outside
        if x is None or not x.size:
            return None
        return outside_alarm(self.plan.outside, float(x.sum()))


def outside_alarm(mech: Laplace | None, total: float | None) -> float | None:
    """About how many units have a kept value outside the declared bounds (a released total
    over all groups), when it is above 0 beyond its noise; else None. Threshold: with no such
    unit, the total passes it with probability at most OUTSIDE_ALARM (one-sided tail of its
    noise: 2 P(noise > t) = 1 - level)."""
    if mech is None or total is None:
        return None
    if total <= mech.half_width(1 - 2 * OUTSIDE_ALARM):
        return None
    return total


def release_alarms(
    plan: Plan, columns: Sequence[Sequence[object]], noise: NoiseSource
) -> dict[str, float]:
    """The VARIANCE alarms' outside counts (:class:`dpsql.sql.alarms.AlarmPlan`), by measure key:
    each one total over the released rows' counts (``columns[j]``: the j-th alarm's), one noise
    draw; none without a released row."""
    out: dict[str, float] = {}
    for x, col in zip(plan.alarms, columns, strict=True):
        if col:
            total = np.array([sum(_float(v) for v in col)], dtype=np.float64)
            out[x.key] = float(noise.add(x.outside, total)[0])
    return out


def outside_plans(plan: Plan) -> tuple[BiasPlan, ...]:
    """The bias plans whose outside count the SQL measures, in column order."""
    return tuple(b for b in plan.bias if b.outside is not None)


def _float(x: object) -> float:
    """A removed-mass cell of the bounded SQL's row (numeric or int from PostgreSQL) as a float."""
    if isinstance(x, (int, float, Fraction, Decimal)):
        return float(x)
    raise InternalError(f"a removed-mass column held a {type(x).__name__}")


def release_removed(
    plan: Plan,
    columns: Sequence[tuple[Sequence[object], Sequence[object]]],
    noise: NoiseSource,
    outside: Sequence[Sequence[object]] = (),
) -> dict[str, Removed]:
    """Noisy removed mass per target from its two SQL columns per row (grid steps, unit counts).

    ``columns[i]`` holds target i's (dropped steps, over-cap count) for every released row;
    ``outside[j]`` the outside counts of the j-th target that measures them (:func:`outside_plans`).
    """
    out: dict[str, Removed] = {}
    xs = dict(zip((b.target.key for b in outside_plans(plan)), outside, strict=True))
    for b, (steps, over) in zip(plan.bias, columns, strict=True):
        grid = float(b.target.grid)
        d = np.array([_float(x) for x in steps], dtype=np.float64) * grid
        k = np.array([_float(x) for x in over], dtype=np.float64)
        x = None
        if b.outside is not None:
            # one total over the groups: the groups' counts move by at most the sensitivity in
            # L1 when one unit comes or goes, so their sum does too (one noise draw, not one a
            # group: a warning needs the same number of units outside however many groups)
            x = np.array([sum(_float(v) for v in xs[b.target.key])], dtype=np.float64)
        if d.size:
            d, k = noise.add(b.dropped, d), noise.add(b.over_cap, k)
            if b.outside is not None and x is not None:
                x = noise.add(b.outside, x)
            if b.target.nothing_removed:  # known to be 0: drawn as planned, not used
                d, k = np.zeros_like(d), np.zeros_like(k)
        elif x is not None:
            x = x[:0]
        out[b.target.key] = Removed(b, d, k, x)
    return out


@dataclass(frozen=True)
class TargetWidths:
    """One-sided reaches of a bias target's interval: the answer's noise (``b``, the same
    below and above it) and the removed mass's below and above its release (``d_lo`` is 0 and
    unused when the removed mass is rounded up, off grid 1)."""

    b: float
    d_lo: float
    d_hi: float


RAISE_SHARE = 1 / 50_000
"""The share of alpha the removed mass's lower tail gets (1e-6 at 95%): the only tail that can
lift an interval's lower end above the answer, so it holds only on near-certain evidence."""


def target_widths(answer: Mechanism, b: BiasPlan, level: float) -> TargetWidths:
    """Split 1 - ``level`` over the interval's one-sided tails.

    The interval (module docstring) misses the truth only if one of its tails does: the
    answer's noise above or below its reach, the removed mass above its upper reach or, on
    grid 1, below its lower reach. Union bound: any split of alpha over those tails that sums
    to alpha keeps the level. A tail of probability a of a symmetric noise is its two-sided
    half-width at 1 - 2a.

    The removed mass's lower tail gets ``RAISE_SHARE`` of alpha (1e-6 at 95%), not a share in
    proportion to its noise. It is the only tail that lifts the lower end: max(0, D' - w_D-)
    is above 0 only when the removed-mass estimate is far above its reach below, and when
    little was removed in a group (its noise, C / epsilon_d with C = 4x what the bounds keep of
    one unit in ONE group, often dwarfs it: an L1 cap over all groups, the demo's 1,067 rows
    of noise scale against about 130 rows removed in a month) that happens only when its noise
    is in that tail, and then the interval lies above the answer and misses the truth. At an
    alpha share in proportion to its noise (1.2% on the demo) 12 of 13 such rows missed: the
    level held on average, never for an interval above its answer. At 1e-6 the lower end rises
    above the answer only when bounding plainly removed that much (a few thousand rows in the
    demo's month, at R = 1 about 40% of a 7,500-row count). The rest of alpha goes to the
    answer's two tails and the removed mass's upper tail in proportion to their noise's
    half-widths at a common level (public, fixed before any release; Lagrange: the sum of the
    reaches, each about scale · ln(1/share), is least), so the removed mass's upper reach gets
    nearly all of it.
    """
    alpha = 1 - level
    if b.target.nothing_removed:  # nothing to reach for: all of alpha to the answer's noise
        return TargetWidths(answer.half_width(level), 0.0, 0.0)
    ref = 1 - alpha / 2
    rb, rd = answer.half_width(ref), b.dropped.half_width(ref)
    lower_d = exact_steps(b.target)
    if b.adds and lower_d:
        # the column adds the estimate (the fixed-default fallback): its interval is centred on
        # it, both of the estimate's tails weighed by its noise as the answer's are (the lower
        # end lifts with the column, not above it)
        tails = 2 * rb + 2 * rd
        if not (math.isfinite(tails) and rb > 0 and rd > 0):
            ab = a_d = alpha / 4
        else:
            ab, a_d = alpha * rb / tails, alpha * rd / tails
        w_d = b.dropped.half_width(1 - 2 * a_d)
        return TargetWidths(answer.half_width(1 - 2 * ab), w_d, w_d)
    a_down = alpha * RAISE_SHARE if lower_d else 0.0
    rest = alpha - a_down
    tails = 2 * rb + rd
    if not (math.isfinite(tails) and rb > 0 and rd > 0):  # no scale to weigh by: equal shares
        ab, a_up = rest / 3, rest / 3
    else:
        ab, a_up = rest * rb / tails, rest * rd / tails
    d_lo = b.dropped.half_width(1 - 2 * a_down) if lower_d else 0.0
    return TargetWidths(answer.half_width(1 - 2 * ab), d_lo, b.dropped.half_width(1 - 2 * a_up))


def target_interval(
    s: Statistic,
    value: float,
    answer: Mechanism,
    r: Removed,
    row: int,
    level: float,
    widths: TargetWidths | None = None,
) -> Interval | None:
    """The interval of statistic ``s`` (a COUNT or SUM of target ``r``, released as ``value``)
    at ``level``: the answer's noise and the removed mass, alpha split over their tails
    (:func:`target_widths`; ``widths``: those already computed, the same for every row).
    Bounding pulled the answer towards 0 on the side of the target's sign: the interval
    reaches further on the other side."""
    from dpsql.sql.postprocess import derive

    w = widths if widths is not None else target_widths(answer, r.plan, level)
    iv = derive(s, [value], [w.b])[1]
    if iv is None:
        return None
    d = float(r.dropped[row])
    up, down = max(0.0, d + w.d_hi), max(0.0, d - w.d_lo) if exact_steps(r.plan.target) else 0.0
    lo, hi = (iv[0] + down, iv[1] + up) if r.plan.target.sign > 0 else (iv[0] - up, iv[1] - down)
    if s.func in ("count", "count_distinct"):
        lo, hi = max(0.0, lo), max(0.0, hi)
    return lo, hi


def corrected(s: Statistic, value: float, r: Removed, row: int) -> float:
    """The released value of a COUNT or one-signed SUM whose column adds its left-out estimate
    (the fixed-default fallback: ``BiasPlan.adds``): the kept answer ``value`` plus the estimate
    in the direction bounding pulled it from, the estimate taken at 0 where its noise put it
    below (nothing is ever left out below 0: the projection onto what is possible is never
    further from the truth, and keeps the value inside its interval,
    :func:`target_interval`, at every level). Post-processing of two releases."""
    d = max(0.0, float(r.dropped[row]))
    return value + d if r.plan.target.sign > 0 else value - d


def added_columns(plan: Any) -> tuple[str, ...]:
    """The statistics (their SQL) whose column adds the left-out estimate (``BiasPlan.adds``:
    the fixed-default fallback), of a plan or, for grouping sets, of any of its sets' plans."""
    plans = [sp.plan for sp in plan.sets] if hasattr(plan, "sets") else [plan]
    out: dict[str, None] = {}
    for p in plans:
        for s in p.analysis.statistics:
            b = target_of(s, p)
            if b is not None and b.adds:
                out.setdefault(s.sql, None)
    return tuple(out)


def parts(s: Statistic, plan: Plan) -> int:
    """How many intervals the statistic's interval rests on (its measures, plus the removed
    mass when it is a bias target, plus removed mass and rows for AVG): each holds at level
    1 - alpha/parts."""
    avg = avg_targets(s, plan)
    if avg is not None:
        return 4 if avg[1] is not None else 3
    return len(s.measures) + (1 if target_of(s, plan) is not None else 0)


def avg_targets(s: Statistic, plan: Plan) -> tuple[BiasPlan, BiasPlan | None] | None:
    """AVG's (plain value mass, rows) removed-mass releases, when estimated; rows None when
    the rows are one per unit (none is dropped: only the clamp removes mass)."""
    if s.func != "avg" or len(s.measures) != 2:
        return None
    c, n = plan.bias_plan(s.measures[0]), plan.bias_plan(s.measures[1])
    if c is None or c.target.count_index is None:
        return None
    if n is None and not one_row(plan.analysis):
        return None
    return c, n


def one_row(a: Analysis) -> bool:
    """The rows are one per unit (a per-unit derived table, or the catalog proves it)."""
    return a.one_row_per_unit or a.unique_unit


@dataclass(frozen=True)
class AvgWidths:
    """AVG's parts' reaches (:func:`avg_widths`): the centred sum's and the count's two-sided
    levels, and the reaches of the removed mass and rows above and below their releases
    (``math.inf`` below: that lower end is 0, not used; all 0 for rows when none is dropped)."""

    sum_level: float
    count_level: float
    mass_up: float
    mass_down: float
    rows_up: float
    rows_down: float


def exact_steps(t: BiasTarget) -> bool:
    """The target's released steps are its removed mass exactly (an integer measure on grid 1:
    counts, integer SUMs), not rounded up (``CEIL`` per unit and group), so its release less
    its lower reach is a lower bound too. AVG's value mass (kept plain partial: the centred one
    plus mid times the count, scaled at R / n) is rounded up on every grid: an upper bound only."""
    return t.grid == 1 and t.measure.integral and t.count_index is None


def avg_widths(
    answer: tuple[Mechanism, Mechanism], avg: tuple[BiasPlan, BiasPlan | None], level: float
) -> AvgWidths:
    """Split 1 - ``level`` over AVG's interval's one-sided tails (:func:`avg_interval`).

    The truth (P + D) / (N + E) (P the kept plain sum, D, E the removed mass and rows) rises
    with D and falls with E. The interval misses only if one of its tails does: the centred
    sum's and the count's noise below or above their reaches, the removed mass above its upper
    reach, the removed rows above or below theirs (the mass has no lower reach: rounded up,
    :func:`exact_steps`). Union bound: any split summing to alpha keeps the level.

    The removed rows' lower tail gets ``RAISE_SHARE`` of alpha (1e-6 at 95%), as a COUNT's
    removed mass's does (:func:`target_widths`): with the mass at 0 below, the lower end is at
    most the answer (every lower corner has D = 0), and only E's lower end, max(0, E' - w_E-),
    can pull the upper end below the answer; when few rows were removed that happens only when
    E's noise is in this tail. Such an interval must hold the truth as often as any other, so
    it lies below its answer only on near-certain evidence that bounding removed that many
    rows (at a low mean). The rest of alpha goes to the other six tails in proportion to how far
    each one's noise can move the ratio, in value units (public weights, fixed before any
    release): the sum's and the mass's half-widths, the count's times the clamp's half-range,
    the removed rows' times the clamp's largest magnitude (a ratio near mid moves by about
    (mean - mid) / N per kept row, by about mean / N per removed row); Lagrange (each reach
    about scale · ln(1/share)): shares proportional to the reaches minimise their sum. Before,
    each part's two tails shared its part alike: the rows' and, on grid 1, the mass's lower
    tails at about 1.2% each (docs/accuracy.md, "AVG: which tails")."""
    c, n = avg
    alpha = 1 - level
    if c.target.nothing_removed and n is None:  # one row per unit, nothing clamped off:
        # the sum's and the count's noise alone, alpha split over their four tails alike
        return AvgWidths(1 - alpha / 2, 1 - alpha / 2, 0.0, math.inf, 0.0, 0.0)
    ref = 1 - alpha / (4 if n is not None else 3)
    m = c.target.measure
    half = float(m.hi - m.lo) / 2
    base = c.target.base  # a removed row weighs its value less the base (BiasTarget.base)
    top = float(max(abs(m.lo - base), abs(m.hi - base)))
    ws, wn = answer[0].half_width(ref), answer[1].half_width(ref) * half
    wd = c.dropped.half_width(ref)
    we = n.dropped.half_width(ref) * top if n is not None else 0.0
    a_down = alpha * RAISE_SHARE if n is not None else 0.0
    rest = alpha - a_down
    tails = 2 * ws + 2 * wn + wd + we
    used = [ws, wn, wd] + ([we] if n is not None else [])
    if not (math.isfinite(tails) and all(w > 0 for w in used)):  # no scale: equal shares
        k = 5 + (1 if n is not None else 0)
        a_s, a_n, a_d, a_e = rest / k, rest / k, rest / k, (rest / k if n is not None else 0.0)
    else:
        a_s, a_n, a_d, a_e = (rest * w / tails for w in (ws, wn, wd, we))
    rows_up = n.dropped.half_width(1 - 2 * a_e) if n is not None else 0.0
    rows_down = n.dropped.half_width(1 - 2 * a_down) if n is not None else 0.0
    return AvgWidths(
        1 - 2 * a_s, 1 - 2 * a_n, c.dropped.half_width(1 - 2 * a_d), math.inf, rows_up, rows_down
    )


def _range(r: Removed | None, row: int, up: float, down: float) -> tuple[float, float]:
    """The removed mass's interval in a group: [max(0, D - down), max(0, D + up)] (``down``
    inf: 0 below); [0, 0] when nothing is removed (None)."""
    if r is None:
        return 0.0, 0.0
    d = float(r.dropped[row])
    return max(0.0, d - down), max(0.0, d + up)


def avg_interval(
    s: Statistic,
    values: tuple[float, float],
    widths: tuple[float, float],
    removed: tuple[Removed, Removed | None],
    row: int,
    w: AvgWidths,
) -> Interval | None:
    """AVG's interval including what bounding and clamping removed: the truth is
    (kept plain sum + base · removed rows + removed mass) / (kept rows + removed rows), kept
    plain sum = centred sum + mid · rows, the removed mass that above the base
    (:attr:`dpsql.sql.bias.BiasTarget.base`). Each of the four parts within its interval (the sum and count at ``widths``,
    the removed mass and rows at ``w``'s reaches: :func:`avg_widths`), the ratio's range over
    that box is at its corners (it is monotone in each part), clamped to the declared range."""
    import itertools

    c, n = removed
    t = c.plan.target
    mid, base = float(t.measure.mid), float(t.base)
    (sc, nk), (ws, wn) = values, widths
    if nk < 1:
        return None
    ns = (max(1.0, nk - wn), nk + wn)
    corners = [
        (a + mid * b + base * e + d) / (b + e)
        for a, b, d, e in itertools.product(
            (sc - ws, sc + ws),
            ns,
            _range(c, row, w.mass_up, w.mass_down),
            _range(n, row, w.rows_up, w.rows_down),
        )
    ]
    lo, hi = float(t.raw_lo), float(t.raw_hi)
    return max(lo, min(corners)), min(hi, max(corners))


def target_of(s: Statistic, plan: Plan) -> BiasPlan | None:
    if s.func not in ("count", "sum", "count_distinct") or len(s.measures) != 1:
        return None
    return plan.bias_plan(s.measures[0])


def round_interval(s: Statistic, iv: Interval | None, noise_hw: float) -> Interval | None:
    """Interval ends rounded outwards: counts and integer sums to integers (the truth is one),
    other values to a step of about 1/100 of the noise's half-width, never inwards."""
    if iv is None or not all(map(math.isfinite, iv)):
        return iv
    lo, hi = iv
    if s.func in ("count", "count_distinct") or s.pg_type == "int8":
        return float(math.ceil(lo - 1e-9)), float(math.floor(hi + 1e-9))
    return round_outwards(iv, noise_hw)


def round_outwards(iv: Interval, noise_hw: float) -> Interval:
    """``iv``'s ends rounded outwards to a multiple of a power of ten about 1/100 of
    ``noise_hw`` (unchanged when that is 0 or not finite)."""
    lo, hi = iv
    if not (noise_hw > 0 and math.isfinite(noise_hw) and math.isfinite(lo) and math.isfinite(hi)):
        return iv
    e = step_exponent(noise_hw)
    return _outward(lo, e, True), _outward(hi, e, False)


def step_exponent(noise_hw: float) -> int:
    """The one presentation step of the project: 10 ** this, a power of ten about 1/100 of a
    noise half-width ``noise_hw`` (> 0, finite): interval ends round outwards to it, released
    values to its nearest multiple (:func:`round_nearest`)."""
    return math.floor(math.log10(noise_hw)) - 2


def round_nearest(v: Any, noise_hw: float) -> Any:
    """A released value (float or numeric, keeping its type) to the nearest multiple of the
    step of ``noise_hw`` (:func:`step_exponent`): the digits below it are noise. Integers,
    booleans, NULL, text, non-finite values, and any value when ``noise_hw`` is 0 or not
    finite, unchanged. The value moves by at most half a step (<= ``noise_hw`` / 200); a value
    inside an interval rounded outwards at the same step stays inside it."""
    if isinstance(v, bool) or not isinstance(v, (float, Decimal)):
        return v
    if not (noise_hw > 0 and math.isfinite(noise_hw) and math.isfinite(float(v))):
        return v
    e = step_exponent(noise_hw)
    if isinstance(v, Decimal):
        if v.as_tuple().exponent >= e:  # type: ignore[operator]
            return v  # no digit below the step (ROUND(x, 1) stays 75.5, not 75.50)
        try:
            if e < 0:
                return v.quantize(Decimal(1).scaleb(e), rounding=ROUND_HALF_EVEN)
            # a step of 1 or more: to an integral value, no exponent notation
            return v.scaleb(-e).to_integral_value(ROUND_HALF_EVEN).scaleb(e).quantize(Decimal(1))
        except InvalidOperation:  # more digits than the context holds: as it came
            return v
    out = round(v, -e)
    return float(out)


def _outward(x: float, exponent: int, down: bool) -> float:
    """x rounded to a multiple of 10**exponent, down or up, as the nearest float not inwards."""
    q = Decimal(x).scaleb(-exponent).to_integral_value(ROUND_FLOOR if down else ROUND_CEILING)
    y = float(q.scaleb(exponent))
    if down and y > x:
        y = math.nextafter(y, -math.inf)
    if not down and y < x:
        y = math.nextafter(y, math.inf)
    return y

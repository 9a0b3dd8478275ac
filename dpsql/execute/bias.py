"""Error bars that include what contribution bounding removed, and the accuracy notice.

For a COUNT or one-signed SUM (a bias target, :mod:`dpsql.sql.bias`) the truth T of a group is
the bounded value B plus the removed mass D (>= 0 for counts and SUMs of non-negative values).
The released B' = B + noise is within w_B of B, and the released D' (the removed mass of units
within the cap C) within w_D of it, each with probability 1 - alpha/2. If no unit lost more than
C, then with probability >= 1 - alpha (union bound)::

    B' - w_B + max(0, D' - w_D)  <=  T  <=  B' + w_B + max(0, D' + w_D)

(for a SUM on a finer grid than 1 the lower end keeps B' - w_B: its removed mass is rounded up,
so D' is only an upper bound). The interval is asymmetric, reaching further on the side bounding
pulled the answer from. The answer B' itself is unchanged. The over-cap count tells whether the
assumption is plainly false: when some group's count is above 0 beyond its noise, the notice says
that the interval does not cover the truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction

import numpy as np

from dpsql.dp.noise_source import NoiseSource
from dpsql.errors import InternalError
from dpsql.sql.analysis import Analysis, Statistic, needs_group_rank
from dpsql.sql.bias import BiasPlan
from dpsql.sql.plan import Plan

Interval = tuple[float, float]
ALARM = 1e-3  # the over-cap alarm's false-alarm probability per answer


@dataclass(frozen=True)
class Removed:
    """One target's released removed mass per group (measure units, >= 0 means 'removed on the
    side of its sign') and over-cap unit counts."""

    plan: BiasPlan
    dropped: np.ndarray
    over_cap: np.ndarray


def _float(x: object) -> float:
    """A removed-mass cell of the bounded SQL's row (numeric or int from PostgreSQL) as a float."""
    if isinstance(x, (int, float, Fraction, Decimal)):
        return float(x)
    raise InternalError(f"a removed-mass column held a {type(x).__name__}")


def release_removed(
    plan: Plan, columns: Sequence[tuple[Sequence[object], Sequence[object]]], noise: NoiseSource
) -> dict[str, Removed]:
    """Noisy removed mass per target from its two SQL columns per row (grid steps, unit counts).

    ``columns[i]`` holds target i's (dropped steps, over-cap count) for every released row.
    """
    out: dict[str, Removed] = {}
    for b, (steps, over) in zip(plan.bias, columns, strict=True):
        grid = float(b.target.grid)
        d = np.array([_float(x) for x in steps], dtype=np.float64) * grid
        k = np.array([_float(x) for x in over], dtype=np.float64)
        if d.size:
            d, k = noise.add(b.dropped, d), noise.add(b.over_cap, k)
        out[b.target.key] = Removed(b, d, k)
    return out


def widen(s: Statistic, iv: Interval | None, r: Removed, row: int, level: float) -> Interval | None:
    """The interval of statistic ``s`` (a COUNT or SUM of target ``r``) at ``level`` widened by
    the removed mass's interval at ``level`` (each part at its own level; see the module)."""
    if iv is None:
        return None
    t = r.plan.target
    w = r.plan.dropped.half_width(level)
    d = float(r.dropped[row])
    up, down = max(0.0, d + w), max(0.0, d - w) if t.grid == 1 else 0.0
    lo, hi = (iv[0] + down, iv[1] + up) if t.sign > 0 else (iv[0] - up, iv[1] - down)
    if s.func in ("count", "count_distinct"):
        lo, hi = max(0.0, lo), max(0.0, hi)
    return lo, hi


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


def _range(r: Removed | None, row: int, level: float) -> tuple[float, float]:
    """The removed mass's interval in a group: [max(0, D - w) (0 off grid 1), max(0, D + w)];
    [0, 0] when nothing is removed (None)."""
    if r is None:
        return 0.0, 0.0
    w = r.plan.dropped.half_width(level)
    d = float(r.dropped[row])
    return (max(0.0, d - w) if r.plan.target.grid == 1 else 0.0), max(0.0, d + w)


def avg_interval(
    s: Statistic,
    values: tuple[float, float],
    widths: tuple[float, float],
    removed: tuple[Removed, Removed | None],
    row: int,
    level: float,
) -> Interval | None:
    """AVG's interval including what bounding and clamping removed: the truth is
    (kept plain sum + removed mass) / (kept rows + removed rows), kept plain sum = centred sum +
    mid · rows. Each of the four parts within its interval (level each), the ratio's range over
    that box is at its corners (it is monotone in each part), clamped to the declared range."""
    import itertools

    c, n = removed
    t = c.plan.target
    mid = float(t.measure.mid)
    (sc, nk), (ws, wn) = values, widths
    if nk < 1:
        return None
    ns = (max(1.0, nk - wn), nk + wn)
    corners = [
        (a + mid * b + d) / (b + e)
        for a, b, d, e in itertools.product(
            (sc - ws, sc + ws), ns, _range(c, row, level), _range(n, row, level)
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
    if not (noise_hw > 0 and math.isfinite(noise_hw)):
        return iv
    e = math.floor(math.log10(noise_hw)) - 2
    return _outward(lo, e, True), _outward(hi, e, False)


def _outward(x: float, exponent: int, down: bool) -> float:
    """x rounded to a multiple of 10**exponent, down or up, as the nearest float not inwards."""
    q = Decimal(x).scaleb(-exponent).to_integral_value(ROUND_FLOOR if down else ROUND_CEILING)
    y = float(q.scaleb(exponent))
    if down and y > x:
        y = math.nextafter(y, -math.inf)
    if not down and y < x:
        y = math.nextafter(y, math.inf)
    return y


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1000 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:.3g}"


def accuracy_notes(
    a: Analysis, plan: Plan, removed: dict[str, Removed], confidence: float, rows: int
) -> tuple[str, ...]:
    """The accuracy summary, one line per statistic with a value interval: level, noise
    half-width, estimated removed mass and whether the interval holds."""
    unit = "rows" if a.private.row_privacy else f"units ({a.private.privacy_unit})"
    out: list[str] = []
    for s in a.statistics:
        if s.func in ("quantile", "mode"):
            continue
        level = 1 - (1 - confidence) / parts(s, plan)
        mechs = [plan.measure_plan(m).mechanism for m in s.measures]
        hws = [m.half_width(level) for m in mechs if hasattr(m, "half_width")]
        noise = f"noise ±{_fmt(hws[0])}" if len(hws) == 1 else "noise of its parts"
        head = f"{s.sql}: {confidence:.0%} interval: {noise}"
        avg = avg_targets(s, plan)
        if avg is not None:
            mass = removed[avg[0].target.key]
            total = float(np.clip(mass.dropped, 0, None).sum()) if rows else 0.0
            where = "" if not a.group_keys else " in all groups together"
            w_mass = _fmt(avg[0].dropped.half_width(level))
            if avg[1] is None:
                left = (
                    f"noise and what clamping cut off (about {_fmt(total)} of value{where}, "
                    f"±{w_mass} per group; one row per {a.private.privacy_unit}: no row is "
                    "dropped)"
                )
            else:
                count_ = removed[avg[1].target.key].dropped
                count = float(np.clip(count_, 0, None).sum()) if rows else 0.0
                left = (
                    "noise and what the contribution bounds and clamping left out (about "
                    f"{_fmt(count)} rows and {_fmt(total)} of value{where}; "
                    f"±{_fmt(avg[1].dropped.half_width(level))} rows and ±{w_mass} of value "
                    "per group)"
                )
            out.append(
                f"{s.sql}: {confidence:.0%} interval: {left}; "
                + _over_cap(mass, confidence, rows, unit)
            )
            continue
        b = target_of(s, plan)
        kind = plan.measure_plan(s.measures[0]).measure.kind
        if kind == "count_keys":
            out.append(
                f"{s.sql}: {confidence:.0%} interval over the declared keys: a key counts when "
                f"its noisy row count passes the noise level (rows per key ±{_fmt(hws[0])}); "
                "keys with few rows may be missed (the interval allows for them)"
            )
            continue
        if b is None:
            out.append(f"{head}; {_unestimated(a, s)}")
            continue
        r = removed[b.target.key]
        total = float(np.clip(r.dropped, 0, None).sum()) if rows else 0.0
        w = b.dropped.half_width(level)
        side = "above" if b.target.sign > 0 else "below"
        where = "" if not a.group_keys else " in all groups together"
        line = (
            f"{head}; the contribution bounds left out about {_fmt(total)}{where} "
            f"(±{_fmt(w)} per group): the interval reaches that much further {side} the answer"
        )
        out.append(line + "; " + _over_cap(r, confidence, rows, unit))
    return tuple(out)


def _over_cap(r: Removed, confidence: float, rows: int, unit: str) -> str:
    t = r.plan.target
    cap = _fmt(float(t.cap))
    if t.split > 1:  # the cap is split evenly over the declared groups
        cap = f"{_fmt(float(t.group_cap_steps * t.grid))} in one group"
    if not rows:
        return f"it assumes no one of the {unit} lost more than {cap} to the bounds"
    level = 1 - (1 - confidence) / rows
    w = r.plan.over_cap.half_width(level)
    total = max(0.0, float(r.over_cap.sum()))
    # "does NOT cover" only when some group's count is above 0 beyond its noise at 1 - 1e-3
    # (over all groups): a false alarm at most once in a thousand answers
    if float(r.over_cap.max()) - r.plan.over_cap.half_width(1 - ALARM / rows) > 0:
        return (
            f"it does NOT cover the truth: about {_fmt(total)} {unit} lost more than {cap} each "
            "to the bounds, and what they lost beyond that is not counted (raise "
            "max_rows_per_unit / max_groups_per_unit, or narrow the query)"
        )
    return (
        f"it holds if no one of the {unit} lost more than {cap} to the bounds (estimated "
        f"{_fmt(total)} did, ±{_fmt(w)} per group)"
    )


def _unestimated(a: Analysis, s: Statistic) -> str:
    if a.private.row_privacy:
        return "no contribution bounds apply"
    if one_row(a) and not _clamped_narrower(a, s):
        return f"one row per {a.private.privacy_unit}: the bounds remove nothing (no estimate is needed)"
    if s.func == "count_distinct" and _counts_units(a, s) and not needs_group_rank(a):
        return "the contribution bounds remove no unit from a group here (G >= the groups)"
    if s.func == "count_distinct":
        return (
            "the interval covers the noise only, NOT what the contribution bounds left out "
            "(they can only lower it): the truth may be above it"
        )
    return (
        "the interval covers the noise only, NOT what the contribution bounds and clamping "
        "changed (they may move it either way, by an amount not estimated): the truth may lie "
        "outside it"
    )


def _clamped_narrower(a: Analysis, s: Statistic) -> bool:
    """Some value of ``s`` is clamped into a range narrower than its declared one (``clamp:
    auto``): clamping moves it even with one row per unit."""
    from dpsql.sql.bias import declared_range

    for key in s.measures:
        m = a.measure(key)
        if m.kind in ("sum", "sum_centered", "sum_sq_centered") and m.arg is not None:
            if declared_range(a, m) != (m.lo, m.hi):
                return True
    return False


def _counts_units(a: Analysis, s: Statistic) -> bool:
    return any(m.key == s.measures[0] and m.kind == "count_units" for m in a.measures)

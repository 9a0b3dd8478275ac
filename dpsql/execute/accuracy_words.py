"""The words an accuracy notice (:mod:`dpsql.execute.accuracy_text`) states about the
contribution bounds: the level, what the bounds keep of one unit, the assumption an interval
rests on (no unit lost more than the cap) or the over-cap alarm that retracts it, and an
estimate within its noise said as no clear estimate (issue 16)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpsql.execute.accuracy_few import declare_advice
from dpsql.execute.bias import ALARM, Removed, one_row
from dpsql.execute.bounds_text import clamp_text, col_name, fmt, qty_text, rows_kept
from dpsql.sql.analysis import Analysis
from dpsql.sql.bias import BIAS_SHARE, CAP_FACTOR, BiasTarget, end_rows
from dpsql.sql.wording import plural

ESTIMATE_SHARE = "a tenth" if BIAS_SHARE == Fraction(1, 10) else f"{BIAS_SHARE}"  # of the epsilon


def level_text(confidence: float) -> str:
    """A confidence level as a percentage, never rounded to a level it is not: '95%', '99.8%',
    '99.99%' (was '{:.0%}': 0.998 printed as '100%', a claim of certainty)."""
    for digits in range(4, 16):
        text = f"{100 * confidence:.{digits}g}"
        if float(text) < 100 or confidence >= 1:
            break
    return f"{text}%"


def unclear_text(qty: str, est: float, noise: float) -> str:
    """Why an estimate of what the bounds left out says nothing clear: it is within its noise
    (or below 0 by more: noise too, as the bounds only ever leave out)."""
    if est < -noise:
        return (
            f"its noisy estimate came out at {qty}, below 0 by more than its noise, ±{fmt(noise)}"
        )
    return f"its noisy estimate, {qty}, is within its noise, ±{fmt(noise)}"


def total_removed(dropped: np.ndarray) -> float:
    """The removed mass over all groups: the sum of the groups' released estimates, at 0 if
    below. Each group's estimate is the truth plus noise of mean 0, so their sum is too; each
    clipped at 0 first (as before) added about half a noise scale per group where little was
    removed (the demo's 11 months: 'about 6,436 rows' against about 1,400, at a scale of
    1,067 a group)."""
    return max(0.0, float(np.asarray(dropped, dtype=np.float64).sum()))


def percent(x: float) -> str:
    """A ratio as a percentage with about two significant digits: 0.23%, 2.1%, 24%, 106%."""
    p = 100 * x
    return f"{p:.0f}%" if p >= 10 else f"{p:.2g}%"


def bounds_keep(a: Analysis, t: BiasTarget) -> str:
    """What the bounds keep of target ``t``, in the user's terms."""
    m, unit = t.measure, a.private.privacy_unit
    if m.kind == "count_units":
        return f"each {unit} in at most {plural(a.max_groups, 'group')}"
    if m.total is not None:
        return f"at most {qty_text(a, m, float(m.total))} per {unit} over all groups"
    parts_ = [] if one_row(a) else [rows_kept(a)]
    if m.kind in ("sum", "sum_centered"):
        c = clamp_text(m, float(t.raw_lo), float(t.raw_hi))
        if c:
            parts_.append(c)
    return "; ".join(parts_) or f"one row per {unit}"


def _lost(a: Analysis, t: BiasTarget) -> str:
    """The assumption's cap: 'lost more than C' in the user's terms."""
    if t.measure.kind == "count_units":
        return f"was left out of more than {plural(t.cap_steps, 'group')}"
    return f"lost more than {_cap(a, t)}"


def _cap(a: Analysis, t: BiasTarget) -> str:
    if t.split > 1:  # the cap is split evenly over the declared groups
        return f"{qty_text(a, t.measure, float(t.group_cap_steps * t.grid), float(t.base))} in one group"
    return qty_text(a, t.measure, float(t.cap), float(t.base))


def _cap_source(a: Analysis, t: BiasTarget) -> str:
    """Where the assumption's cap comes from, in words that agree with its figure: C is
    CAP_FACTOR times what the bounds keep of one unit (dpsql.sql.bias.bias_targets), and with
    the cap split over K declared groups, C / K in each group (at least one step)."""
    m, unit = t.measure, a.private.privacy_unit
    if m.kind == "count_units":
        return f"{CAP_FACTOR}x the {plural(a.max_groups, 'group')} the bounds keep of one {unit}"
    kept = qty_text(a, m, float(t.cap) / CAP_FACTOR, float(t.base))
    scope = " over all groups" if m.total is not None else (" in a group" if a.group_keys else "")
    text = f"{CAP_FACTOR}x the {kept} the bounds keep of one {unit}{scope}"
    if t.split > 1:
        # the total first, as a total: "(4x the 8 rows ... in a group, 32 rows, shared ...)"
        # beside "6 rows in one group" read as 32 in each group (newcomer24 #11)
        total = qty_text(a, m, float(t.cap), float(t.base))
        text = f"its share of {total} in all, {text}, split over the {t.split} groups a {unit} can reach"
        if t.group_cap_steps * t.split > t.cap_steps:
            text += f", at least {qty_text(a, m, float(t.grid), float(t.base))} in each"
    return text


def alarmed(r: Removed, rows: int) -> bool:
    """Some group's over-cap count is above 0 beyond its noise (at 1 - 1e-3 over all groups:
    a false alarm at most once in a thousand answers)."""
    if not rows or not r.over_cap.size:
        return False
    return float(r.over_cap.max()) - r.plan.over_cap.half_width(1 - ALARM / rows) > 0


def assumption(a: Analysis, r: Removed, t: BiasTarget, rows: int) -> str:
    unit, lost = a.private.privacy_unit, _lost(a, t)
    if alarmed(r, rows):
        n = max(0.0, float(r.over_cap.sum()))
        auto = "auto" in (a.private.max_rows_per_unit, a.private.max_groups_per_unit)
        total = a.private.max_rows_per_unit_total
        what = (
            f"The policy's max_rows_per_unit_total ({total}) is below what some {unit} have: "
            "ask the data owner to raise it, or ask about fewer rows."
            if total is not None and not a.auto_bounded
            else "The bounds were chosen from the data (auto): raise dpsql.epsilon for a surer "
            f"choice, {declare_advice(a)}, or ask about fewer rows."
            if auto
            else "Raise max_rows_per_unit / max_groups_per_unit in the policy, or ask about "
            "fewer rows."
        )
        return (
            f"But it does NOT cover the truth: about {fmt(n)} {unit} {lost} (each), beyond "
            f"what it allows for. {what}"
        )
    return f"It assumes no {unit} {lost} ({_cap_source(a, t)}){_pre_join(a)}."


def quantile_assumption(a: Analysis, r: Removed, t: BiasTarget, rows: int) -> str:
    """A quantile of all the rows (dpsql.sql.bias.quantile_targets): its over-cap count says
    some units have more rows than its interval allows for (E ranked, C counted past them):
    the words of :func:`assumption`'s alarm in rows a unit has."""
    unit = a.private.privacy_unit
    most = end_rows(a, t.measure) + t.group_cap_steps
    n = max(0.0, float(r.over_cap.sum()))
    what = assumption(a, r, t, rows).split("beyond what it allows for. ", 1)[-1]
    return (
        f"But it does NOT cover the truth: about {fmt(n)} {unit} have more than "
        f"{plural(most, 'row')}{' in a group' if a.group_keys else ''} (each), beyond what it "
        f"allows for. {what}"
    )


def _pre_join(a: Analysis) -> str:
    """A join of private tables with ``auto`` R: each table keeps P rows per unit before the
    join (dpsql.sql.join_cap), which the removed-mass estimate does not see: the assumption."""
    if not a.pre_join_rows:
        return ""
    p, unit = a.pre_join_rows, a.private.privacy_unit
    return (
        f", and that none has more than {plural(p, 'row')} in one of the joined tables (each "
        f"keeps at most {plural(p, 'row')} per {unit} before the join; what that leaves out is "
        "not estimated)"
    )


def nothing_left_out(a: Analysis, t: BiasTarget) -> str:
    """The bounds left nothing out of target ``t`` (:attr:`BiasTarget.nothing_removed`): one
    row per unit, and the clamp chosen from the data kept the declared range."""
    m, unit = t.measure, a.private.privacy_unit
    rng = f"{fmt(float(t.raw_lo))} to {fmt(float(t.raw_hi))}"
    return (
        f"the bounds left nothing out (one row per {unit}: none dropped; {col_name(m)} clamped "
        f"to its declared range, {rng}: no value cut)."
    )


JUST_PAST = 2
"""An estimate of what the bounds left out is stated as "about N" only past this many times its
noise's half-width at the level (where nothing was left out, once in about 800 releases at
95%); between once and this, as a noisy number just past its noise (newcomer25 #16: "about
1,370 rows" where none was left out, its 95% reach 1,250)."""


def just_past(qty: str, noise: float) -> str:
    """An estimate once to :data:`JUST_PAST` times past its noise, in words that do not state
    it as a fact (newcomer25 #16), as :func:`unclear_text` words one within it."""
    return f"its noisy estimate, {qty}, is just past its noise, ±{fmt(noise)}"

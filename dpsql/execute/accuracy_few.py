"""When the released values cannot check the interval's one assumption (issue 16).

A COUNT's or one-signed SUM's interval holds what bounding removed only up to a cap per unit:
it assumes no unit lost more than C (``CAP_FACTOR`` times what the bounds keep of one unit).
The over-cap count (released) says when that is plainly false. But a unit beyond the cap can
hide ANY amount (400 rows, or 10^6), and a few such units stay below every release's noise:
group privacy, no DP release can tell a database from the same plus one unit with 10^6 rows.
So the interval's far end (above the answer for a COUNT or a SUM of values >= 0) is an
assumption, never a measurement, wherever at least one unit beyond the cap fits the releases:

* ``k``, the most units that can be beyond the cap without the releases showing it
  (:func:`reach`): the smaller of the over-cap count's upper reach and the removed-mass
  estimate's upper reach over C (a unit beyond the cap adds C to that estimate), released
  values clipped at 0 and public widths only. ``k < 1``: the releases rule such a unit out.

Design (docs/accuracy.md, "When the interval columns are NULL"): of the two honest choices
(a rule from released evidence of heavy tails, or no far end wherever ``k >= 1``), this is the
second, because the evidence is not there. On the demo at epsilon 1 the 5 "whales" (400 rows
each, beyond the cap C = 4R) hold half of ``WHERE category = 'travel' AND June``'s rows and
41% of travel's SUM(amount); their over-cap count is 5 under noise of about +-40 and they add
5 C to a removed-mass estimate of noise +-300 to +-8,000: no released value shows them, and a
rule that waited for evidence would keep the confident upper end that missed the truth by
1.6-4x (issue 16's newcomer21 #1, 4, 7, 23, 31; SUM by category missed travel in 10 of 10).
Nothing in the releases tells those rows from ordinary ones, so a rule that flags them must
flag ordinary rows too. Hence:

* bounds chosen from the data (``auto`` R or G, :func:`chosen`): C is four times what the
  data suggested, nobody declared it. Every row with ``k >= 1`` loses its far end
  (:func:`open_rows`; ``_high`` NULL for a COUNT, its ``_low`` still holds: the bounds only
  lower the answer, dpsql.execute.disowned), and the notice says so for those rows in plain
  words (:func:`open_text`). Under ``auto`` that is nearly every COUNT and SUM row: ``k`` is
  below 1 only when the over-cap count's noise is under one unit (epsilon in the tens). It is
  said up front in docs/accuracy.md.
* a join of private tables capped before the join (``pre_join_rows``): what that cap leaves out
  is not estimated at all, so the far end goes in every row, whatever ``k``.
* fixed bounds (the policy declares max_rows_per_unit / max_groups_per_unit as numbers): the
  assumption is the data owner's, and the far end stays with the assumption stated as one and
  its limit (:func:`reach_text`: *Up to 39 user_id could have lost more than that without the
  estimates showing it (what they lost beyond it is not in the interval)*). Where the answer
  could all come from units the releases cannot see (``A <= k K``, ``K`` the most one unit
  adds to a group's kept answer: :func:`unseen`) the far end goes there too, as before.

Everything here is a released value, a public bound or the policy, so it costs no privacy.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from dpsql.execute.bias import Removed, TargetWidths
from dpsql.execute.bounds_text import col_name, fmt, qty_text
from dpsql.execute.disowned import Disown
from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bound_types import DECLARED_TOTAL
from dpsql.sql.auto_bounds import declared_total, policy_choices
from dpsql.sql.bias import CAP_FACTOR, BiasTarget, declared_range
from dpsql.sql.wording import plural

SHARE = 1.0  # the share of the answer the unseen units must be able to make up: all of it


def reach(t: BiasTarget, r: Removed, tw: TargetWidths, confidence: float) -> list[float]:
    """Per output row: the most units that can be beyond the cap without the releases showing
    it, k = min(the over-cap count's upper reach, the removed-mass estimate's upper reach / C)
    (released values, clipped at 0, and public widths only)."""
    cap_g = float(t.group_cap_steps * t.grid) if t.split > 1 else float(t.cap)
    if cap_g <= 0:
        return []
    over_reach = r.plan.over_cap.half_width(confidence)
    dropped = np.asarray(r.dropped, dtype=np.float64).reshape(-1)
    over = np.asarray(r.over_cap, dtype=np.float64).reshape(-1)
    out = []
    for i in range(max(dropped.size, over.size)):
        d = float(dropped[i]) if i < dropped.size else 0.0
        oc = float(over[i]) if i < over.size else 0.0
        out.append(min(max(oc, 0.0) + over_reach, (max(d, 0.0) + tw.d_hi) / cap_g))
    return out


def unseen(
    t: BiasTarget, r: Removed, tw: TargetWidths, answers: np.ndarray, confidence: float
) -> list[tuple[int, float, float]]:
    """Per output row whose answer could rest on units beyond the cap that the releases cannot
    see: (row, fewest units the answer can come from, most units beyond the cap unseen). From
    released values (answers, removed mass, over-cap counts) and public bounds only."""
    kept_one = float(t.cap) / CAP_FACTOR  # the most one unit adds to a group's kept answer
    if kept_one <= 0:
        return []
    ks = reach(t, r, tw, confidence)
    out: list[tuple[int, float, float]] = []
    a = np.asarray(answers, dtype=np.float64).reshape(-1)
    for i, v in enumerate(a):
        if not math.isfinite(v) or i >= len(ks):
            continue
        k = ks[i]
        if k < 1:
            continue  # not one unit beyond the cap fits the releases
        kept = max(t.sign * float(v), 0.0)
        if kept * SHARE <= k * kept_one:
            out.append((i, max(1.0, math.ceil(kept / kept_one)), math.floor(k)))
    return out


def chosen(a: Analysis, t: BiasTarget) -> bool:
    """True when target ``t``'s cap rests on contribution bounds ``auto`` chose and that can
    leave rows out (R, G, a unit's total over groups; G alone for a count of units:
    Analysis.auto_bounded): no number the data owner declared. False where the catalog proves
    one row per unit (nothing is bounded) or the rows are one per unit."""
    if a.unique_unit or a.one_row_per_unit:
        return False
    if declared_total(a) is not None:  # R, G and the L1 cap from the policy's total (free,
        # not in auto_bounded); a bound still chosen from the data (a ratio's R) is there
        if t.measure.kind == "count_units":
            return "groups" in a.auto_bounded
        return bool(a.auto_bounded)
    # still ``auto`` in the policy table: not resolved (its default stands: 1), not declared
    tables = [p for _, _, p in a.sources if p is not None] or [a.private]
    groups = "groups" in a.auto_bounded or (a.grouped and any(p.auto_groups for p in tables))
    if t.measure.kind == "count_units":  # (only G leaves a unit out of a group's count)
        return groups
    return groups or bool(a.auto_bounded) or any(p.auto_rows for p in tables)


def open_rows(
    a: Analysis, t: BiasTarget, ks: list[float], answers: np.ndarray
) -> list[tuple[int, float, float]]:
    """The output rows whose far end is an assumption only (module docstring): under bounds
    chosen from the data, those with ``k >= 1`` unit beyond the cap fitting the releases
    (``ks``: :func:`reach`'s); every row after a join capped before joining. As
    :func:`unseen`'s: (row, 0, k)."""
    a_ = np.asarray(answers, dtype=np.float64).reshape(-1)
    rows = [i for i, v in enumerate(a_) if math.isfinite(v)]
    if a.pre_join_rows:
        return [(i, 0.0, ks[i] if i < len(ks) else 0.0) for i in rows]
    if not chosen(a, t):
        return []
    return [(i, 0.0, ks[i]) for i in rows if i < len(ks) and ks[i] >= 1]


def open_text(
    a: Analysis, t: BiasTarget, found: list[tuple[int, float, float]], ks: list[float], rows: int
) -> str:
    """The notice's sentence for :func:`open_rows`' rows ('' when none): which rows, why their
    far end is not shown, and how to get one."""
    if not found:
        return ""
    unit = a.private.privacy_unit
    far = "above" if t.sign > 0 else "below"
    end = "upper" if t.sign > 0 else "lower"
    if t.measure.kind in ("count_rows", "count_values"):
        held = "however many rows they hold"
    elif t.measure.kind == "count_units":
        held = "however many groups they are in"
    else:
        held = f"however much {col_name(t.measure)} they hold"
    return (
        f"{_unchecked(a, t, found, rows)} No private count can tell a few {unit} from none, "
        f"{held}, so the truth can lie far beyond the interval {far} the answer: it gives no "
        f"{end} end there. To get one, {declare_advice(a)}: the assumption is then the "
        f"policy's, and the end is shown wherever no group's answer could all come from {unit} "
        "the releases cannot see (at a larger dpsql.epsilon, or over larger groups)."
    )


def avg_open_text(
    a: Analysis,
    t: BiasTarget,
    found: list[tuple[int, float, float]],
    rows: int,
    what: str = "the average",
    declared: tuple[float, float] | None = None,
) -> str:
    """An average's (or a quantile's: ``what``) sentence for :func:`open_rows`' rows ('' when
    none; ``t`` its value mass's or left-out rows' target, ``declared`` the column's declared
    range, by default ``t``'s). The units beyond the cap that the releases cannot see may have
    lost any number of rows, each anywhere in the declared range: their rows can pull the
    statistic to any point of it, up or down (newcomer30 F1: whales' in-range amounts, the truth
    2.3-2.6x above a shown ``_high``), so neither end holds there."""
    if not found:
        return ""
    unit = a.private.privacy_unit
    lo, hi = declared if declared is not None else (float(t.raw_lo), float(t.raw_hi))
    rng = f"{col_name(t.measure)}'s declared range {fmt(lo)} to {fmt(hi)}"
    return (
        f"{_unchecked(a, t, found, rows, 'any number of rows')} No private count can tell a few "
        f"{unit} from none, however many rows they hold, and their rows can pull {what} "
        f"anywhere in {rng}, so the truth can lie far beyond the interval, above or below "
        f"the answer: it gives neither end there. To get them, {declare_advice(a)}: the "
        "assumption is then the policy's, stated as one."
    )


def quantile_open(
    a: Analysis, sql: str, r: Removed, rows: int, confidence: float
) -> tuple[Disown, str] | None:
    """A quantile of all the rows whose left-out rows are counted up to a cap per unit
    (dpsql.sql.bias.quantile_targets): the rows where units the releases cannot see, beyond
    that cap, could pull it anywhere in its declared range (:func:`open_rows`, newcomer30 F1b),
    as a :class:`~dpsql.execute.disowned.Disown` of neither end and its notice line; None
    where there are none."""
    t = r.plan.target
    ks = reach(t, r, TargetWidths(0.0, 0.0, r.plan.dropped.half_width(confidence)), confidence)
    found = open_rows(a, t, ks, np.zeros(rows))
    if not found:
        return None
    lo, hi = declared_range(a, t.measure)
    unit = a.private.privacy_unit
    text = avg_open_text(a, t, found, rows, sql, (float(lo), float(hi)))
    head = f"{sql}: its interval assumes no {unit} has more rows than it counts past its ends."
    return Disown(frozenset(f[0] for f in found), "none"), head + text


def _unchecked(
    a: Analysis, t: BiasTarget, found: list[tuple[int, float, float]], rows: int, by: str = ""
) -> str:
    """The first sentence of :func:`open_text` and :func:`avg_open_text`: which rows the
    released values cannot check, why, and how many units could hide beyond the cap (each by
    ``by``: by default what ``t`` counts or adds)."""
    unit = a.private.privacy_unit
    where = (
        f"In {fmt(len(found))} of {plural(rows, 'group')} the released values cannot check it"
        if a.group_keys
        else "The released values cannot check it here"
    )
    if not by:  # what t counts or adds
        kinds = {"count_units": "groups", "count_rows": "rows", "count_values": "rows"}
        kind = kinds.get(t.measure.kind)
        by = f"any number of {kind}" if kind else "any amount"
    k = math.floor(max((f[2] for f in found), default=0.0))
    per = " in a group" if a.group_keys else ""
    why = (
        f": each joined table kept at most {plural(a.pre_join_rows, 'row')} per {unit} before "
        "the join, and what that left out is not estimated"
        if a.pre_join_rows
        else ": the bounds were chosen from the data (auto), not declared"
    )
    seen = (
        f", and up to {fmt(k)} {unit}{per} could have lost more than that, each by {by}, "
        "without any estimate showing it"
        if k >= 1
        else ""
    )
    return f" {where}{why}{seen}."


def declare_advice(a: Analysis) -> str:
    """What the data owner can declare so that an interval's far end rests on the policy (not
    what it declares already): for per-group counts and sums under ``auto``, the per-unit
    total (the shape ``auto`` uses, nothing spent choosing it); else R (and G) as numbers."""
    unit = a.private.privacy_unit
    tables = [p for _, _, p in a.sources if p is not None] or [a.private]
    # (chosen bounds are numbers in ``a``'s tables once applied: auto_bounded says which)
    if not a.pre_join_rows and declared_total(a) is None and "total" in a.auto_bounded:
        return (
            "ask the data owner to declare max_rows_per_unit_total in the policy (the most "
            f"rows one {unit} has in all: its bounds keep this shape and spend nothing "
            "choosing)"
        )
    rows_left = "rows" in a.auto_bounded or a.private.auto_rows
    if not (a.joins or a.sources) and declared_total(a) is None and rows_left and _total_fixes(a):
        # the same advice whatever the statement's neighbours (newcomer23 #3): declared R (and
        # G) would size every per-group COUNT of the table for R x G rows, a total keeps auto's
        # one cap over all groups where it applies and bounds R and G (free) elsewhere
        return (
            "ask the data owner to declare max_rows_per_unit_total in the policy (the most "
            f"rows one {unit} has in all: rows and groups per {unit} are then at most that, "
            "nothing spent choosing them; per-group COUNTs and SUMs asked without other "
            "aggregates keep one cap over all groups)"
        )
    rows = "rows" in a.auto_bounded or any(p.auto_rows for p in tables)
    groups = "groups" in a.auto_bounded or any(p.auto_groups for p in tables)
    auto = [
        name
        for name, left in (
            ("max_rows_per_unit", rows),
            ("max_groups_per_unit", a.grouped and groups),
        )
        if left
    ]
    if not auto:  # (not reached: an end is disowned so only under a bound chosen from data)
        auto = ["max_rows_per_unit"]
    return (
        f"ask the data owner to declare {' and '.join(auto)} in the policy as "
        f"{'a number' if len(auto) == 1 else 'numbers'}, no fewer than the most one {unit} has"
    )


def _total_fixes(a: Analysis) -> bool:
    """Whether a declared max_rows_per_unit_total would make ``a``'s R the policy's
    (:func:`dpsql.sql.auto_bounds.policy_choices` with one in place gives R by its rule). Not
    for a statement of averages, variances or standard deviations only (R stays chosen for their
    noise, at the median unit), nor for per-group ratios and quantiles over many groups (R = 1
    by :func:`dpsql.sql.auto_bounds.ratio_rows`): a declared total leaves their interval ends
    NULL, and the advice there is R (and G) as numbers (quant31: an AVG's notice asked for the
    total, and with it declared asked for max_rows_per_unit)."""
    auto: dict[str, object] = {"max_rows_per_unit_total": 1, "max_rows_per_unit": "auto"}
    if "groups" in a.auto_bounded:  # (chosen numbers are in ``a``'s table once applied)
        auto["max_groups_per_unit"] = "auto"
    probe = replace(a, private=a.private.model_copy(update=auto))
    return any(c.kind == "rows" and c.rule == DECLARED_TOTAL for c in policy_choices(probe))


def reach_text(a: Analysis, ks: list[float]) -> str:
    """The sentence after the assumption when :func:`unseen` is silent: how many units beyond
    the cap the releases could miss ('' when not one fits them)."""
    k = math.floor(max(ks, default=0.0))
    if k < 1:
        return ""
    unit = a.private.privacy_unit
    where = " in a group" if a.group_keys else ""
    return (
        f" Up to {fmt(k)} {unit}{where} could have lost more than that without the estimates "
        "showing it (what they lost beyond it is not in the interval)."
    )


def unseen_text(
    a: Analysis, t: BiasTarget, found: list[tuple[int, float, float]], rows: int
) -> str:
    """The notice's sentence for :func:`unseen`'s rows ('' when none)."""
    if not found:
        return ""
    unit = a.private.privacy_unit
    n = min(f[1] for f in found)
    k = max(f[2] for f in found)
    kept = qty_text(a, t.measure, float(t.cap) / CAP_FACTOR, float(t.base))
    cap_g = t.group_cap_steps * t.grid if t.split > 1 else t.cap
    lost = qty_text(a, t.measure, float(cap_g), float(t.base))
    what = "rows" if t.measure.kind in ("count_rows", "count_values") else col_name(t.measure)
    where = (
        f"In {fmt(len(found))} of {plural(rows, 'group')} the released values cannot check it: a "
        "group's answer"
        if a.group_keys
        else "The released values cannot check it here: this answer"
    )
    declared = _declared_names(a)
    if declared:  # never advise declaring what is declared (newcomer22 #8)
        fix = (
            f"The policy declares {declared}: the bounds keep that much of each {unit}, and "
            f"no release can tell whether some {unit} have more (a few {unit} can hide any "
            f"amount). To rule that out, raise dpsql.epsilon (the count of {unit} beyond the "
            "cap then speaks up), or ask about more of the data (a wider filter or fewer groups)."
        )
    else:
        fix = (
            f"To rule that out, {declare_advice(a)}, or raise dpsql.epsilon (the count of "
            f"{unit} beyond the cap then speaks up)."
        )
    return (
        f" {where} could all come from {fmt(n)} {unit} (the bounds keep at most "
        f"{kept} of each), while up to {fmt(k)} {unit} could each have lost more than "
        f"{lost} without the estimate showing it. If a few {unit} hold most of the {what} "
        f"this query selects, the truth can lie far beyond the interval. {fix}"
    )


def _declared_names(a: Analysis) -> str:
    """The contribution bounds ``a``'s table declares as numbers, as the policy spells them
    ('' when none): its per-unit total when it declares one (R and G are then at most it; an
    ``auto`` one resolved reads as a number here), else R and G."""
    p = a.private
    if p.max_rows_per_unit_total is not None:
        return f"max_rows_per_unit_total: {p.max_rows_per_unit_total}"
    out = [
        f"{name}: {value}"
        for name, value in (
            ("max_rows_per_unit", p.max_rows_per_unit),
            ("max_groups_per_unit", p.max_groups_per_unit if a.grouped else "auto"),
        )
        if isinstance(value, int)
    ]
    return ", ".join(out)

"""An AVG's accuracy line (issue 16): the noise of its sum and count, the rows and value mass
the bounds left out, why its interval spans most of the declared range when it does, and the
groups where it is NULL (:mod:`dpsql.execute.accuracy_text` builds the other lines)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpsql.dp.mechanisms import Gaussian, Laplace, Mechanism
from dpsql.execute.accuracy_few import avg_open_text, open_rows, reach, reach_text
from dpsql.execute.accuracy_words import (
    ESTIMATE_SHARE,
    alarmed,
    assumption,
    bounds_keep,
    level_text,
    nothing_left_out,
    total_removed,
    unclear_text,
)
from dpsql.execute.avg_unclear import clear_count, cut_range, left_out, unclear
from dpsql.execute.bias import Interval, Removed, TargetWidths, avg_widths
from dpsql.execute.bounds_text import col_name, fmt, rows_text
from dpsql.sql.analysis import Analysis, Statistic
from dpsql.sql.bias import BiasPlan
from dpsql.sql.plan import Plan
from dpsql.sql.wording import plural


def avg_line(
    a: Analysis,
    plan: Plan,
    s: Statistic,
    avg: tuple[BiasPlan, BiasPlan | None],
    removed: dict[str, Removed],
    confidence: float,
    rows: int,
    ivs: Sequence[Interval | None],
    noisy: Mapping[str, Any] | None,
) -> tuple[str, frozenset[int]]:
    """AVG: the noise of its sum and count, and the rows and value mass the bounds left out;
    when its interval spans most of the declared range, why and what to do. With the output
    rows whose interval holds neither end (:func:`dpsql.execute.accuracy_few.open_rows`: under
    bounds chosen from the data, units the releases cannot see can pull the average anywhere in
    its declared range; the caller disowns them)."""
    c, n = avg
    m0, m1 = (plan.measure_plan(m).mechanism for m in s.measures)
    if not isinstance(m0, (Laplace, Gaussian)) or not isinstance(m1, (Laplace, Gaussian)):
        return f"{s.sql}: an average released by a selection has no value interval", frozenset()
    aw = avg_widths((m0, m1), avg, confidence)
    t, unit, col = c.target, a.private.privacy_unit, col_name(c.target.measure)
    if t.base and n is not None:  # the removed rows' mass above the declared low end
        col = f"{col} above {fmt(float(t.base))}"
    mass = removed[t.key]
    where = " in all groups together" if a.group_keys else ""
    per = " in a group" if a.group_keys else ""
    total = total_removed(mass.dropped) if rows else 0.0
    wm = fmt(aw.mass_up)
    head = f"{s.sql}: {level_text(confidence)} interval: the noise of its sum and count"
    if n is None and t.nothing_removed:
        declared = (float(t.raw_lo), float(t.raw_hi))
        line = f"{head}; {nothing_left_out(a, t)}"
        line += _avg_why_wide(a, (m0, m1), s, (aw.sum_level, aw.count_level), ivs, noisy, declared)
        return line + avg_nulls(a, s, noisy, plan, confidence, ivs), frozenset()
    if n is None:
        est = float(np.asarray(mass.dropped[:rows], dtype=np.float64).sum()) if rows else 0.0
        own = mass.plan.dropped.half_width(confidence) * math.sqrt(max(rows, 1))
        said = (
            f"about {fmt(total)} of {col}{where}"
            if est > own
            else f"no clear estimate{where} ({unclear_text(f'{fmt(est)} of {col}', est, own)})"
        )
        line = (
            f"{head}, plus what clamping cut off (they keep {bounds_keep(a, t)}): {said} (up to "
            f"{wm} more{per} given that estimate's noise); one row per {unit}: no row is "
            "dropped. "
        )
    else:
        dropped = removed[n.target.key].dropped
        g = math.sqrt(max(rows, 1))
        est_rows = float(np.asarray(dropped[:rows], dtype=np.float64).sum()) if rows else 0.0
        est_mass = float(np.asarray(mass.dropped[:rows], dtype=np.float64).sum()) if rows else 0.0
        noise_rows = removed[n.target.key].plan.dropped.half_width(confidence) * g
        noise_mass = mass.plan.dropped.half_width(confidence) * g
        clear = [
            f"about {rows_text(est_rows)}" if est_rows > noise_rows else "",
            f"about {fmt(est_mass)} of {col}" if est_mass > noise_mass else "",
        ]
        unclear = [
            unclear_text(rows_text(est_rows), est_rows, noise_rows) if not clear[0] else "",
            unclear_text(f"{fmt(est_mass)} of {col}", est_mass, noise_mass) if not clear[1] else "",
        ]
        if all(clear):
            said = f"{clear[0]} and {clear[1]}{where}"
        elif any(clear):
            said = (
                f"{clear[0] or clear[1]}{where}, and no clear estimate of the "
                f"{'value mass' if clear[0] else 'rows'} ({unclear[1] or unclear[0]})"
            )
        else:
            said = f"no clear estimate{where} (of the rows: {unclear[0]}; of {col}: {unclear[1]})"
        line = (
            f"{head}, plus what the bounds left out (they keep {bounds_keep(a, t)}): {said}; the "
            f"interval allows for ±{fmt(aw.rows_up)} rows and up to {wm} more of {col}{per} "
            "given those estimates' noise. "
        )
    line += assumption(a, mass, t, rows)
    found: list[tuple[int, float, float]] = []
    if rows and not alarmed(mass, rows):  # how many units beyond the mass cap could hide
        ks = reach(t, mass, TargetWidths(0.0, 0.0, aw.mass_up), confidence)
        if noisy is not None and s.measures[0] in noisy:  # bounds chosen from the data: the
            # units the releases cannot see can pull the average anywhere in its range
            found = open_rows(a, t, ks, np.asarray(noisy[s.measures[0]])[:rows])
        line += avg_open_text(a, t, found, rows) or reach_text(a, ks)
    declared = (float(t.raw_lo), float(t.raw_hi))
    line += _avg_why_wide(a, (m0, m1), s, (aw.sum_level, aw.count_level), ivs, noisy, declared)
    answered = _clear_rows(plan, s, noisy, confidence, ivs)
    line += at_clamp(a, s, noisy, declared, answered) + avg_nulls(
        a, s, noisy, plan, confidence, ivs
    )
    return line, frozenset(f[0] for f in found)


_NULL_BELOW_ONE = ("avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp")


def avg_nulls(
    a: Analysis,
    s: Statistic,
    noisy: Mapping[str, Any] | None,
    plan: Plan | None = None,
    confidence: float = 0.95,
    ivs: Sequence[Interval | None] = (),
) -> str:
    """Groups whose AVG (VARIANCE, STDDEV) is NULL: their noisy row count, the statistic's last
    measure, came out below 1 (:func:`dpsql.sql.postprocess.derive`: no value), or, for an AVG,
    below its clear count (:func:`dpsql.execute.avg_unclear.clear_count`: its interval would
    leave an average in the middle anywhere in its range), the number the words state, or its
    interval came out spanning all of its range (:func:`dpsql.execute.avg_unclear.spans`: in
    ``ivs``, the released intervals, such a group's is None although its count passed)."""
    if noisy is None or len(s.measures) < 2 or s.func not in _NULL_BELOW_ONE:
        return ""
    if s.measures[-1] not in noisy:
        return ""
    counts = [float(v) for v in noisy[s.measures[-1]]]
    need = clear_count(plan, s, confidence) if plan is not None else None
    low = sum(1 for v in counts if v < (need or 1))
    wide = (  # NULL with a count past the clear count: its interval spanned the range
        sum(1 for v, iv in zip(counts, ivs, strict=True) if iv is None and v >= need)
        if need is not None and len(ivs) == len(counts)
        else 0
    )
    k = low + wide
    if not k:
        return ""
    where = f"in {k} of {plural(len(counts), 'group')}" if a.group_keys else ""
    what = "average" if s.func == "avg" else "spread"
    if need is None or plan is None:
        return (
            f" It is NULL {where}".rstrip()
            + f": the noisy count of rows there came out below 1, so no {what} is released "
            "(too few rows for this epsilon)." + nulls_first_note(a)
        )
    col = col_name(a.measure(s.measures[0]))
    there = " there" if a.group_keys else ""
    fewer = "group less finely" if a.group_keys else "ask about more rows (a wider filter)"
    rng = f"{col}'s range {fmt(float(s.lo))} to {fmt(float(s.hi))}"
    why = (  # what its interval holds (dpsql.execute.avg_unclear: all of it)
        f"its interval (the noise of its sum and count, and the estimate of what the bounds "
        f"left out, which takes a share of the {level_text(confidence)}) spans all of {rng} "
        "for an average in its middle"
        if left_out(plan, s)
        else f"the noise alone leaves an average anywhere in {rng}"
    )
    both = low and wide
    parts = [
        *(
            [
                f"{f'in {low} of them ' if both else ''}its noisy count of rows came out below "
                f"{need:,}{'' if both else there}, and with fewer rows than that {why} at this "
                "epsilon"
            ]
            if low
            else []
        ),
        *(
            [
                f"{f'in {wide} of them ' if both else ''}its interval came out spanning all of "
                f"{col}'s range {fmt(cut_range(plan, s)[0])} to {fmt(cut_range(plan, s)[1])}"
                f"{'' if both else there} though its noisy count of rows passed {need:,}"
            ]
            if wide
            else []
        ),
    ]
    falls = (  # the clear count's numbers, where some group fell below it
        f" (the rows it needs fall about as 1/epsilon: about {math.ceil(need / 2):,} at twice "
        f"this epsilon, {math.ceil(need / 4):,} at four times it)"
        if low
        else ""
    )
    return (
        f" It is NULL {where}".rstrip()
        + f", with its _low/_high interval columns: {'; '.join(parts)}: too few rows for an "
        f"answer. Raise dpsql.epsilon{falls}, or {fewer}." + nulls_first_note(a)
    )


def nulls_first_note(a: Analysis) -> str:
    """Where some groups' value is NULL: the sentence saying that the statement's ORDER BY ...
    DESC lists them first, when a grouped statement orders by some output DESC with NULLs first
    (PostgreSQL's default for DESC; not written NULLS LAST); '' otherwise. SQL sorts NULL above
    every value, so ORDER BY AVG(x) DESC LIMIT 5 lists such groups first: expected SQL, not a
    top 5 (newcomer23 #5)."""
    order = a.outer.args.get("order")
    terms = order.expressions if order is not None else []
    if not a.group_keys or not any(t.args.get("desc") and t.args.get("nulls_first") for t in terms):
        return ""
    return (
        " The statement's ORDER BY ... DESC lists such groups first, as PostgreSQL sorts NULL "
        "above every value (write DESC NULLS LAST for a top-N of the groups with an answer)."
    )


def _avg_why_wide(
    a: Analysis,
    mechs: tuple[Mechanism, Mechanism],
    s: Statistic,
    levels: tuple[float, float],
    ivs: Sequence[Interval | None],
    noisy: Mapping[str, Any] | None,
    declared: tuple[float, float],
) -> str:
    """When an AVG's interval spans half its declared range or more (honest, not useful): why
    (the noise alone, or the estimate of what the bounds left out) and what to do."""
    from dpsql.sql.postprocess import derive

    lo, hi = declared
    wide = [r for r, iv in enumerate(ivs) if iv is not None and iv[1] - iv[0] >= (hi - lo) / 2]
    if not wide or noisy is None or hi <= lo:
        return ""
    widths = [mechs[0].half_width(levels[0]), mechs[1].half_width(levels[1])]
    noise_wide, kept, ends = 0, math.inf, 0
    lo_c, hi_c = float(s.lo), float(s.hi)  # the range it is clamped into (a chosen clamp's)
    for r in wide:
        vals = [float(noisy[m][r]) for m in s.measures]
        kept = min(kept, max(0.0, vals[1]))
        iv = derive(s, vals, widths)[1]
        noise_wide += iv is None or iv[1] - iv[0] >= (hi - lo) / 2
        v = derive(s, vals, [0.0, 0.0])[0]
        # at a declared end (one a chosen clamp narrower than declared is: _at_clamp's)
        ends += v is not None and ((v <= lo_c and lo_c <= lo) or (v >= hi_c and hi_c >= hi))
    which = f"In {len(wide)} of {plural(len(ivs), 'group')} it" if a.group_keys else "It"
    smallest = "the smallest group" if len(wide) > 1 else "it"
    has = f"{smallest} has {few_rows(kept, widths[1])}"
    why = (
        f"too few rows for this epsilon ({has}): the noise alone is that wide"
        if noise_wide == len(wide)
        else f"the estimate of what the bounds left out (it gets {ESTIMATE_SHARE} of epsilon) is that "
        f"wide ({has})"
    )
    col = col_name(a.measure(s.measures[0]))
    # an answer at the range's end is where the noisy average fell beyond it (newcomer23 #22:
    # AVG(age) of 133 people "0 [0, 100]" read as data)
    if lo_c <= lo and hi_c >= hi:
        end = f"an end of that range ({fmt(lo)} or {fmt(hi)})"
    else:  # one end is a chosen clamp's: only the declared one is meant here
        end = f"{fmt(lo)}, that range's low end" if lo_c <= lo else f"{fmt(hi)}, its high end"
    at_end = (
        (
            f" In {ends} of them the answer is {end}: the noisy average fell beyond it and "
            f"shows at its end, which says the group has too few rows, not what its {col} is."
            if a.group_keys
            else f" The answer is {end}: the noisy average fell beyond it and shows at its end, "
            f"which says there are too few rows, not what their {col} is."
        )
        if ends
        else ""
    )
    fewer = "group less finely" if a.group_keys else "ask about more rows (a wider filter)"
    return (
        f" {which} spans most of {col}'s declared range ({fmt(lo)} to {fmt(hi)}): {why}."
        f"{at_end} Raise dpsql.epsilon, or {fewer}."
    )


def few_rows(kept: float, noise: float) -> str:
    """A group's noisy row count in words: 'about 1,200 rows, a noisy count'; where it is within
    its noise (newcomer25 #4: 'about 1 rows' of a count ±11), the bound the noise allows,
    'at most 13 rows: its noisy count, 1, is within its noise, ±11'."""
    if kept > noise:
        return f"about {rows_text(kept)}, a noisy count"
    return (
        f"at most {plural(math.ceil(kept + noise), 'row')}: its noisy count, {fmt(kept)}, "
        f"is within its noise, ±{fmt(noise)}"
    )


def _clear_rows(
    plan: Plan,
    s: Statistic,
    noisy: Mapping[str, Any] | None,
    confidence: float,
    ivs: Sequence[Interval | None],
) -> list[bool] | None:
    """Per group, whether the AVG has an answer (not NULL for no clear estimate: its count
    below the clear count, or its released interval None, spanning the range)."""
    if noisy is None or s.measures[-1] not in noisy:
        return None
    got = [not u for u in unclear(plan, s, noisy[s.measures[-1]], confidence)]
    if len(ivs) != len(got):
        return got
    return [g and iv is not None for g, iv in zip(got, ivs, strict=True)]


def at_clamp(
    a: Analysis,
    s: Statistic,
    noisy: Mapping[str, Any] | None,
    declared: tuple[float, float],
    clear: Sequence[bool] | None = None,
) -> str:
    """Answers at an end of a clamp chosen narrower than the declared range (``clamp: auto``):
    an average of values clamped at 44,200 is at most 44,200, so every group whose values lie
    above it reads at or near it, and an ORDER BY ... LIMIT over such groups orders noise
    (newcomer24 #3: four educ groups tied at 44,200 as a top 5, while the notice spoke of the
    declared range's ends, 0 or 500,000). What tells them apart, as the project offers it."""
    from dpsql.sql.postprocess import derive

    lo_c, hi_c = float(s.lo), float(s.hi)
    if noisy is None or not all(m in noisy for m in s.measures):
        return ""
    n = len(noisy[s.measures[0]])
    vals = [
        derive(s, [float(noisy[m][r]) for m in s.measures], [0.0, 0.0])[0]
        if clear is None or clear[r]
        else None  # NULL: no clear estimate (avg_unclear)
        for r in range(n)
    ]
    high = sum(1 for v in vals if v is not None and v >= hi_c) if hi_c < declared[1] else 0
    low = sum(1 for v in vals if v is not None and v <= lo_c) if lo_c > declared[0] else 0
    if not (high or low):
        return ""
    col = col_name(a.measure(s.measures[0]))
    ends = [
        *([(high, fmt(hi_c), "above", "most")] if high else []),
        *([(low, fmt(lo_c), "below", "least")] if low else []),
    ]
    out = []
    for k, at, side, most in ends:
        which = f"In {k} of {plural(n, 'group')} the answer is" if a.group_keys else "The answer is"
        reads = (
            f"every group whose {col} values lie {side} it reads at or near {at}, and among such "
            "groups an ORDER BY ... LIMIT orders the noise, not the data"
            if a.group_keys
            else f"it says the average of {col} is about {at} or {side}, not what it is"
        )
        out.append(
            f" {which} {at}, the clamp chosen for {col} (clamped to at {most} {at} here, inside "
            f"its declared range {fmt(declared[0])} to {fmt(declared[1])}): an average of "
            f"clamped values is never {side} it, so {reads}."
        )
    per = " a group" if a.group_keys else ""
    alone = (
        f" ask about those groups alone (a WHERE on {_keys(a)}: the clamp is then chosen from "
        "their rows, or kept at the declared range when they are too few),"
        if a.group_keys
        else ""
    )
    return "".join(out) + (
        f" {'To tell them apart' if a.group_keys else 'For its value'}: raise dpsql.epsilon (the clamp is chosen nearer the values' "
        f"extremes),{alone} ask a percentile (percentile_cont(0.5) WITHIN GROUP (ORDER BY {col}) "
        f"is clamped to the declared range only, but needs many rows{per}: its notice says how "
        f"many), or ask the data owner to declare clamp: bounds for {col} in the policy (the "
        "declared range: nothing clamped off, more noise)."
    )


def _keys(a: Analysis) -> str:
    from dpsql.sql.wording import plain_sql

    return " and ".join(plain_sql(g.expr) for g in a.group_keys)

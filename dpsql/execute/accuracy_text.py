"""The accuracy notice of a private answer, in the analyst's words (issue 16).

One line per statistic with a value interval, read by a psql user in one pass: the level, the
noise's half-width, what the contribution bounds left out (in the user's terms: rows per
person, values above X, what a person adds over all groups), whether the interval includes it,
the one assumption it rests on, and what to do when it matters. The numbers are those of
:mod:`dpsql.execute.bias` (the intervals themselves).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.quantiles import Quantile
from dpsql.execute.accuracy_avg import avg_line, avg_nulls, nulls_first_note
from dpsql.execute.accuracy_few import (
    open_rows,
    open_text,
    quantile_open,
    reach,
    reach_text,
    unseen,
    unseen_text,
)
from dpsql.execute.accuracy_lead import lead_bound, low_lead
from dpsql.execute.accuracy_words import (
    ESTIMATE_SHARE,
    JUST_PAST,
    alarmed,
    assumption,
    bounds_keep,
    just_past,
    level_text,
    nothing_left_out,
    percent,
    quantile_assumption,
    total_removed,
    unclear_text,
)
from dpsql.execute.bias import (
    Interval,
    Removed,
    TargetWidths,
    avg_targets,
    exact_steps,
    outside_alarm,
    parts,
    target_of,
    target_widths,
)
from dpsql.execute.bounds_text import (
    LOWER_ONLY,
    NOISE_ONLY,
    col_name,
    fmt,
    qty_text,
    rows_text,
    unestimated,
)
from dpsql.execute.declared_text import outside_warning, with_declared_premises
from dpsql.execute.disowned import Disown, Disowned, Keep, disown, nulled, quantile_disown
from dpsql.execute.selected_measures import clear_rows
from dpsql.sql.analysis import Analysis, Statistic
from dpsql.sql.bias import BiasTarget
from dpsql.sql.plan import Plan
from dpsql.sql.wording import plural


@dataclass(frozen=True)
class Accuracy:
    """The accuracy notice's lines, and the intervals those lines disown: a statistic's
    ``_low``/``_high`` are NULL exactly where its line says the interval does NOT cover the
    truth (the over-cap alarm; units with a value outside the declared range the clamp moved;
    units beyond the cap the releases cannot see; an interval that covers the noise only):
    a BI tool that reads the columns only must not see a confident interval the notice
    retracts. Where the bounds can only have pulled the answer one way (a COUNT, a SUM of
    non-negative values) the end on the other side still holds and stays (docs/accuracy.md)."""

    notes: tuple[str, ...]
    disowned: Disowned


def accuracy_notes(
    a: Analysis,
    plan: Plan,
    removed: dict[str, Removed],
    confidence: float,
    rows: int,
    noisy: Mapping[str, Any] | None = None,
    intervals: Sequence[Sequence[Interval | None]] = (),
    alarms: Mapping[str, float] | None = None,
    values: Sequence[Sequence[Any]] = (),
) -> Accuracy:
    """The accuracy summary, one line per statistic with a value interval. ``noisy`` (released
    values per measure) and ``intervals`` (per row, per statistic) let an AVG say why its
    interval is as wide as its declared range; ``alarms``: the VARIANCE alarms' released
    outside counts, by measure key (:func:`dpsql.execute.bias.release_alarms`); ``values``
    (per row, per statistic: the released values) how far an interval of several noisy parts
    reaches below and above its answer."""
    out: list[str] = []
    leads: list[str] = []  # low_lead's lines, before all others
    line_si: list[int] = []  # the statistic of each line of ``out``
    disowned: Disowned = {}
    conf = level_text(confidence)
    for si, s in enumerate(a.statistics):
        if s.func in ("quantile", "mode"):
            continue
        line_si.append(si)  # (popped again where a statistic gets no line)
        mp = plan.measure_plan(s.measures[0])
        if mp.measure.kind == "count_keys":
            w = _half_widths(s, plan, confidence)
            over = "the declared keys"
            col = a.column(mp.measure.arg) if isinstance(mp.measure.arg, exp.Column) else None
            if col is not None and col.keys is None and not col.keys_from and col.bounds:
                over = f"the {len(mp.measure.candidates or ())} values its bounds allow"
            out.append(
                f"{s.sql}: {conf} interval over {over}: a key counts when its noisy "
                f"row count passes the noise (±{rows_text(w[0]) if w else '? rows'} a key); keys with "
                "few rows may be missed, and the interval allows for them"
            )
            continue
        avg = avg_targets(s, plan)
        if avg is not None:
            ivs = [row[si] for row in intervals] if intervals else []
            line, opened = avg_line(a, plan, s, avg, removed, confidence, rows, ivs, noisy)
            out.append(line)
            if alarmed(removed[avg[0].target.key], rows):  # 'But it does NOT cover the truth'
                disown(disowned, si, Disown(None, "none"))  # (an average: either way)
            elif opened:  # 'can pull the average anywhere in its declared range'
                disown(disowned, si, Disown(opened, "none"))
            continue
        b = target_of(s, plan)
        if b is None:
            w = _half_widths(s, plan, confidence)
            noise = (
                f" noise ±{fmt(w[0])};" if len(w) == 1 else _derived_width(a, si, intervals, values)
            )
            why = unestimated(a, s)
            ivs = [row[si] for row in intervals] if intervals else []
            nulls = avg_nulls(a, s, noisy, plan, confidence, ivs)
            out.append(f"{s.sql}: {conf} interval:{noise} {why}." + nulls)
            if NOISE_ONLY in why:  # what the bounds changed is not in it
                disown(disowned, si, Disown(None, "low" if LOWER_ONLY in why else "none"))
            continue
        mech = mp.mechanism
        if not isinstance(mech, (Laplace, Gaussian)):
            line_si.pop()
            continue
        tw = target_widths(mech, b, confidence)
        r = removed[b.target.key]
        t = b.target
        if t.nothing_removed:
            out.append(f"{s.sql}: {conf} interval: noise ±{fmt(tw.b)}; {nothing_left_out(a, t)}")
            continue
        total = total_removed(r.dropped) if rows else 0.0
        answer = (
            float(np.abs(np.asarray(noisy[s.measures[0]], dtype=np.float64)).sum())
            if (noisy is not None and rows and s.measures[0] in noisy)
            else 0.0
        )
        # the total's own noise: each group's estimate has r.plan.dropped's; over G groups
        # sqrt(G) times one group's half-width (conservative for Laplace sums)
        # (one total: its noise is the 'up to ... more' below)
        grouped = bool(a.group_keys) and rows > 0
        spread = r.plan.dropped.half_width(confidence) * math.sqrt(rows) if grouped else tw.d_hi
        share = (
            f"{percent(total / answer)} of the answer"
            if answer > 0 and total > spread and total > 0
            else ""
        )  # a percentage only where the estimate is above its noise
        where = " in all groups together" if a.group_keys else ""
        # the estimate's own noise (over all groups: sqrt(G) times one group's half-width; one
        # total: its reach, the 'up to ... more' below): where the estimate is within it, it
        # says nothing clear, and the words say so
        own = spread
        sum_d = float(np.asarray(r.dropped[:rows], dtype=np.float64).sum()) if rows else 0.0
        if b.adds:  # the column adds it (the fixed-default fallback): a line of its own
            line = _added_line(a, s, t, r, tw, rows, confidence, sum_d, own)
        elif sum_d > JUST_PAST * own:
            parts = [f"a noisy estimate, ±{fmt(spread)}"] if grouped else []
            parts += [share] if share else []
            estimate = f" ({'; '.join(parts)})" if parts else ""
            said = f"about {qty_text(a, t.measure, total)}{where}{estimate}"
        elif sum_d > own:  # past its noise, not far: a noisy number, not a fact (newcomer25 #16)
            said = f"an unsure estimate{where} ({just_past(qty_text(a, t.measure, sum_d), own)})"
        elif not grouped and sum_d < 0:  # _reach_text says where it came out
            said = "no clear estimate"
        else:
            said = f"no clear estimate{where} ({unclear_text(qty_text(a, t.measure, sum_d), sum_d, own)})"
        # tw.b is the answer's noise at its share of the interval's miss chance (most of it goes
        # to the left-out estimate's tail), well above the noise's own half-width at the level:
        # a reader comparing an answer with "noise ±X" needs the latter too (newcomer23 #17)
        alone = mech.half_width(confidence)
        level = (
            f" (its share of the interval; the noise alone is within ±{fmt(alone)} at {conf})"
            if tw.b > 1.25 * alone
            else ""
        )
        if not b.adds:
            line = (
                f"{s.sql}: {conf} interval: noise ±{fmt(tw.b)}{level}, plus what the bounds "
                f"left out (they keep {bounds_keep(a, t)}): {said}"
                f"{_reach_text(a, t, r.dropped[:rows], tw.d_hi)} "
            )
        if rows and noisy is not None and s.measures[0] in noisy and not b.adds:  # clearly
            # much left out (not where the column adds the estimate: it is no longer low):
            answers = np.asarray(noisy[s.measures[0]], dtype=np.float64)[:rows]  # a line first
            leads += low_lead(a, t, s.sql, lead_bound(t, mech, r, answers, confidence))
        line += assumption(a, r, t, rows)
        found = []  # answers the releases cannot check: a few units may hold most of them
        if rows and noisy is not None and s.measures[0] in noisy and not alarmed(r, rows):
            answers = np.asarray(noisy[s.measures[0]])
            ks = reach(t, r, tw, confidence)
            # bounds chosen from the data: the upper end is an assumption wherever a unit
            # beyond the cap fits the releases (accuracy_few's docstring); fixed bounds: the
            # policy's, the old check of answers a few units could make up
            found = open_rows(a, t, ks, answers)
            text = open_text(a, t, found, ks, rows)
            if not found:
                found = unseen(t, r, tw, answers, confidence)
                text = unseen_text(a, t, found, rows) or reach_text(a, ks)
            line += text
        # the bounds only pull the answer towards 0 on the side of its sign: the end on the
        # other side never rests on the assumption (docs/accuracy.md), so it stays
        held: Keep = "low" if t.sign > 0 else "high"
        if alarmed(r, rows):  # 'But it does NOT cover the truth'
            disown(disowned, si, Disown(None, held))
        if found:  # 'the truth can lie far beyond the interval', in those rows
            disown(disowned, si, Disown(frozenset(f[0] for f in found), held))
        reaches = np.maximum(0.0, np.asarray(r.dropped[:rows], dtype=np.float64) + tw.d_hi)
        if rows and reaches.max() > 4 * tw.b and not alarmed(r, rows) and not found and not b.adds:
            line += (
                f" Most of the width is that estimate (it gets {ESTIMATE_SHARE} of epsilon): raise "
                "dpsql.epsilon to narrow it."
            )
        out.append(line)
    left_out: list[str] = []  # a quantile's left-out rows beyond the count's cap
    for si, s in enumerate(a.statistics):
        qm = plan.measure_plan(s.measures[0]).mechanism if s.func == "quantile" else None
        if isinstance(qm, Quantile):  # (its notice says so: dpsql.execute.notices)
            d = quantile_disown(a, float(qm.quantile), s)
            if d is not None:
                disown(disowned, si, d)
            gone = _unclear_line(a, plan, s, qm, noisy, confidence)
            if gone:
                left_out.append(gone)
            rq = removed.get(s.measures[0])  # its left-out rows (dpsql.sql.bias.quantile_targets)
            if rq is not None and alarmed(rq, rows):  # 'But it does NOT cover the truth'
                disown(disowned, si, Disown(None, "none"))
                left_out.append(
                    f"{s.sql}: {quantile_assumption(a, rq, rq.plan.target, rows)}"
                    + nulled(a, Disown(None, "none"))
                )
            elif rq is not None and rows:  # units unseen beyond the count's cap (F1b)
                q_open = quantile_open(a, s.sql, rq, rows, confidence)
                if q_open is not None:
                    disown(disowned, si, q_open[0])
                    left_out.append(q_open[1] + nulled(a, q_open[0]))
    warned = _outside_warnings(a, plan, removed, rows, alarms)
    for si, s in enumerate(a.statistics):
        if s.func not in ("quantile", "mode") and warned.get(s.sql):
            # 'the interval does NOT cover what that clamp changed': a value beyond the range
            # can lie on either side of it, by any amount
            disown(disowned, si, Disown(None, "none"))
    # a quantile's line is the interval notice's (dpsql.execute.notices): its warning is a line
    # of its own here (stored with the release), which that notice says instead of the premise
    quantiles = tuple(
        f"{s.sql}: {warned[s.sql]}"
        for s in a.statistics
        if s.func == "quantile" and warned.get(s.sql)
    ) + tuple(left_out)
    lines = with_declared_premises(a, out, warned)
    lines = tuple(
        line + nulled(a, disowned[si]) if si in disowned else line
        for line, si in zip(lines, line_si, strict=True)
    )
    return Accuracy((*leads, *lines, *quantiles), disowned)


def _added_line(
    a: Analysis,
    s: Statistic,
    t: BiasTarget,
    r: Removed,
    tw: TargetWidths,
    rows: int,
    confidence: float,
    sum_d: float,
    own: float,
) -> str:
    """The line of a COUNT or one-signed SUM whose column adds the estimate of what the
    fixed-default fallback's bounds left out (``BiasPlan.adds``): what the column is, that
    estimate (as a fact only well past its noise) and how far the interval reaches from the
    column, in the user's terms; the assumption follows (the caller)."""
    conf, unit = level_text(confidence), a.private.privacy_unit
    where = " in all groups together" if a.group_keys else ""
    qty = qty_text(a, t.measure, sum_d)
    if sum_d > JUST_PAST * own:
        said = f"about {qty}{where}"
    elif sum_d > own:
        said = f"an unsure estimate{where} ({just_past(qty, own)})"
    else:
        said = f"no clear estimate{where} ({unclear_text(qty, sum_d, own)})"
    below = int((np.asarray(r.dropped[:rows], dtype=np.float64) < 0).sum()) if rows else 0
    zero = (
        f"; where it came out below 0{' (' + str(below) + ' groups)' if a.group_keys else ''}, "
        "0 is added (nothing is ever left out below 0)"
        if below
        else ""
    )
    per = " in each group" if a.group_keys else ""
    # newcomer26 #4: a sum's left-out estimate counts each unit's left-out value rounded up
    # (an upper bound only: dpsql.execute.bias.exact_steps), so it lifts the interval's upper
    # end and never its lower one, which stays the kept answer's (the safe side): the words
    # said "at most ±22,842,378 from it" where _low lay 43M below the answer
    reach = (
        f"the interval reaches at most ±{fmt(tw.b + tw.d_hi)} from it{per}: the kept answer's "
        f"noise ±{fmt(tw.b)} and the estimate's ±{fmt(tw.d_hi)} added together; below it, the "
        "kept answer's noise and no more of the estimate's than it added, so a row's own "
        "interval (its _low/_high) is narrower there where the estimate came out small"
        if exact_steps(t)
        else f"the interval reaches at most {fmt(tw.b + tw.d_hi)} above it{per} (the kept "
        f"answer's noise ±{fmt(tw.b)} and the estimate's ±{fmt(tw.d_hi)}); below, it stops at "
        f"the kept answer less its noise ({fmt(tw.b)}), the estimate not added there: it "
        f"counts each {unit}'s left-out {col_name(t.measure)} rounded up, so it raises the "
        "upper end only (the lower end stays on the safe side, further below the answer "
        "than the upper end is above it wherever the estimate is added)"
    )
    return (
        f"{s.sql}: {conf} interval: its value is what the bounds kept ({bounds_keep(a, t)}: "
        f"the fixed defaults, too few {unit} values to choose bounds at this epsilon) plus a "
        f"noisy estimate of what they left out (half of epsilon went to it): {said}{zero}; "
        f"{reach}. "
    )


def _unclear_line(
    a: Analysis,
    plan: Plan,
    s: Statistic,
    mech: Quantile,
    noisy: Mapping[str, Any] | None,
    confidence: float,
) -> str:
    """The groups whose quantile is NULL (:func:`dpsql.execute.selected_measures.unclear_groups`:
    a noisy count of their ranked rows below :func:`clear_rows`), in words; '' where none is."""
    need = clear_rows(mech, confidence)
    vals = (noisy or {}).get(s.measures[0])
    if need is None or vals is None:
        return ""
    k = sum(1 for v in vals if v is None)
    if not k:
        return ""
    where = f" in {k} of {plural(len(vals), 'group')}" if a.group_keys else ""
    what = "median" if mech.quantile == Fraction(1, 2) else f"{float(mech.quantile):g} quantile"
    kept = "" if a.one_row_per_unit or a.unique_unit else " kept by the contribution bounds"
    return (
        f"{s.sql} is NULL{where}, with its _low/_high interval columns: a noisy count of the rows "
        f"it ranks{kept} (a tenth of its budget) came out below {need:,} there, too few for a "
        f"clear {what} at this epsilon (its answer would be the noise of the selection, anywhere "
        "in the range). Raise dpsql.epsilon, or group less finely." + nulls_first_note(a)
    )


def _reach_text(a: Analysis, t: BiasTarget, dropped: np.ndarray, d_hi: float) -> str:
    """How far the interval reaches beyond the answer for what the bounds left out, as the
    interval columns do (:func:`dpsql.execute.bias.target_interval`): in a group, the removed
    mass's estimate plus its noise's reach ``d_hi``, at 0 if below. An estimate below 0 (its
    noise, when little was removed) shortens that reach by as much, to nothing when it lies
    below -``d_hi``: the words say so rather than promise ``d_hi`` the columns lack."""
    far = "above" if t.sign > 0 else "below"
    per = " in a group" if a.group_keys else ""
    d = np.asarray(dropped, dtype=np.float64)
    negative = int((d < 0).sum())
    beyond = int((d + d_hi <= 0).sum())
    if not a.group_keys and d.size == 1 and negative:
        est, reach = float(d[0]), max(0.0, float(d[0]) + d_hi)
        if not reach:
            return (
                f" (its noisy estimate came out at {fmt(est)}, below 0 by more than that "
                f"estimate's noise reaches, {fmt(d_hi)}); so it reaches no further {far} the "
                "answer than the noise does."
            )
        return (
            f" (its noisy estimate came out at {fmt(est)}, below 0), and up to {fmt(reach)} "
            f"more given that estimate's noise (its reach, {fmt(d_hi)}, less the "
            f"{fmt(-est)} below 0); so it reaches further {far} the answer."
        )
    if not negative:
        return (
            f", and up to {fmt(d_hi)} more{per} given that estimate's noise; so it reaches "
            f"further {far} the answer."
        )
    n = d.size
    text = (
        f", and up to {fmt(d_hi)} more{per} given that estimate's noise, less by as much where a "
        f"group's estimate came out below 0 ({negative} of {n} {'group' if n == 1 else 'groups'})"
    )
    if beyond == n:
        return text + (
            f"; in every group it came out below 0 by more than that, so it reaches no further "
            f"{far} the answer than the noise does."
        )
    if beyond:
        return text + (
            f"; so it reaches further {far} the answer, except in {beyond} of them, where it "
            "came out below 0 by more than that: there it reaches no further than the noise does."
        )
    return text + f"; so it reaches further {far} the answer."


def _outside_warnings(
    a: Analysis,
    plan: Plan,
    removed: dict[str, Removed],
    rows: int,
    alarms: Mapping[str, float] | None = None,
) -> dict[str, str]:
    """By statistic SQL: the warning that about N units have a value outside its declared range
    (:meth:`Removed.outside_alarm`, or a VARIANCE's alarm: :func:`outside_alarm`), for the
    statistics whose count passed its threshold."""
    out: dict[str, str] = {}
    if not rows:
        return out
    for x in plan.alarms:
        n = outside_alarm(x.outside, (alarms or {}).get(x.key))
        for s in a.statistics:
            if n is not None and any(k in s.measures for k in x.keys):
                out[s.sql] = outside_warning(a, s, n, int(x.outside.sensitivity))
    for s in a.statistics:
        avg = avg_targets(s, plan)
        b = avg[0] if avg is not None else target_of(s, plan)
        r = removed.get(b.target.key) if b is not None else None
        n = r.outside_alarm() if r is not None else None
        if n is not None and b is not None:
            out[s.sql] = outside_warning(a, s, n, b.target.split)
    return out


def _derived_width(
    a: Analysis,
    si: int,
    intervals: Sequence[Sequence[Interval | None]],
    values: Sequence[Sequence[Any]] = (),
) -> str:
    """How far the interval of a statistic of several noisy parts (AVG, VARIANCE, STDDEV) reaches
    from its answer (widest over the groups); '' when it has none. '±w' only when it reaches
    about as far on both sides; else each side's reach: such an interval is not centred on its
    answer (a STDDEV's stops at 0, an AVG's at its declared range, a ratio's is skewed), and
    half its width ('±13.8' beside 17.51 [0, 27.6]) would state neither."""
    below: list[float] = []
    above: list[float] = []
    for i, row in enumerate(intervals):
        iv = row[si]
        if iv is None or not all(map(math.isfinite, iv)):
            continue
        v = _number(values[i][si]) if i < len(values) and si < len(values[i]) else None
        if v is None or not iv[0] <= v <= iv[1]:
            v = (iv[0] + iv[1]) / 2  # no released value to measure from: half the width
        below.append(v - iv[0])
        above.append(iv[1] - v)
    if not below:
        return ""
    down, up = max(below), max(above)
    grouped = bool(a.group_keys)
    each = " in a group" if grouped else ""  # "above it a group" read as garbled (newcomer24 #15)
    if abs(down - up) <= 0.05 * max(down, up):
        return f" noise {'up to ' if grouped else ''}±{fmt(max(down, up))}{each};"
    most = "up to " if grouped else ""
    return (
        f" noise: it reaches {most}{fmt(down)} below the answer and {most}{fmt(up)} above it{each};"
    )


def _number(x: Any) -> float | None:
    """A released value as a float (None when it is not a finite number)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction, Decimal)):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def _half_widths(s: Statistic, plan: Plan, confidence: float) -> list[float]:
    level = 1 - (1 - confidence) / parts(s, plan)
    mechs = [plan.measure_plan(m).mechanism for m in s.measures]
    return [m.half_width(level) for m in mechs if hasattr(m, "half_width")]

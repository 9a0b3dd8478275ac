"""When the released values cannot check the interval's one assumption (issue 16).

A COUNT's or one-signed SUM's interval holds what bounding removed only up to a cap per unit:
it assumes no unit lost more than C (``CAP_FACTOR`` times what the bounds keep of one unit).
The over-cap count (released) says when that is plainly false; a few units beyond the cap
stay below its noise (group privacy: no DP count sees 5 units). Whether that matters depends
on how many units the answer rests on. The released values bound both sides:

* at most ``k`` units can be beyond the cap without the releases showing it, ``k`` the smaller
  of the over-cap count's upper reach and the removed-mass estimate's upper reach over C (a
  unit beyond the cap adds C to that estimate);
* the answer ``A`` (kept mass) can come from as few as ``A / K`` units, ``K`` the most one unit
  adds to a group's kept answer (a public bound of the plan).

When ``A <= k K`` -- units the releases cannot see beyond the cap could make up all of the
answer, i.e. a few units may hold most of what the query selects -- the releases
cannot check the assumption and the interval may miss the truth by any amount (the demo's
``SELECT COUNT(*) FROM purchases WHERE quantity > 5`` answered ``5 [4, 56]`` against 1,001:
5 units hold 1,000 of those rows, R = 1 keeps one of each). Then the notice says so in the
analyst's words and what to do, and the interval's high end is NULL in those rows (its low end
still holds: dpsql.execute.disowned). Otherwise the notice still says how many units beyond the
cap the releases could miss (:func:`reach_text`: *Up to 39 user_id could have lost more than
that without the estimates showing it*), so the assumption is never stated without its limit. Everything here is a released value or a public bound, so
saying it costs no privacy. On a large answer (12,000 units, ``bench/accuracy.py``'s COUNT(*),
k K about a tenth of the answer) it stays silent. Grouped, each group is checked on its
own: a per-group cap is smaller and its estimate noisier, so it speaks up more often there
(the demo's SUM(amount) by month at epsilon 1: every month).
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.execute.bias import Removed, TargetWidths
from dpsql.execute.bounds_text import col_name, fmt, qty_text
from dpsql.sql.analysis import Analysis
from dpsql.sql.bias import CAP_FACTOR, BiasTarget
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
    kept = qty_text(a, t.measure, float(t.cap) / CAP_FACTOR)
    cap_g = t.group_cap_steps * t.grid if t.split > 1 else t.cap
    lost = qty_text(a, t.measure, float(cap_g))
    what = "rows" if t.measure.kind in ("count_rows", "count_values") else col_name(t.measure)
    where = (
        f"In {fmt(len(found))} of {plural(rows, 'group')} the released values cannot check it: a "
        "group's answer"
        if a.group_keys
        else "The released values cannot check it here: this answer"
    )
    return (
        f" {where} could all come from {fmt(n)} {unit} (the bounds keep at most "
        f"{kept} of each), while up to {fmt(k)} {unit} could each have lost more than "
        f"{lost} without the estimate showing it. If a few {unit} hold most of the {what} "
        "this query selects, the truth can lie far beyond the interval. To rule that out, ask "
        "the data owner to declare max_rows_per_unit in the policy (no fewer than the most "
        f"rows one {unit} has), or raise dpsql.epsilon (the count of {unit} beyond the cap "
        "then speaks up)."
    )

"""An AVG with no clear estimate is NULL (newcomer26 #12), as a quantile's is
(:func:`dpsql.execute.selected_measures.clear_rows`).

An AVG is released as mid + S/N from a noisy centred sum S and a noisy count N. Its interval
runs over the corners (S +- ws + removed mass) / (N -+ wn + removed rows)
(:func:`dpsql.execute.bias.avg_interval`), cut at the range's ends: ``ws`` and ``wn`` the sum's
and count's noise half-widths at the levels the interval gives them. Where the bounds are
``auto`` (chosen from the data, or the fixed defaults) the interval also holds the noisy
estimates of what the bounds left out: they take a share of the 5% (so ``ws`` and ``wn`` are
wider than the noise's alone at 97.5%, about twice at the fixed defaults), and the value mass
left out lifts the upper end only (the rows left out count at the range's low end). For an
average in the middle of the range (half-width h) the lower end reaches the low end once
ws / (N - wn) >= h, that is for N <= wn + ws / h, and the upper end reaches the high end no
later (the left-out estimates only widen it). Below that count the interval runs from one end
of the range to the other: the answer is the noise's, not the data's (a BI chart showed
"average age 98.7" for a true 46 from 92 rows whose interval was [0, 100], newcomer26 #12;
"AVG 54.1" beside a noisy COUNT of 0; and, when the rule counted the noise at 97.5% only, at
the fixed defaults' left-out estimate "52 [0.5, 100]" in every release of newcomer27's
statement at epsilon 1).

So the release puts NULL (value and interval columns) where the AVG's own noisy count came out
below :func:`clear_count`, ceil(wn + ws / h): a function of the plan (public: the mechanisms'
scales and the levels the interval gives them, the clamp range) and the session's confidence,
decided on the released count only, never on a true count (post-processing: nothing more is
charged). Above it the interval is narrower than the range for an average in the middle; one
off the middle, or just past the count, can still come out spanning the whole range it is cut
at (:func:`spans`): that group is NULL too, decided on its released interval (post-processing
again). The notice states the number and what moves it (it falls about as 1 / epsilon: twice
the epsilon, about half the rows), and how many groups the interval rule made NULL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.execute.bias import avg_targets, avg_widths
from dpsql.sql.analysis import Statistic
from dpsql.sql.plan import Plan


def clear_count(plan: Plan, s: Statistic, confidence: float) -> int | None:
    """The fewest rows (by the AVG's own noisy count) for which ``s``, an AVG, has a clear
    estimate at ``confidence``: ceil(wn + ws / h) (module doc), ``ws`` and ``wn`` at the levels
    its released interval gives them (:func:`interval_widths`). None for other statistics, or
    an AVG not released by additive noise, or one over an empty range."""
    widths = interval_widths(plan, s, confidence)
    half = float(s.hi - s.lo) / 2
    if widths is None or half <= 0:
        return None
    ws, wn = widths
    return max(1, math.ceil(wn + ws / half))


def interval_widths(plan: Plan, s: Statistic, confidence: float) -> tuple[float, float] | None:
    """The half-widths of an AVG's centred sum's and count's noise in its released interval at
    ``confidence``: at 1 - alpha/2 each without an estimate of what the bounds left out
    (:func:`dpsql.execute.noise.noise_widths`), else at the shares
    :func:`dpsql.execute.bias.avg_widths` leaves them beside it. None when it is not released
    by additive noise."""
    if s.func != "avg" or len(s.measures) != 2:
        return None
    m0, m1 = (plan.measure_plan(k).mechanism for k in s.measures)
    if not isinstance(m0, (Laplace, Gaussian)) or not isinstance(m1, (Laplace, Gaussian)):
        return None
    avg = avg_targets(s, plan)
    if avg is None:
        level = 1 - (1 - confidence) / 2
        return m0.half_width(level), m1.half_width(level)
    aw = avg_widths((m0, m1), avg, confidence)
    return m0.half_width(aw.sum_level), m1.half_width(aw.count_level)


def left_out(plan: Plan, s: Statistic) -> bool:
    """Whether ``s``'s interval (an AVG's) holds an estimate of what the bounds left out."""
    avg = avg_targets(s, plan)
    return avg is not None and not (avg[0].target.nothing_removed and avg[1] is None)


def spans(plan: Plan, s: Statistic, iv: tuple[float, float] | None) -> bool:
    """Whether ``iv``, ``s``'s released interval in a group (an AVG's, as shown: its ends
    rounded outwards), runs from one end of the range it is cut at to the other (:func:`cut_range`):
    an answer that says nothing of the data whatever its count (an average off the middle of
    the range, or one whose count passed :func:`clear_count` by little). Post-processing of
    released values."""
    if iv is None or s.func != "avg":
        return False
    lo, hi = cut_range(plan, s)
    return lo < hi and iv[0] <= lo and iv[1] >= hi


def cut_range(plan: Plan, s: Statistic) -> tuple[float, float]:
    """The range an AVG's interval is cut at: its declared one where the interval holds an
    estimate of what the bounds left out (:func:`dpsql.execute.bias.avg_interval`; a clamp
    chosen from the data lies inside it), else its clamp range (:func:`dpsql.sql.postprocess.
    derive`)."""
    avg = avg_targets(s, plan)
    if avg is None:
        return float(s.lo), float(s.hi)
    t = avg[0].target
    return float(t.raw_lo), float(t.raw_hi)


def unclear(plan: Plan, s: Statistic, counts: Iterable[Any], confidence: float) -> list[bool]:
    """Per group, whether ``s`` (an AVG) has no clear estimate: its released noisy count (its
    last measure's values, ``counts``) below :func:`clear_count`. All False for others."""
    need = clear_count(plan, s, confidence)
    return [need is not None and c is not None and float(c) < need for c in counts]

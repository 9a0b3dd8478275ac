"""An AVG with no clear estimate is NULL (newcomer26 #12), as a quantile's is
(:func:`dpsql.execute.selected_measures.clear_rows`).

An AVG is released as mid + S/N from a noisy centred sum S (noise half-width ``ws`` at the
stated level) and a noisy count N (``wn``), both charged with the statement. Its interval from
the noise alone runs over the corners (S +- ws) / (N -+ wn): for an average in the middle of
the range it reaches both ends of the range (lo to hi, half-width h = (hi - lo) / 2) once
ws / (N - wn) >= h, that is for N <= wn + ws / h. Below that count the answer is the noise's,
not the data's: a BI chart showed "average age 98.7" for a true 46 from 92 rows whose interval
was [0, 100] (newcomer26 #12), and "AVG 54.1" beside a noisy COUNT of 0.

So the release puts NULL (value and interval columns) where the AVG's own noisy count came out
below :func:`clear_count`, ceil(wn + ws / h): a function of the plan (public: the mechanisms'
scales, the clamp range) and the session's confidence, decided on the released count only,
never on a true count (post-processing: nothing more is charged). Above it the interval is
narrower than the range. The notice states the number and what moves it (it falls about as
1 / epsilon: twice the epsilon, about half the rows).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.sql.analysis import Statistic
from dpsql.sql.plan import Plan


def clear_count(plan: Plan, s: Statistic, confidence: float) -> int | None:
    """The fewest rows (by the AVG's own noisy count) for which ``s``, an AVG, has a clear
    estimate at ``confidence``: ceil(wn + ws / h) (module doc). None for other statistics, or
    an AVG not released by additive noise, or one over an empty range."""
    if s.func != "avg" or len(s.measures) != 2:
        return None
    mechs = [plan.measure_plan(k).mechanism for k in s.measures]
    m0, m1 = mechs
    if not isinstance(m0, (Laplace, Gaussian)) or not isinstance(m1, (Laplace, Gaussian)):
        return None
    half = float(s.hi - s.lo) / 2
    if half <= 0:
        return None
    level = 1 - (1 - confidence) / 2  # both measures' noise at once (Bonferroni), as the
    # noise-alone interval (dpsql.execute.noise.noise_widths)
    return max(1, math.ceil(m1.half_width(level) + m0.half_width(level) / half))


def unclear(plan: Plan, s: Statistic, counts: Iterable[Any], confidence: float) -> list[bool]:
    """Per group, whether ``s`` (an AVG) has no clear estimate: its released noisy count (its
    last measure's values, ``counts``) below :func:`clear_count`. All False for others."""
    need = clear_count(plan, s, confidence)
    return [need is not None and c is not None and float(c) < need for c in counts]

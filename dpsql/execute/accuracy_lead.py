"""The first notice where the contribution bounds clearly left out a large part (issue 16).

A COUNT, or a SUM of values of one sign, that bounding lowered is low by what it left out. The
notices' own line per statistic says about how much (the noisy estimate) and how far the
interval reaches for it; BI tools show the number alone, so where a large part was left out
beyond doubt, a line of its own leads the notices (newcomer23 #16: the R = 1 fallback's
`551 [534, NULL]` for 1,097 rows).

That line is believed, so it states lower bounds at a high level, never the point estimate:
it is shown only where it is shown, and a line gated on a noisy estimate being large shows the
estimate's upper tail (newcomer24 #1: "with those the truth is about 277,698,982" for a SUM
whose truth was 52,258,770, in 2 of 71 releases, from an unbiased estimate of scale 62M; the
line showed only when its noise was high). A lower confidence bound has no such selection
effect: it is below the truth with probability >= its level in every release, shown or not, so
a shown line is wrong at most at that rate over releases (tests/integration/engine/
test_lead_bound.py). Post-processing of the released answer and estimate only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsql.dp.mechanisms import Mechanism, sum_reach
from dpsql.execute.accuracy_words import bounds_keep, percent
from dpsql.execute.bias import Removed, exact_steps
from dpsql.execute.bounds_text import qty_text
from dpsql.sql.analysis import Analysis
from dpsql.sql.bias import BiasTarget

LEAD_LEVEL = 0.99  # the lead's bounds hold at this level at least (the interval's, if higher)
LEAD_SHARE = 0.25  # ... and it is shown where what was surely left out is a quarter of the answer
ANSWER_MISS = 0.1  # of 1 - level: the answer's own noise (the rest: the left-out estimate's)


@dataclass(frozen=True)
class LeadBound:
    """Lower bounds, together at ``level``, on what the bounds left out over the released rows
    and on the truth (the answer plus it), from the released answers and estimates."""

    level: float
    estimate: float  # the left-out estimate's total (noisy, unbiased)
    left: float  # at least this much was left out (the estimate less its noise's reach)
    answer: float  # the released answers' total
    truth: float  # at least this is the truth: the answer less its noise's reach, plus left


def lead_bound(
    t: BiasTarget, answer_mech: Mechanism, r: Removed, answers: np.ndarray, confidence: float
) -> LeadBound | None:
    """The lead's bounds for target ``t`` (released ``answers``, one per row, and ``r``'s
    estimates), or None where there is none to give: the target's estimate is not its left-out
    mass exactly (rounded up per unit, :func:`dpsql.execute.bias.exact_steps`: an upper bound
    only), or bounding can only have raised it (sign < 0).

    The left-out estimate over n rows is the truth plus the sum of n independent noises; the
    answer too. So, with beta = 1 - level: estimate - reach(n, (1 - ANSWER_MISS) beta) is below
    the left-out truth with probability >= 1 - (1 - ANSWER_MISS) beta, and answer - reach(n,
    ANSWER_MISS beta) below the kept truth with probability >= 1 - ANSWER_MISS beta: their sum
    is below the truth with probability >= 1 - beta (union bound; :func:`sum_reach`: one-sided,
    exact for one row, Chernoff for several). Each unit's left-out part is counted up to the
    cap, so a unit beyond it only makes the bound lower; values outside the declared range
    are the interval's premise, as they are for the interval (its notice says so)."""
    n = len(answers)
    if t.sign <= 0 or not exact_steps(t) or n == 0:
        return None
    level = max(LEAD_LEVEL, confidence)
    beta = 1 - level
    estimate = float(np.asarray(r.dropped[:n], dtype=np.float64).sum())
    left = math.floor(estimate - sum_reach(r.plan.dropped, n, (1 - ANSWER_MISS) * beta))
    answer = float(np.asarray(answers, dtype=np.float64).sum())
    kept = answer - sum_reach(answer_mech, n, ANSWER_MISS * beta)
    return LeadBound(level, estimate, float(left), answer, float(math.floor(kept) + left))


def low_lead(a: Analysis, t: BiasTarget, sql: str, bound: LeadBound | None) -> list[str]:
    """The lead line, where at least :data:`LEAD_SHARE` of the answer was left out at the
    bound's level; [] otherwise. Its numbers are lower bounds ("at least"): the estimate
    itself, the line's old "about", overshot the truth exactly when it was shown."""
    if bound is None or bound.answer <= 0 or bound.left < LEAD_SHARE * bound.answer:
        return []
    m = t.measure
    together = " in all groups together" if a.group_keys else ""
    sure = f"{bound.level * 100:.4g}% sure"
    return [
        f"left out by the contribution bounds: {sql} is low{together}: they keep "
        f"{bounds_keep(a, t)} and left out at least {qty_text(a, m, bound.left)} ({sure}, its "
        f"estimate's noise allowed for), {percent(bound.left / bound.answer)} of the answer: with "
        f"those the truth is at least {qty_text(a, m, bound.truth)} ({sure}, the answer's noise "
        "allowed for too; its line below says how far above that it can lie)"
    ]

"""An ``auto`` bound's rare miss lands near the data, not anywhere up to the grid's ceiling.

audit28 (closing-note28, Next 3): with the shipped ``auto`` bounds, ``SELECT region,
COUNT(DISTINCT user_id), AVG(amount) FROM purchases WHERE quantity >= 1 AND amount >= 1 GROUP
BY region`` once chose 16,384 rows per user_id per group (other runs: 8) and every AVG came
back NULL (its noise, sized for 16,384 rows, covered amount's whole range). Cause: R's
selection (the exponential mechanism over a grid up to 1,000,000 rows) misses with a small
probability (its beta) and a miss lands uniformly among the ~30 empty candidates above the
data (all have the same utility): 0.9% of choices at epsilon 1 came out 363 .. 1,000,000 rows
for a table whose largest user_id has 400 rows in a region (5 such users, the rest at most 11).
The fix: a public prior over the grid (each step further e^-1 as likely: dpsql.dp.bounds, "Far
above the data"), so a miss lands a step or two above the data.

Since session 30 that statement chooses no R: COUNT(DISTINCT user_id) is a count of units, which
R does not move, so the AVG beside it keeps R = 1 by the per-group ratio rule (set, not chosen:
dpsql.sql.auto_bounds._rated). The same selection of R is tested with COUNT(*) beside the AVG
(the same rows, slice and histogram), which R does move.

Property: the engine's choice of R for that statement (its own items, its histogram counted by
PostgreSQL, its own mechanism as :func:`dpsql.execute.auto_bounds.choose` builds it) is more
than 4x the largest rows one user_id has in one region (the event from the data: the owner's
own query, 400) in at most 1 draw of 10,000 (permute-and-flip outputs a candidate only on its
coin's heads: the far candidates' coins sum to 8.5e-11 here; without the prior, 0.009). Over N
draws, more than C such draws has probability <= 1e-6 at that rate (binomial). The twin (the
same selection without the prior: the mechanism before the fix, 49 far of 10,000 measured) is
caught. Cheap: the histogram is read once, the N draws are one vectorized batch of the exact
sampler (~1 CPU-s for both tests).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dpsql.dp.bounds import Selection
from dpsql.dp.noise_source import CsprngNoise
from dpsql.engine import Engine
from dpsql.execute.auto_bounds import Pending, choose, histograms
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.auto_bounds import auto_items, policy_choices

SQL = (
    "SELECT region, COUNT(*), AVG(amount) FROM purchases "
    "WHERE quantity >= 1 AND amount >= 1 GROUP BY region"
)
TRUTH = (  # the largest rows one user_id has in one region, as the owner counts it
    "SELECT max(n) FROM (SELECT count(*) AS n FROM purchases "
    "WHERE quantity >= 1 AND amount >= 1 GROUP BY user_id, region) s"
)
N = 20_000
RATE = 1e-4  # the property's largest rate of far choices
C = int(stats.binom.isf(1e-6, N, RATE))  # more than C far of N: probability <= 1e-6


class _Recording(CsprngNoise):
    """The product's noise source, keeping each bound's selection and counts."""

    def __init__(self) -> None:
        self.seen: list[tuple[Selection, np.ndarray]] = []

    def bound(self, selection: Selection, counts: np.ndarray) -> int:
        self.seen.append((selection, counts))
        return super().bound(selection, counts)


@pytest.fixture(scope="module")
def rows_choice(demo_dsn: str, demo_policy_auto: Any) -> tuple[Selection, np.ndarray, list[Any]]:
    """R's selection and histogram as the engine builds them at epsilon 1, and R's grid."""
    e = Engine(demo_policy_auto, demo_dsn, pool_size=1)
    try:
        a = e.prepare(SQL, "analyst").analysis  # type: ignore[attr-defined]
        items = auto_items(a)
        assert [it.kind for it in items] == ["rows", "value_hi"]  # G: the 5 declared regions
        p = Pending(AutoBounds(policy_choices(a)), items)
        hist = histograms(e, a, items)
        rec = _Recording()
        choose(a, p, hist, Fraction(1), rec)
        truth = e.backend.run(TRUTH, private=False).rows[0][0]
    finally:
        e.close()
    (sel, counts), _ = rec.seen  # R is chosen first, then the clamp
    assert int(counts.sum()) == 12_005  # every user_id, once
    return sel, counts, [g for g in items[0].grid if g > 4 * int(truth)]


def _far(sel: Selection, counts: np.ndarray, far: list[Any], grid_len: int) -> int:
    picks = sel.choose_many(counts, N)
    first_far = grid_len - len(far)
    return int(((picks >= first_far) & (picks < grid_len)).sum())


def test_a_bound_choice_rarely_lands_far_above_the_data(
    rows_choice: tuple[Selection, np.ndarray, list[Any]],
) -> None:
    sel, counts, far = rows_choice
    assert 15 <= len(far) < len(counts) and C < 15, (len(far), C)
    got = _far(sel, counts, far, len(counts))
    assert got <= C, f"{got} of {N} choices of R above 4x the data (at most {C})"


def test_without_the_prior_the_miss_lands_anywhere(
    rows_choice: tuple[Selection, np.ndarray, list[Any]],
) -> None:
    """The broken twin: the mechanism before the fix (uniform over the empty candidates)."""
    sel, counts, far = rows_choice
    twin = dataclasses.replace(sel, step_nats=0)
    got = _far(twin, counts, far, len(counts))
    assert got > C

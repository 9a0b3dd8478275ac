"""The split of a bias target's alpha over its interval's tails (dpsql.execute.bias.target_widths).

Property (deterministic, exact tail sums): the interval misses the truth only if one of its
one-sided tails does -- the answer's noise below or above, the removed mass above its upper
reach, and on grid 1 below its lower reach -- so the tails' probabilities, computed exactly
from the discrete Laplace, must sum to at most alpha (union bound). The broken twin (the same
split at four times the alpha, as if each tail got the whole of it) sums above alpha, and the check
catches it. And the split is narrower than alpha/4 on each tail where the removed mass's noise
dominates (the point of it).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpsql.dp.mechanisms import Laplace, laplace_tail
from dpsql.execute.bias import TargetWidths, target_widths
from dpsql.sql.analysis import Measure
from dpsql.sql.bias import BiasPlan, BiasTarget


def _plan(cap: int, grid: Fraction, eps_d: Fraction) -> BiasPlan:
    steps = int(Fraction(cap) / grid)
    t = BiasTarget(0, Measure("count_rows"), 1, steps, grid)
    return BiasPlan(t, Laplace(Fraction(cap), eps_d, grid), Laplace(Fraction(1), eps_d / 3))


def _one_sided(mech: Laplace, width: float) -> float:
    """P(noise > width) for a released value whose half-width is (m + 1/2) grid steps."""
    m = round(width / float(mech.grid) - 0.5)
    return laplace_tail(mech.noise_scale, m) / 2


def _miss(answer: Laplace, plan: BiasPlan, w: TargetWidths) -> float:
    """An upper bound on P(the interval misses): the sum of its one-sided tails."""
    p = 2 * _one_sided(answer, w.b) + _one_sided(plan.dropped, w.d_hi)
    if plan.target.grid == 1:
        p += _one_sided(plan.dropped, w.d_lo)
    return p


CASES = [  # (answer sensitivity, answer epsilon, cap, grid, removed mass's epsilon)
    (1, Fraction(7, 10), 4, Fraction(1), Fraction(3, 40)),  # COUNT, R = 1
    (363, Fraction(7, 10), 1452, Fraction(1), Fraction(3, 40)),  # COUNT, R = 363
    (1, Fraction(7, 10), 4, Fraction(1), Fraction(10)),  # a well-measured removed mass
    (19100, Fraction(7, 10), 76400, Fraction(1, 16), Fraction(3, 80)),  # SUM, a fine grid
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_tails_sum_to_at_most_alpha(
    case: tuple[int, Fraction, int, Fraction, Fraction], level: float
) -> None:
    sens, eps, cap, grid, eps_d = case
    answer, plan = Laplace(Fraction(sens), eps, grid), _plan(cap, grid, eps_d)
    w = target_widths(answer, plan, level)
    assert _miss(answer, plan, w) <= (1 - level) * (1 + 1e-9)
    # the broken twin: each of the four tails given the whole alpha (no union bound)
    twin = target_widths(answer, plan, 1 - 4 * (1 - level))
    assert _miss(answer, plan, twin) > (1 - level)


def test_narrower_than_equal_shares_when_the_removed_mass_dominates() -> None:
    answer, plan = (
        Laplace(Fraction(363), Fraction(7, 10)),
        _plan(1452, Fraction(1), Fraction(3, 40)),
    )
    w = target_widths(answer, plan, 0.95)
    equal_b, equal_d = answer.half_width(0.975), plan.dropped.half_width(0.975)
    assert w.b + w.d_hi < 0.9 * (equal_b + equal_d), (w, equal_b, equal_d)
    # grid 1: the lower reach of the removed mass is used too, at RAISE_SHARE of alpha
    assert w.d_hi < w.d_lo < math.inf


@pytest.mark.parametrize("case", CASES)
def test_the_lower_reach_holds_at_a_tiny_share(
    case: tuple[int, Fraction, int, Fraction, Fraction],
) -> None:
    """The removed mass's lower tail, the only one that can lift the lower end above the answer,
    has probability at most alpha · RAISE_SHARE (1e-6 at 95%): a lower end lies above its
    answer without bounding having removed that much at most once in a million rows. The
    old split (a share in proportion to its noise: about alpha / 4) passes 1e-4."""
    from dpsql.execute.bias import RAISE_SHARE

    sens, eps, cap, grid, eps_d = case
    answer, plan = Laplace(Fraction(sens), eps, grid), _plan(cap, grid, eps_d)
    if grid != 1:
        assert target_widths(answer, plan, 0.95).d_lo == 0.0  # rounded up: no lower reach
        return
    w = target_widths(answer, plan, 0.95)
    assert _one_sided(plan.dropped, w.d_lo) <= 0.05 * RAISE_SHARE * (1 + 1e-9)
    old = plan.dropped.half_width(1 - 2 * 0.05 / 4)
    assert _one_sided(plan.dropped, old) > 1e-4


def test_avg_levels_split_alpha_over_its_parts() -> None:
    """AVG's four parts' two-sided levels: their alphas sum to the statement's (a union bound
    over the parts), the removed mass and rows (the noisiest, in value units) the larger shares;
    with no rows dropped (one row per unit) three parts share it and the rows' level is 1."""
    from dpsql.execute.bias import avg_levels

    c = BiasTarget(
        0,
        Measure("sum_centered", None, Fraction(0), Fraction(50), False),
        1,
        2**20,
        Fraction(1, 2**14),
        Fraction(0),
        Fraction(50),
        1,
    )
    mass = BiasPlan(
        c, Laplace(Fraction(200), Fraction(3, 80), c.grid), Laplace(Fraction(1), Fraction(1, 80))
    )
    rows = _plan(4, Fraction(1), Fraction(3, 80))
    answer = (Laplace(Fraction(25), Fraction(7, 20)), Laplace(Fraction(1), Fraction(7, 20)))
    for level in (0.9, 0.95, 0.99):
        got = avg_levels(answer, (mass, rows), level)
        assert sum(1 - x for x in got) == pytest.approx(1 - level, rel=1e-12)
        # the removed mass and rows (4x the sensitivity at a tenth of the epsilon) get the
        # larger shares of alpha: lower levels than the sum's and the count's
        assert max(got[2], got[3]) < min(got[0], got[1]), got
        one = avg_levels(answer, (mass, None), level)
        assert one[3] == 1.0 and sum(1 - x for x in one) == pytest.approx(1 - level, rel=1e-12)

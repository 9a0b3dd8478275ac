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


def _avg_plans() -> tuple[tuple[Laplace, Laplace], BiasPlan, BiasPlan]:
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
    return answer, mass, rows


def _avg_miss(
    answer: tuple[Laplace, Laplace], mass: BiasPlan, rows: BiasPlan | None, level: float
) -> float:
    """An upper bound on P(AVG's interval misses): the sum of its one-sided tails (the sum's
    and the count's two each, the mass above, the rows above and below)."""
    from dpsql.execute.bias import avg_widths

    w = avg_widths(answer, (mass, rows), level)
    p = 2 * _one_sided(answer[0], answer[0].half_width(w.sum_level))
    p += 2 * _one_sided(answer[1], answer[1].half_width(w.count_level))
    p += _one_sided(mass.dropped, w.mass_up)
    if rows is not None:
        p += _one_sided(rows.dropped, w.rows_up) + _one_sided(rows.dropped, w.rows_down)
    return p


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_avg_tails_sum_to_at_most_alpha(level: float) -> None:
    """AVG's one-sided tails (exact discrete Laplace tails) sum to at most alpha, with rows
    dropped or not; the twin (the split of twice the alpha, as if the union bound were
    loose by half) exceeds it."""
    answer, mass, rows = _avg_plans()
    for r in (rows, None):
        assert _avg_miss(answer, mass, r, level) <= (1 - level) * (1 + 1e-9)
        assert _avg_miss(answer, mass, r, 1 - 2 * (1 - level)) > 1 - level


def test_avg_lower_reaches_hold_at_a_tiny_share() -> None:
    """The removed rows' lower reach, the only part that can pull AVG's upper end below its
    answer, misses with probability at most alpha · RAISE_SHARE; the removed mass has none (it
    is rounded up: an upper bound only), on grid 1 too. The old split gave the rows' lower
    tail about half the rows' share (above 1e-3 here); the removed mass and rows, the noisiest
    in value units, still get the larger shares of the rest."""
    import dataclasses

    from dpsql.execute.bias import RAISE_SHARE, avg_widths

    answer, mass, rows = _avg_plans()
    w = avg_widths(answer, (mass, rows), 0.95)
    assert _one_sided(rows.dropped, w.rows_down) <= 0.05 * RAISE_SHARE * (1 + 1e-9)
    assert _one_sided(rows.dropped, w.rows_up) > 1e-3
    assert w.mass_down == math.inf
    assert max(w.sum_level, w.count_level) > 1 - 2 * _one_sided(rows.dropped, w.rows_up)
    grid1 = dataclasses.replace(mass, target=dataclasses.replace(mass.target, grid=Fraction(1)))
    assert avg_widths(answer, (grid1, rows), 0.95).mass_down == math.inf
    one = avg_widths(answer, (mass, None), 0.95)
    assert one.rows_up == one.rows_down == 0.0

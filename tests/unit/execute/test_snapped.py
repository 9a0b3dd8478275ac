"""A measure's true values on its grid (dpsql.execute.noise._snapped) in Python integers: the same
floats as the exact Fraction arithmetic it replaces, ``float(round(Fraction(v) / grid) * grid)``
(NULL as 0), for every kind of value PostgreSQL sends (int, numeric, float) and every grid,
ties (half a step) included: rounded half to even."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpsql.execute import noise

GRIDS = [Fraction(1), Fraction(2), Fraction(1024), Fraction(1, 2**10), Fraction(1, 2**40),
         Fraction(3, 7), Fraction(5, 2)]  # fmt: skip
VALUES: list[Any] = [
    None, 0, 1, -1, 7, -7, 2**70 + 1, -(2**64) - 3, True,
    Decimal("2.5"), Decimal("-3.5"), Decimal("0.5"), Decimal("1.5"), Decimal("-0.5"),
    Decimal("1e-30"), Decimal("123456789.123456789"), Decimal("-98765.4321"), Decimal("0E-10"),
    0.5, 1.5, -2.5, 2.5, 1e-300, 3.14159, -1e15 + 0.5, 1e300,
]  # fmt: skip


def _fraction_snapped(values: list[Any], grid: Fraction) -> np.ndarray:
    exact = [Fraction(v) if v is not None else Fraction(0) for v in values]
    return np.array([float(round(v / grid) * grid) for v in exact], dtype=np.float64)


@pytest.mark.parametrize("grid", GRIDS, ids=str)
def test_snapped_is_the_fraction_arithmetic(grid: Fraction) -> None:
    ties = [grid * k / 2 for k in range(-7, 8, 2)]  # exactly half a step past a multiple
    values = VALUES + [Decimal(t.numerator) / Decimal(t.denominator) for t in ties
                       if Decimal(t.numerator) / Decimal(t.denominator) == t]  # fmt: skip
    values += [float(t) for t in ties if Fraction(float(t)) == t]
    got, want = noise._snapped(values, grid), _fraction_snapped(values, grid)
    assert got.tolist() == want.tolist()
    assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in want]


def test_ties_round_half_to_even() -> None:
    """Half a step rounds to the even multiple (a half-up twin would give 3 and -2 here)."""
    got = noise._snapped([Decimal("2.5"), Decimal("-2.5"), 5, -5], Fraction(2))
    assert got.tolist() == [2.0, -2.0, 4.0, -4.0]
    assert noise._snapped([Decimal("2.5"), Decimal("-2.5")], Fraction(1)).tolist() == [2.0, -2.0]


def test_a_non_finite_value_is_refused_as_before() -> None:
    for bad in (Decimal("NaN"), float("inf")):
        with pytest.raises((ValueError, OverflowError)) as new:
            noise._snapped([bad], Fraction(1))
        with pytest.raises((ValueError, OverflowError)) as old:
            _fraction_snapped([bad], Fraction(1))
        assert new.type is old.type

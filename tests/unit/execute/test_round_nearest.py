"""The one presentation step (dpsql.execute.bias): a released value to the nearest multiple of
10^(floor(log10 h) - 2), h its noise half-width, the step its interval's ends round outwards to."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dpsql.execute.bias import round_nearest, round_outwards, step_exponent


@pytest.mark.parametrize(
    ("v", "h", "want"),
    [
        (Decimal("75.5042735042735"), 250.0, Decimal("76")),  # step 1
        (Decimal("75.5042735042735"), 2.5, Decimal("75.50")),  # step 0.01
        (Decimal("1819056"), 4.97e6, Decimal("1820000")),  # step 10^4, no exponent notation
        (75.5042735042735, 2.5, 75.5),  # a double stays a double
        (Decimal("75.5"), 2.5, Decimal("75.5")),  # ROUND(x, 1): not padded to 75.50
        (24216, 9000.0, 24216),  # integers untouched
        (None, 1.0, None),
        ("books", 1.0, "books"),
        (True, 1.0, True),
        (3.14159, 0.0, 3.14159),  # no noise: as it is
        (3.14159, float("inf"), 3.14159),
        (float("nan"), 1.0, None),  # (nan checked below)
    ],
)
def test_round_nearest(v: object, h: float, want: object) -> None:
    got = round_nearest(v, h)
    if want is None and isinstance(v, float):
        assert got != got  # NaN stays NaN
        return
    assert got == want and type(got) is type(want)
    if isinstance(want, Decimal):
        assert str(got) == str(want)


@pytest.mark.parametrize("h", [0.0031, 0.5, 2.5, 250.0, 4.97e6])
@pytest.mark.parametrize("v", [-1234.56789, 0.000123, 75.5042735042735, 1819056.7])
def test_moves_at_most_half_a_step_stays_inside_and_is_idempotent(v: float, h: float) -> None:
    step = 10.0 ** step_exponent(h)
    got = round_nearest(v, h)
    assert abs(got - v) <= step / 2 * (1 + 1e-9) and step <= h / 100
    lo, hi = round_outwards((v - h, v + h), h)
    assert lo <= got <= hi
    assert round_nearest(got, h) == got
    d = round_nearest(Decimal(repr(v)), h)
    assert abs(float(d) - v) <= step / 2 * (1 + 1e-9)
    assert round_nearest(d, h) == d

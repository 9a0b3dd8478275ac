"""The interval of a count (or a SUM of values of one sign) when its noisy value lies past 0
(dpsql.sql.postprocess.derive). Deterministic.

Property: the truth t is >= 0 (<= 0), so if the noise left it within w of the noisy value v, it
lies in [max(0, v - w), max(0, v) + w]; the interval never claims more certainty than the noise
gives: its far end is at least w from 0, whatever v. The broken twin -- the old clip of both
ends at 0, [max(0, v - w), max(0, v + w)] -- gave [0, 0] for v < -w (the demo's
``SELECT n, COUNT(*) FROM (SELECT user_id, COUNT(*) AS n ...) t GROUP BY n`` printed
``28 | 0 | 0 | 0`` under noise of ±3.5) and fails the same check.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.sql.analysis import Statistic
from dpsql.sql.postprocess import derive

W = 3.5
COUNT = Statistic("count", ("m",), Fraction(0), Fraction(0), "int8", "COUNT(*)")
SUM_POS = Statistic("sum", ("m",), Fraction(0), Fraction(50), "numeric", "SUM(v)")
SUM_NEG = Statistic("sum", ("m",), Fraction(-50), Fraction(0), "numeric", "SUM(v)")


def _old(v: float, sign: int) -> tuple[float, float]:
    if sign > 0:
        return max(0.0, v - W), max(0.0, v + W)
    return min(0.0, v - W), min(0.0, v + W)


def _holds(iv: tuple[float, float], v: float, sign: int) -> bool:
    """Whether ``iv`` holds every t of the right sign within W of v, and reaches at least W
    from 0 on the far side."""
    lo, hi = iv
    if sign > 0:
        return lo <= max(0.0, v - W) and hi >= max(0.0, v) + W - 1e-12 and hi >= W
    return hi >= min(0.0, v + W) and lo <= min(0.0, v) - W + 1e-12 and lo <= -W


VALUES = [-20.0, -W - 0.1, -1.0, 0.0, 2.0, 100.0]


@pytest.mark.parametrize("v", VALUES)
@pytest.mark.parametrize(("stat", "sign"), [(COUNT, 1), (SUM_POS, 1), (SUM_NEG, -1)])
def test_the_far_end_keeps_the_noise(stat: Statistic, sign: int, v: float) -> None:
    x = -v if sign < 0 else v
    value, iv = derive(stat, [x], [W])
    assert iv is not None and _holds(iv, x, sign), (x, value, iv)


def test_the_old_clip_claims_certainty() -> None:
    wrong = [v for v in VALUES if not _holds(_old(v, 1), v, 1)]
    assert wrong == [-20.0, -W - 0.1, -1.0], wrong
    assert _old(-20.0, 1) == (0.0, 0.0)

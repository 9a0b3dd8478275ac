"""`dpsql query` / `dpsql demo` print an interval end the accuracy notice disowns (an infinite
end in the result's intervals, a NULL column over the wire) as 'unknown', never as `inf` or
`-inf`, which reads as a bound (issue 16)."""

from __future__ import annotations

import math

import pytest

from dpsql import cli
from dpsql.result import Result, ResultColumn


def _printed(capsys: pytest.CaptureFixture[str], iv: tuple[float, float]) -> str:
    r = Result(
        (ResultColumn("count", 20, mechanism="laplace"),),
        [(120_120,)],
        "SELECT 1",
        epsilon_spent=1.0,
        intervals=[(iv,)],
    )
    cli.print_result(r)
    return capsys.readouterr().out


def test_a_disowned_end_prints_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    out = _printed(capsys, (119_922.0, math.inf))
    assert "[119,922, unknown]" in out and "inf" not in out, out
    assert "unknown: an end its notice says does not hold" in out, out
    out = _printed(capsys, (-math.inf, 14.65))
    assert "[unknown, 14.65]" in out and "inf" not in out, out


def test_both_ends_print_as_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    out = _printed(capsys, (119_922.0, 123_866.0))
    assert "[119,922, 123,866]" in out and "unknown" not in out, out

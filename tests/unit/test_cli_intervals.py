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


def _printed_value(capsys: pytest.CaptureFixture[str], v: object, iv: tuple[float, float]) -> str:
    r = Result(
        (ResultColumn("min", 1082, mechanism="exponential"),),
        [(v,)],
        "SELECT 1",
        epsilon_spent=1.0,
        intervals=[(iv,)],
    )
    cli.print_result(r)
    return capsys.readouterr().out


def test_a_dates_ends_print_as_dates(capsys: pytest.CaptureFixture[str]) -> None:
    """A date's interval ends are released as days since 1970-01-01 (newcomer23 #20: the demo
    printed MIN(purchased_at)'s as '[unknown, 20,243]'): printed as dates, rounded outwards to
    whole days as the wire's _low/_high columns are; a timestamp's (seconds) as timestamps, in
    the value's own time zone."""
    import datetime as dt

    out = _printed_value(capsys, dt.date(2025, 6, 2), (20240.5, 20243.2))
    assert "2025-06-02  [2025-06-01, 2025-06-05]" in out and "20,24" not in out, out
    out = _printed_value(capsys, dt.date(2025, 6, 2), (-math.inf, 20243.0))
    assert "[unknown, 2025-06-04]" in out, out
    naive = dt.datetime(2025, 6, 1, 12, 0)
    out = _printed_value(capsys, naive, (1748779200.0, 1748782800.0))
    assert "[2025-06-01 12:00:00, 2025-06-01 13:00:00]" in out, out
    ny = dt.timezone(dt.timedelta(hours=-4))
    out = _printed_value(capsys, naive.replace(tzinfo=ny), (1748779200.0, math.inf))
    assert "[2025-06-01 08:00:00-04:00, unknown]" in out, out

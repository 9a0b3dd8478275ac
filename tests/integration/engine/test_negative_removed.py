"""A removed-mass estimate below 0 shortens the interval's reach: the notice must say so.

A COUNT's (or non-negative SUM's) interval reaches beyond the noise, on the side the bounds pull
from, by the removed mass's estimate plus its noise's reach, at 0 if below
(:func:`dpsql.execute.bias.target_interval`). When little was removed the estimate is mostly
noise and can come out below 0: the reach is then shorter, or none. Session 20's newcomer read
'about 0 rows, and up to 14,998 more given that estimate's noise; so it reaches further above
the answer' beside a ``count_high`` only the noise above its answer.

Deterministic: the zero-noise engine, with the released removed mass set below 0 (the release's
own numbers otherwise); the property is that the reach the notice states is the reach the
interval columns have.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpsql.engine import Engine
from dpsql.execute import noise as noise_module
from dpsql.execute.bias import Removed
from dpsql.session import SessionContext

NO_FURTHER = "so it reaches no further above the answer than the noise does"


def _shifted(monkeypatch: pytest.MonkeyPatch, times: float) -> None:
    """Every released removed mass set to ``-times`` its noise's 95% half-width (grid 1: 1 row
    when ``times`` is 0)."""
    original = noise_module.release_removed

    def release_removed(*args: Any, **kw: Any) -> dict[str, Removed]:
        out = original(*args, **kw)
        for r in out.values():
            w = r.plan.dropped.half_width(0.95) * times if times else 1.0
            r.dropped[:] = -w
        return out

    monkeypatch.setattr(noise_module, "release_removed", release_removed)


def _ask(engine: Engine, sql: str) -> Any:
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
    return engine.execute(engine.prepare(sql, "analyst"), s)


def _num(x: str) -> float:
    return float(x.replace(",", ""))


def test_an_estimate_far_below_zero_reaches_no_further(
    exact_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shifted(monkeypatch, 10)
    r = _ask(exact_engine, "SELECT COUNT(*) FROM purchases")
    line = next(n for n in r.notices if n.startswith("COUNT(*): "))
    ((value, lo, hi),) = r.rows
    noise = _num(re.search(r"noise ±([\d,.]+)", line).group(1))  # type: ignore[union-attr]
    assert NO_FURTHER in line and "and up to" not in line, line
    assert hi - value <= noise + 1  # (interval ends rounded to the noise's resolution)
    assert "Most of the width is that estimate" not in line


def test_an_estimate_a_little_below_zero_reaches_that_much_less(
    exact_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shifted(monkeypatch, 0)
    r = _ask(exact_engine, "SELECT COUNT(*) FROM purchases")
    line = next(n for n in r.notices if n.startswith("COUNT(*): "))
    ((value, lo, hi),) = r.rows
    noise = _num(re.search(r"noise ±([\d,.]+)", line).group(1))  # type: ignore[union-attr]
    m = re.search(r"came out at -1, below 0\), and up to ([\d,.]+) more", line)
    assert m is not None, line
    assert hi - value == pytest.approx(noise + _num(m.group(1)), abs=2)


def test_groups_whose_estimate_is_below_zero_are_counted(
    exact_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shifted(monkeypatch, 10)
    r = _ask(exact_engine, "SELECT category, COUNT(*) FROM purchases GROUP BY category")
    line = next(n for n in r.notices if n.startswith("COUNT(*): "))
    n = len(r.rows)
    assert f"({n} of {n} groups); in every group it came out below 0 by more than that" in line
    noise = _num(re.search(r"noise ±([\d,.]+)", line).group(1))  # type: ignore[union-attr]
    assert all(hi - value <= noise + 1 for _, value, _, hi in r.rows), r.rows
    assert np.isfinite(noise)

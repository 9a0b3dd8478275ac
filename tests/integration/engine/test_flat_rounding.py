"""A flat statement's non-integer values carry the digits their noise supports, not 13-17
(issue 16, item 5: ``AVG(amount)`` answered 75.5042735042735).

Property (deterministic, zero noise: the values are the exact bounded aggregates, the intervals
the mechanism's own): every released value v of an output with an interval of half-width h is a
multiple of the step 10^(floor(log10 h') - 2) for the half-width h' <= h it was rounded at (the
interval's, or a statistic's noise's own where its interval is wider by what the bounds may have
left out: at most 3 decades finer here), so it prints no digit below it, and it lies within
h / 200 of the unrounded value, far inside its interval. The noise's own step is checked
against the mechanisms' half-widths in
:func:`test_a_value_is_rounded_at_its_noise_not_at_the_reach_of_what_bounding_removed`. Checked for AVG, STDDEV, VARIANCE, a SUM of numerics and expressions over
the statistics (a ratio with an interval, a square root without one: the tree statements' rule,
relative half-width of what it reads). The broken twin (tests.helpers.unrounded: no rounding)
keeps 13-17 digits and fails the digit check.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.execute import noise
from dpsql.execute.bias import avg_targets
from dpsql.execute.noise import release
from dpsql.session import SessionContext
from dpsql.sql.postprocess import derive
from tests.helpers import EXACT, answered_averages, kept, unrounded

SQL = (
    "SELECT category, AVG(amount) AS a, STDDEV(amount) AS sd, VARIANCE(amount) AS v, "
    "SUM(amount) AS s, SUM(amount) / COUNT(*) AS ratio, SQRT(VARIANCE(amount)) AS root, "
    "COUNT(*) AS n FROM purchases GROUP BY category ORDER BY category"
)


def _ask(engine: Engine) -> Any:
    s = SessionContext(analyst="analyst")
    s.show_intervals = False
    return engine.execute(engine.prepare(SQL), s)


def _on_step(v: Any, h: float) -> bool:
    """v (numeric or float) is a multiple of 10^(floor(log10 h) - 2)."""
    e = math.floor(math.log10(h)) - 2
    if isinstance(v, Decimal):
        return v == v.quantize(Decimal(1).scaleb(e)) if e < 0 else v % Decimal(10) ** e == 0
    q = v / 10.0**e
    return abs(q - round(q)) <= 1e-6 * max(1.0, abs(q))


def _violations(res: Any) -> list[tuple[str, Any, float]]:
    names = [c.name for c in res.columns]
    bad = []
    for row, ivs in zip(res.rows, res.intervals, strict=True):
        for name, v, iv in zip(names, row, ivs, strict=True):
            if iv is None or v is None or isinstance(v, (int, str)):
                continue
            h = (iv[1] - iv[0]) / 2
            if not any(_on_step(v, h / 10**k) for k in range(4)):
                bad.append((name, v, h))
    return bad


def test_values_keep_the_digits_their_noise_supports(
    exact_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the averages answered (with STDDEV, VARIANCE and SUM beside it, AVG(amount)'s interval
    # spans 0 to 500: NULL since words28), whose rounding is checked here
    answered_averages(monkeypatch)
    shown = _ask(exact_engine)
    # VARIANCE/STDDEV over several rows a user kept at a few: their notice says the interval
    # covers the noise only, so their columns are NULL (and those of expressions over a
    # disowned one, issue 16), yet every value keeps the digits of its noise: the same rows
    # as with every interval kept, which the checks below read (zero noise: one answer)
    assert shown.intervals is not None
    names = [c.name for c in shown.columns]
    assert all(row[names.index("v")] is None for row in shown.intervals), shown.notices
    with monkeypatch.context() as m:
        kept(m)
        got = _ask(exact_engine)
    assert got.rows == shown.rows
    assert got.intervals is not None and got.rows
    names = [c.name for c in got.columns]
    checked = {n for row in got.intervals for n, iv in zip(names, row, strict=True) if iv}
    assert {"a", "sd", "v", "s", "ratio"} <= checked  # each output with an interval is checked
    assert _violations(got) == []
    with monkeypatch.context() as m:  # the twin: unrounded
        unrounded(m)
        kept(m)
        raw = _ask(exact_engine)
    assert len(_violations(raw)) >= len(got.rows) * 4  # the check catches 17 digits
    for row, twin, ivs in zip(got.rows, raw.rows, got.intervals, strict=True):
        assert row[0] == twin[0] and row[-1] == twin[-1]  # keys and counts untouched
        for name, v, w, iv in zip(names, row, twin, ivs, strict=True):
            if isinstance(v, (Decimal, float)) and iv is not None:
                h = (iv[1] - iv[0]) / 2
                assert abs(float(v) - float(w)) <= h / 200 + 1e-9 * abs(float(w)), name
                assert type(v) is type(w), name  # numeric stays numeric, double stays double
        # no interval (SQRT): rounded by the relative half-width of VARIANCE, to <= 1e-4 of it
        root, twin_root = row[names.index("root")], twin[names.index("root")]
        assert abs(float(root) - float(twin_root)) <= 1e-2 * abs(float(twin_root))
        assert len(str(root)) < len(str(twin_root)), (root, twin_root)


def test_a_value_is_rounded_at_its_noise_not_at_the_reach_of_what_bounding_removed(
    exact_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An AVG whose interval also reaches over what the contribution bounds left out (the demo's
    AVG(amount) by category at fixed bounds: an interval of +-250, the whole declared range) is
    rounded at its noise's own 95% half-width h_n (its two measures' Laplace half-widths at
    1 - 0.05/2 through the ratio, from the exact measures), not at the interval's: within
    10^(floor(log10 h_n) - 2) / 2 of the exact bounded average. Before, it was rounded to the
    interval's step (1, for an AVG whose noise is about +-10: an error of up to 0.5 added to
    one of about 0.1), the broken twin below. Deterministic (zero noise)."""
    kept(monkeypatch)  # the interval the rounding reads, before the notice disowns it
    sql = "SELECT category, AVG(amount) FROM purchases GROUP BY category"
    s = SessionContext(analyst="analyst")
    p = exact_engine.prepare(sql)
    plan = exact_engine.plan(p, s)
    a = plan.analysis  # type: ignore[union-attr]
    (stat,) = a.statistics
    assert avg_targets(stat, plan) is not None  # type: ignore[arg-type]
    rows = exact_engine.backend.run(exact_engine.private_sql(p, a), private=True).rows
    args = (plan, rows, exact_engine.group_types(p, a), exact_engine.declared_keys(a), 0.95)
    nk = len(a.group_keys)
    raw = {tuple(r[:nk]): [float(x) for x in r[nk : nk + 2]] for r in rows}
    ws = [plan.measure_plan(m).mechanism.half_width(1 - 0.05 / 2) for m in stat.measures]  # type: ignore[union-attr]

    def checked(rel: noise.Release) -> list[tuple[float, float]]:
        """(|released - exact|, the noise step) per group."""
        out = []
        for g, (v,), (iv,) in zip(rel.groups, rel.stats, rel.intervals, strict=True):
            exact, niv = (
                derive(stat, raw[tuple(g)], [0.0, 0.0])[0],
                derive(stat, raw[tuple(g)], ws)[1],
            )
            assert iv is not None and niv is not None
            h_n, h = (niv[1] - niv[0]) / 2, (iv[1] - iv[0]) / 2
            step = 10.0 ** (math.floor(math.log10(h_n)) - 2)
            assert step < 10.0 ** (math.floor(math.log10(h)) - 2), (h_n, h)  # a case in point
            out.append((abs(float(v) - float(exact)), step))
        return out

    got = checked(release(*args, EXACT))
    assert len(got) == 5 and all(d <= step / 2 * (1 + 1e-9) for d, step in got), got
    with monkeypatch.context() as m:  # the twin: rounded at the interval's half-width
        m.setattr(noise, "noise_resolution", lambda own, hw: hw)
        twin = checked(release(*args, EXACT))
    assert any(d > step / 2 * (1 + 1e-9) for d, step in twin), twin

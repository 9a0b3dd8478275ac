"""Which SUM/AVG bias targets count the units with a value outside the declared bounds
(dpsql.sql.bias.declared_columns), and what that costs (bias_plans). Deterministic."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.sql.bias import DROPPED_SHARE, OUTSIDE_SHARE, bias_plans, bias_targets
from tests.unit.sql.test_bound_partials import analysis

CASES = [
    ("SELECT SUM(x) FROM p", {"sum": ("x",)}),
    ("SELECT SUM(x * 2) FROM p", {"sum": ("x",)}),
    ("SELECT SUM(CAST(x AS NUMERIC)) FROM p WHERE x > 3", {"sum": ("x",)}),
    ("SELECT AVG(x) FROM p", {"sum_centered": ("x",), "count_values": ()}),
    ("SELECT COUNT(*) FROM p", {"count_rows": ()}),
    # a branch or FILTER a row may skip: its value would count as outside though never summed
    ("SELECT SUM(CASE WHEN f = 'a' THEN x ELSE 0 END) FROM p", {"sum": ()}),
    ("SELECT SUM(x) FILTER (WHERE f = 'a') FROM p", {"sum": ()}),
]


@pytest.mark.parametrize(("sql", "declared"), CASES, ids=[c[0] for c in CASES])
def test_declared_columns(sql: str, declared: dict[str, tuple[str, ...]]) -> None:
    got = {t.measure.kind: t.declared for t in bias_targets(analysis(sql))}
    assert got == declared


@pytest.mark.parametrize(("sql", "_"), CASES, ids=[c[0] for c in CASES])
def test_the_outside_count_takes_half_the_alarms_part_and_nothing_else(sql: str, _: object) -> None:
    eps = Fraction(1, 10)
    targets = bias_targets(analysis(sql))
    plans = bias_plans(targets, eps)
    assert sum((p.cost.epsilon for p in plans), Fraction(0)) == eps
    for p in plans:
        each = eps / len(plans)
        assert p.dropped.epsilon == each * DROPPED_SHARE
        alarms = each * (1 - DROPPED_SHARE)
        if p.target.declared:
            assert p.outside is not None and p.outside.epsilon == alarms * OUTSIDE_SHARE
            assert p.over_cap.epsilon == alarms * (1 - OUTSIDE_SHARE)
        else:
            assert p.outside is None and p.over_cap.epsilon == alarms

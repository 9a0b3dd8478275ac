"""Each grouping set is planned as the single GROUP BY of its keys (docs/sql.md), ``auto`` bounds
included: a per-group COUNT or SUM under ROLLUP / CUBE / GROUPING SETS gets the same L1 cap over
a unit's groups as the plain GROUP BY (:func:`dpsql.sql.auto_bounds.total_mode`), so a set's
noise is the plain GROUP BY's times the budget split (k sets: k times), nothing more.

Session 20's newcomer measured ROLLUP (category, region)'s finest set at ~20x the noise of the
plain GROUP BY category, region: 3x is the split over 3 sets, the rest was the sets being left
out of the L1 cap (G·R = 25 groups x 16 rows = 400 per unit against L = 16).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from dpsql.demo import POLICY
from dpsql.execute.auto_bounds import Pending, with_defaults
from dpsql.policy import load_policy
from dpsql.sql.analysis import Analysis
from dpsql.sql.analyze import analyze
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.auto_bounds import auto_items, policy_choices
from dpsql.sql.grouping_sets import make_sets_plan
from dpsql.sql.parse import parse_statement
from dpsql.sql.plan import make_plan

SELECT = "SELECT sex, married, COUNT(*), SUM(income) FROM pums GROUP BY "


def _bounded(sql: str) -> Analysis:
    """The analysis with its ``auto`` bounds at one fixed choice (L = 7 rows, 90,000 of income
    over a unit's groups; whatever else at its default), as a statement that chose them runs."""
    tree = parse_statement(sql).tree
    assert tree is not None
    a = analyze(tree, load_policy(POLICY))
    pend = Pending(AutoBounds(policy_choices(a)), auto_items(a))
    chosen = []
    for c in with_defaults(pend).chosen:
        if c.kind == "total":
            value = Fraction(7) if c.column.startswith("count") else Fraction(90_000)
            c = replace(c, value=value)
        chosen.append(c)
    return apply_bounds(a, AutoBounds(tuple(chosen)))


def _plain(keys: str) -> str:
    """The plain GROUP BY of one set's keys."""
    return f"SELECT {keys}, COUNT(*), SUM(income) FROM pums GROUP BY {keys}"


@pytest.mark.parametrize(
    "grouping",
    [
        "ROLLUP (sex, married)",
        "CUBE (sex, married)",
        "GROUPING SETS ((sex, married), (married), ())",
    ],
)
def test_each_set_is_noised_as_its_plain_group_by(grouping: str) -> None:
    a = _bounded(SELECT + grouping)
    eps = Fraction(1)
    plan = make_sets_plan(a, eps, Fraction(0))
    k = len(plan.sets)
    assert all(m.total is not None for m in a.measures)  # an L1 cap, as for the plain GROUP BY
    for sp in plan.sets:
        got = [(mp.measure.kind, mp.sensitivity, mp.mechanism.std) for mp in sp.plan.measures]
        if not sp.keys:  # the grand total: one group, the unit's total capped at L
            assert [g[:2] for g in got] == [("count_rows", 7), ("sum", 90_000)]
            continue
        sql = _plain(", ".join(("sex", "married")[i] for i in sp.keys))
        plain = make_plan(_bounded(sql), eps / k, Fraction(0))
        want = [(mp.measure.kind, mp.sensitivity, mp.mechanism.std) for mp in plain.measures]
        assert got == want, (sp.keys, sql)
        assert [g[:2] for g in got] == [("count_rows", 7), ("sum", 90_000)]
        # and at the whole epsilon, the plain GROUP BY's noise is the set's over k
        whole = make_plan(_bounded(sql), eps, Fraction(0))
        for mine, its in zip(sp.plan.measures, whole.measures, strict=True):
            want_std = k * float(its.mechanism.std)
            assert float(mine.mechanism.std) == pytest.approx(want_std, rel=1e-3)

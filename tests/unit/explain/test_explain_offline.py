"""``dpsql explain`` without an upstream (dpsql/explain/report.py): the plan it shows is the plan
the statement runs with, as far as it can be known without data.

Property (deterministic, from the plan alone): with ``auto`` bounds (the demo policy's default),
the bounds fixed without data are in the plan (G = the number of declared keys when there are at
most 32, R = 1 per group for an AVG over them), the epsilon of the bounds chosen when the
statement runs is taken out of the measures' and said, and a statement with nothing to choose
gets no such line. Before this, the offline plan showed G = 1 for ``GROUP BY category`` (5
declared keys) and a 95% half-width 5 times smaller than the one the statement runs with.
"""

from __future__ import annotations

import re
from fractions import Fraction

from dpsql.demo import POLICY
from dpsql.explain.report import explain, explain_leaves
from dpsql.policy import load_policy
from dpsql.session import SessionContext
from tests.policies import fixed_demo_policy

SESSION = SessionContext(analyst="analyst", epsilon=Fraction(1))
BY_CATEGORY = "SELECT category, AVG(amount) FROM purchases GROUP BY 1"


def test_offline_plan_has_the_declared_groups_and_the_auto_share() -> None:
    rep = explain(load_policy(POLICY), BY_CATEGORY, SESSION)
    assert "<= 5 groups" in rep.contribution and "<= 1 row per group" in rep.contribution
    assert rep.auto is not None
    assert "5 groups per user_id (from the declared keys; set without the data, free)" in rep.auto
    assert "1 row per user_id per group (dpsql's rule for per-group averages" in rep.auto
    assert "upper clamp of amount: chosen from the data" in rep.auto
    assert "epsilon 0.2 of its 1" in rep.auto and "no ledger is read" in rep.auto
    # the cost is what running it charges: the answer at 0.8 and the bound choice at 0.2
    assert rep.epsilon == 1 and rep.cost.startswith("epsilon=1,")
    assert "epsilon 0.8 for the answer and 0.2 for choosing contribution bounds" in rep.cost
    # until chosen, the clamp is at its default (the declared range): its error says so
    [out] = [o for o in rep.outputs if o.column == "avg"]
    assert "at the default bounds shown" in out.half_width
    # a group whose noisy count is below the AVG's clear count is NULL (avg_unclear): said
    assert re.search(
        r"NULL where N is below [\d,]+ or the interval spans the whole range\)", out.half_width
    ), out.half_width
    # the sum's sensitivity is G = 5 times one group's (the centered clamp [0, 500] and its grid)
    total = next(m for m in rep.measures if m.measure.startswith("the sum part of AVG(amount)"))
    assert total.sensitivity == "L1=1255"


def test_fixed_bounds_have_no_auto_line() -> None:
    rep = explain(fixed_demo_policy(), BY_CATEGORY, SESSION)
    assert rep.auto is None and rep.epsilon == 1 and rep.cost.startswith("epsilon=1,")


def test_each_leaf_of_a_tree_gets_its_auto_line() -> None:
    sql = (
        "SELECT category, SUM(revenue) FROM (SELECT category, region, SUM(amount) AS revenue "
        "FROM purchases GROUP BY 1, 2) AS v GROUP BY category"
    )
    leaves = explain_leaves(load_policy(POLICY), sql, SESSION)
    assert len(leaves) == 1 and leaves[0][1].auto is not None
    assert "chosen from the data when the statement runs" in leaves[0][1].auto


def test_measures_are_named_by_the_statements_aggregates() -> None:
    """newcomer30 W4: the measure table said sum_centered(amount)[0,500], count_values(amount)[0,0]
    (an AVG's count shown with bounds [0,0]) and "removed by bounds of sum_centered(...)": dpsql's
    internal names. Each measure is named by the aggregates it serves, as written, and its part;
    a count shared by AVG(amount) and COUNT(amount) names both."""
    rep = explain(load_policy(POLICY), BY_CATEGORY, SESSION)
    said = [m.measure for m in rep.measures]
    assert said == [
        "the sum part of AVG(amount) (amount clamped to [0, 500])",
        "the count part of AVG(amount)",
        "removed by bounds from the sum part of AVG(amount) (cap 2000 per unit)",
        "over cap by bounds in the sum part of AVG(amount) (cap 2000 per unit)",
        "outside declared range by bounds in the sum part of AVG(amount) (amount clamped to "
        "[0, 500])",
        "removed by bounds from the count part of AVG(amount) (cap 4 per unit)",
        "over cap by bounds in the count part of AVG(amount) (cap 4 per unit)",
    ], said
    sql = "SELECT COUNT(amount), AVG(amount), VARIANCE(amount), MEDIAN(amount) FROM purchases"
    said = [m.measure for m in explain(load_policy(POLICY), sql, SESSION).measures]
    assert "COUNT(amount) and the count part of AVG(amount) and VARIANCE(amount)" in said, said
    assert "the sum of squares part of VARIANCE(amount) (amount clamped to [0, 500])" in said
    assert "MEDIAN(amount) (amount in [0, 500])" in said, said
    internal = re.compile(r"sum_centered|sum_sq|count_values|count_rows|quantile\(|\[0,0\]")
    assert not [m for m in said if internal.search(m)], said

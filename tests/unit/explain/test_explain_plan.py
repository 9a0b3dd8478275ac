"""The DP plan as a PostgreSQL-shaped EXPLAIN document (dpsql/explain/document.py), no database.

Properties: the tree has PostgreSQL's keys with zero costs; the root's row count comes from the
policy's declared keys only; FORMAT XML is well-formed PostgreSQL XML whatever the text holds;
COSTS OFF drops the cost keys.
"""

from __future__ import annotations

import doctest
from fractions import Fraction
from typing import Any
from xml.etree import ElementTree

import pytest

import dpsql.explain.document as mod
from dpsql.demo import POLICY
from dpsql.explain.document import plan_document, plan_lines, plan_xml, policy_rows
from dpsql.explain.report import report
from dpsql.policy import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.grouping_sets import make_sets_plan
from dpsql.sql.parse import parse_statement
from dpsql.sql.plan import make_plan

NS = {"e": mod.XML_NAMESPACE}
BUDGET = {"Ledger": False, "Note": "no budget ledger: nothing would be charged"}


def _doc(sql: str, **kw: Any) -> dict[str, Any]:
    policy = load_policy(POLICY)
    tree = parse_statement(sql).tree
    assert tree is not None
    a = analyze(tree, policy)
    eps, delta = Fraction(1), Fraction(1, 10**6)
    plan = make_sets_plan(a, eps, delta) if a.grouping_sets else make_plan(a, eps, delta)
    return plan_document(report(sql, plan, 0.95), plan, 0.95, BUDGET, **kw)


def test_doctests() -> None:
    assert doctest.testmod(mod).failed == 0


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("SELECT count(*) FROM pums", 1),
        ("SELECT sex, count(*) FROM pums GROUP BY sex", 2),
        ("SELECT sex, married, count(*) FROM pums GROUP BY sex, married", 4),
        ("SELECT sex, married, count(*) FROM pums GROUP BY ROLLUP (sex, married)", 4 + 2 + 1),
        ("SELECT age, count(*) FROM pums GROUP BY age", 101),  # its bounds' whole numbers
        ("SELECT income, count(*) FROM pums GROUP BY income", 0),  # partition selection
        ("SELECT region, count(*) FROM purchases GROUP BY region", 0),  # keys_from a table
    ],
)
def test_root_rows_come_from_the_policy(sql: str, rows: int) -> None:
    doc = _doc(sql)
    root = doc["Plan"]
    assert root["Plan Rows"] == rows
    assert root["Startup Cost"] == root["Total Cost"] == 0.0
    assert root["Plan Width"] == 8 * len(root["Output"])
    for child in root["Plans"]:
        assert child["Plan Rows"] == 0 and child["Total Cost"] == 0.0
    tree = parse_statement(sql).tree
    assert tree is not None
    assert policy_rows(analyze(tree, load_policy(POLICY))) == rows


def test_join_has_one_scan_per_table() -> None:
    doc = _doc(
        "SELECT regions.name, count(*) FROM purchases JOIN regions "
        "ON purchases.region = regions.code GROUP BY regions.name"
    )
    scans = [p for p in doc["Plan"]["Plans"] if p["Node Type"] != "DP Measure"]
    assert [(s["Node Type"], s["Relation Name"], s["Private"]) for s in scans] == [
        ("DP Bounded Scan", "purchases", True),
        ("DP Scan", "regions", False),
    ]
    assert scans[0]["Privacy Unit"] == "user_id"
    assert "  ->  DP Scan on public.regions" in plan_lines(doc)


def test_costs_off_and_verbose() -> None:
    doc = _doc("SELECT sex, avg(income) FROM pums GROUP BY sex", costs=False, verbose=True)
    for node in [doc["Plan"], *doc["Plan"]["Plans"]]:
        assert not {"Startup Cost", "Total Cost", "Plan Rows", "Plan Width"} & set(node)
    assert "FROM public.pums" in doc["Rewritten SQL"]
    assert "Rewritten SQL" not in _doc("SELECT count(*) FROM pums")


def test_xml_is_well_formed_and_escaped() -> None:
    doc = _doc('SELECT count(*) AS "a<b & c" FROM pums WHERE income > 5')
    root = ElementTree.fromstring(plan_xml(doc))
    plan = root.find("e:Query/e:Plan", NS)
    assert plan is not None
    assert [i.text for i in plan.findall("e:Output/e:Item", NS)] == ["a<b & c"]
    assert plan.findtext("e:Contribution-Bound", namespaces=NS) == doc["Plan"]["Contribution Bound"]
    assert plan.find("e:Partition-Selection", NS) is None  # null: left out
    assert root.findtext("e:Query/e:Budget/e:Ledger", namespaces=NS) == "false"
    kinds = [p.findtext("e:Node-Type", namespaces=NS) for p in plan.findall("e:Plans/e:Plan", NS)]
    # the count, then what bounding removed and the units over its cap (dpsql.sql.bias)
    assert kinds == ["DP Bounded Scan", "DP Measure", "DP Measure", "DP Measure"]

"""The tests' policy builder (tests/policies.py, fixture ``make_policy``): what it writes is what it
was given, on top of the demo policy or a given base, and the file loads as the Policy it returns."""

from __future__ import annotations

import yaml

from dpsql.policy import load_policy
from tests.policies import PolicyMaker, demo_doc, policy_doc, private_table

X = {"x": {"type": "integer", "bounds": [0, 3]}}


def test_private_table_lists_its_unit_first_as_an_identifier() -> None:
    t = private_table("u", X, rows=4, groups=2)
    assert t == {
        "privacy_unit": "u",
        "max_rows_per_unit": 4,
        "max_groups_per_unit": 2,
        "columns": {"u": {"type": "integer", "identifier": True}, "x": X["x"]},
    }
    assert list(t["columns"]) == ["u", "x"]


def test_policy_doc_replaces_or_extends_the_demo_policy() -> None:
    demo = demo_doc()
    t = private_table("u", X)
    assert policy_doc() == demo
    assert policy_doc(tables={"public.t": t})["tables"] == {"public.t": t}
    added = policy_doc(add_tables={"public.t": t}, add_public_tables=["public.p"])
    assert added["tables"] == {**demo["tables"], "public.t": t}
    assert added["public_tables"] == [*demo["public_tables"], "public.p"]
    assert policy_doc(public_tables=[], dataset="d")["public_tables"] == []
    assert policy_doc(dataset="d")["dataset"] == "d"
    base = {"version": 1, "tables": {"public.t": t}}
    assert policy_doc(base=base, analysts={"a": {"budget": {"epsilon": 1}}}) == {
        **base,
        "analysts": {"a": {"budget": {"epsilon": 1}}},
    }


def test_policy_doc_copies_what_it_is_given() -> None:
    columns = {"x": {"type": "integer", "bounds": [0, 3]}}
    doc = policy_doc(tables={"public.t": private_table("u", columns)})
    doc["tables"]["public.t"]["columns"]["x"]["bounds"][1] = 99
    assert columns["x"]["bounds"] == [0, 3]


def test_fixed_bounds_fix_auto_contribution_bounds() -> None:
    auto = private_table("u", X, rows="auto", groups="auto")
    doc = policy_doc(tables={"public.t": auto}, fixed_bounds=True)
    t = doc["tables"]["public.t"]
    assert (t["max_rows_per_unit"], t["max_groups_per_unit"]) == (1, 1)
    assert t["columns"]["x"]["clamp"] == "bounds"


def test_make_policy_writes_the_file_it_loads(make_policy: PolicyMaker) -> None:
    pf = make_policy("one", tables={"public.t": private_table("u", X, rows=3)}, public_tables=[])
    assert pf.path.name == "one.yaml" and yaml.safe_load(pf.path.read_text()) == pf.doc
    assert load_policy(pf.path) == pf.policy
    t = pf.policy.tables["public.t"]
    assert (t.privacy_unit, t.max_rows_per_unit, t.max_groups_per_unit) == ("u", 3, 1)
    assert make_policy("one").path != pf.path  # each call its own directory

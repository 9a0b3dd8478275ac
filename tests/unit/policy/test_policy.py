from __future__ import annotations

import pytest

from dpsql.demo import POLICY
from dpsql.errors import PolicyError
from dpsql.policy import load_policy, parse_policy

BASE = """
tables:
  people:
    privacy_unit: pid
    columns:
      pid: {type: integer, identifier: true}
      age: {type: integer, bounds: [0, 100]}
"""


def test_demo_policy_loads() -> None:
    p = load_policy(POLICY)
    assert "public.purchases" in p.tables
    assert p.tables["public.purchases"].columns["amount"].bounds == (0, 500)


def test_names_are_qualified() -> None:
    assert "public.people" in parse_policy(BASE).tables


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (BASE.replace("[0, 100]", "[100, 0]"), 7, "out of order"),
        (BASE.replace("type: integer, bounds", "type: integr, bounds"), 7, "unknown type"),
        (BASE.replace("privacy_unit: pid", "privacy_unit: person"), 3, "not among the columns"),
        (BASE.replace("columns:", "colums:"), 5, "unknown field"),
        (BASE + "analysts:\n  bob: {credential: hunter2, budget: {epsilon: 1}}\n", 9, "SCRAM"),
        # the docs' placeholder: passed the old prefix check, then every login crashed
        (
            BASE
            + 'analysts:\n  bob: {credential: "SCRAM-SHA-256$4096:...", budget: {epsilon: 1}}\n',
            9,
            "dpsql verifier",
        ),
        (
            BASE + 'analysts:\n  bob: {credential: "SCRAM-SHA-256$4096:c2FsdA==$AA==:AA==", '
            "budget: {epsilon: 1}}\n",
            9,
            "StoredKey",
        ),
        (BASE + "analysts:\n  bob: {budget: {epsilon: -1}}\n", 9, "greater than 0"),
        ("tables: [", 1, "not valid YAML"),
        # a key listed twice was two releases of one group, each with its own noise: the
        # group's units paid twice the statement's epsilon, charged once (newcomer22 #23)
        (BASE + "      sex: {type: text, keys: [F, M, F]}\n", 8, "key 'F' is listed twice"),
        (BASE + "      ok: {type: boolean, keys: [true, false, true]}\n", 8, "'true' is listed"),
        (BASE + "      n: {type: integer, keys: [1, 2, 1]}\n", 8, "key '1' is listed twice"),
    ],
)
def test_errors_name_file_line_field(text: str, line: int, words: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy(text, "p.yaml")
    assert e.value.sqlstate == "F0000"
    assert e.value.message.startswith(f"p.yaml:{line}:"), e.value.message
    assert words in e.value.message


def test_identifier_cannot_have_bounds() -> None:
    with pytest.raises(PolicyError, match="identifier"):
        parse_policy(BASE.replace("identifier: true", "identifier: true, bounds: [0, 1]"))


@pytest.mark.parametrize(
    ("public", "words"),
    [
        ("[public.regions]", "keys_from public.region.code: public.region is not one of "
         "public_tables (did you mean public.regions?)"),
        ("[]", "public.region is not one of public_tables: list the table of the keys under"),
    ],
)  # fmt: skip
def test_keys_from_names_a_public_table(public: str, words: str) -> None:
    """docs/policy.md: keys_from is ``schema.table.column`` of a public table (newcomer22 #24:
    a misspelt table passed every check; analysts then got 42P01 for a table they never wrote)."""
    doc = (
        "tables:\n  people:\n    privacy_unit: pid\n    columns:\n"
        "      pid: {type: integer, identifier: true}\n"
        "      region: {type: text, keys_from: public.region.code}\n"
        f"public_tables: {public}\n"
    )
    with pytest.raises(PolicyError) as e:
        parse_policy(doc, "p.yaml")
    assert words in e.value.message, e.value.message
    # the file's line of the column (was line 1, "(top level)": the last closing note)
    assert e.value.message.startswith("p.yaml:6: tables.public.people.columns.region: keys_from ")
    with pytest.raises(PolicyError) as e:
        parse_policy(doc.replace("public.region.code", "people.pid"), "p.yaml")
    assert "keys_from people.pid reads the private table public.people" in e.value.message
    if public == "[]":
        return
    ok = parse_policy(doc.replace("public.region.code", "regions.code"), "p.yaml")
    assert ok.tables["public.people"].columns["region"].keys_from == "regions.code"

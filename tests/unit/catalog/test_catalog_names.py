"""Name lookups that can't raise "does not exist", catalog routing, and analysts' table patterns
(no database: the SQL shapes; tests/integration/catalog/test_catalog_existence.py runs them upstream)."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.catalog.build import as_object
from dpsql.execute.classify import classify
from dpsql.policy.model import Analyst, Budget
from tests.policies import build_policy, private_table


def _sql(text: str, type_name: str = "REGCLASS") -> str:
    return as_object(sqlglot.parse_one(text, read="postgres"), type_name).sql("postgres")


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("'people'", "TO_REGCLASS('people')"),  # a name: NULL when missing, never an error
        ("'16400'", "CAST('16400' AS REGCLASS)"),  # digits are an id, as regclassin reads them
        ("16400", "CAST(16400 AS REGCLASS)"),
        ("$1", "CAST($1 AS REGCLASS)"),  # described, not run: keeps PostgreSQL's type inference
        ("NULL", "CAST(NULL AS REGCLASS)"),
    ],
)
def test_literals(arg: str, expected: str) -> None:
    assert _sql(arg) == expected


@pytest.mark.parametrize("arg", ["v", "quote_ident('x')", "'public.' || 'x'", "CAST(v AS TEXT)"])
def test_expressions_are_told_apart_upstream(arg: str) -> None:
    sql = _sql(arg, "REGTYPE")
    assert sql.startswith("CASE WHEN CAST(") and "~ '^[0-9]+$'" in sql
    assert "ELSE TO_REGTYPE(CAST(" in sql and "AS OID) AS REGTYPE)" in sql


def test_already_safe_values_are_kept() -> None:
    once = as_object(sqlglot.parse_one("v", read="postgres"), "REGCLASS")
    assert as_object(once, "REGCLASS") is once


POLICY = build_policy(
    base={},
    tables={"people": private_table("row", {"age": {"type": "integer"}}, rows=None, groups=None)},
    public_tables=["cities"],
)


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("SELECT has_table_privilege('x', 'SELECT') FROM cities", "catalog"),
        ("SELECT 'x'::regclass FROM cities", "catalog"),
        ("SELECT obj_description(1, 'pg_class') FROM cities", "catalog"),
        ("SELECT pg_typeof(name), version() FROM cities", "public"),
        ("SELECT name FROM cities", "public"),
    ],
)
def test_object_functions_beside_a_public_table_are_catalog_queries(sql: str, kind: str) -> None:
    assert classify(sqlglot.parse_one(sql, read="postgres"), POLICY) == kind


def test_patterns() -> None:
    a = Analyst(budget=Budget(epsilon=1), tables=("sales.*", "people"), deny=("sales.pay*",))
    assert a.tables == ("sales.*", "public.people")
    assert a.may_use("sales.orders") and a.may_use("public.people")
    assert not a.may_use("sales.payroll") and not a.may_use("public.cities")
    assert not Analyst(budget=Budget(epsilon=1)).restricted

"""Roles and definitions in catalog rewrites, and keys_from under an analyst's view (no
database: routing, refusals and SQL shapes; tests/integration/catalog/test_catalog_roles.py and
test_catalog_definitions.py run them upstream)."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.catalog.check import check_catalog_query
from dpsql.errors import DpsqlError
from dpsql.execute.classify import classify
from tests.policies import build_policy, private_table

POLICY = build_policy(
    base={},
    tables={
        "people": private_table(
            "row",
            {"age": {"type": "integer"}, "city": {"type": "text", "keys_from": "cities.name"}},
            rows=None,
            groups=None,
        )
    },
    public_tables=["cities"],
    analysts={
        "ann": {"budget": {"epsilon": 1}},
        "bo": {"budget": {"epsilon": 1}, "deny": ["cities"]},
    },
)


def _sql(text: str, analyst: str = "ann") -> str:
    tree = sqlglot.parse_one(text, read="postgres")
    return check_catalog_query(tree, POLICY, analyst).sql("postgres")


@pytest.mark.parametrize(
    "text",
    [
        "SELECT current_user",
        "SELECT user",
        "SELECT session_user, name FROM cities",
        "SELECT current_role FROM cities",
        "SELECT 'a=r/b'::aclitem",
        "SELECT name FROM cities WHERE CAST('{a=r/b}' AS aclitem[]) IS NULL",
        "SELECT pg_has_role('x', 'USAGE') FROM cities",
    ],
)
def test_role_readers_are_catalog_queries(text: str) -> None:
    assert classify(sqlglot.parse_one(text, read="postgres"), POLICY) == "catalog"


def test_session_role_is_the_analyst() -> None:
    sql = _sql("SELECT current_user, user AS u, pg_get_userbyid(10)")
    assert sql.startswith(
        "SELECT CAST('ann' AS NAME) AS \"current_user\", CAST('ann' AS NAME) AS u"
    )
    assert "ELSE CAST('ann' AS NAME) END" in sql  # every owner reads as the analyst


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 'postgres'::regrole",
        "SELECT '\"Ann\"'::regrole",  # quoted: exactly Ann, not ann
        "SELECT pg_has_role('postgres', 'USAGE')",
        "SELECT has_table_privilege('postgres', 'cities', 'SELECT')",
        "SELECT has_column_privilege('ANN', 'cities', 'name', 'SELECT')",  # names are exact
    ],
)
def test_other_role_names_do_not_exist(text: str) -> None:
    with pytest.raises(DpsqlError) as e:
        _sql(text)
    assert e.value.sqlstate == "42704" and e.value.message.endswith('" does not exist')


def test_own_and_public_role_names() -> None:
    assert "CURRENT_USER" in _sql("SELECT pg_has_role('ann', 'USAGE')")
    sql = _sql("SELECT has_table_privilege('public', 'cities', 'SELECT')")
    assert "'public'" in sql
    assert "CAST(NULL AS OID)" in _sql("SELECT to_regrole('someone')")
    assert "dpsql_r.rolname = CURRENT_USER" in _sql("SELECT 'Ann'::regrole")  # folded to ann


@pytest.mark.parametrize(
    "text",
    [
        "SELECT current_setting('session_authorization')",
        "SELECT current_setting('is_superuser')",
        "SELECT CAST('{10}' AS _regrole)",
    ],
)
def test_refused(text: str) -> None:
    with pytest.raises(DpsqlError) as e:
        _sql(text)
    assert e.value.sqlstate == "42501"


def test_acls_are_null_and_large_catalogs_skip_the_round_trip() -> None:
    assert "CAST(NULL AS ACLITEM[]) AS relacl" in _sql("SELECT relname FROM pg_class")
    assert "JSONB_POPULATE_RECORD" not in _sql("SELECT typname FROM pg_type").upper()
    assert "JSONB_POPULATE_RECORD" in _sql("SELECT t.* FROM pg_type t").upper()
    assert "JSONB_POPULATE_RECORD" in _sql("SELECT typacl FROM pg_type").upper()
    assert "JSONB_POPULATE_RECORD" in _sql("SELECT row_to_json(p) FROM pg_proc p").upper()


def test_keys_from_a_denied_table_is_dropped_from_the_view() -> None:
    assert POLICY.for_analyst("ann") is POLICY
    bo = POLICY.for_analyst("bo")
    assert bo.public_tables == ()
    assert bo.tables["public.people"].columns["city"].keys_from is None
    assert POLICY.tables["public.people"].columns["city"].keys_from == "cities.name"


def test_the_roles_rewrite_is_the_same_in_every_process() -> None:
    """pg_roles' rewritten SQL does not depend on the process's string hashing
    (PYTHONHASHSEED): its overridden columns were a set (hash seeds 0 and 1 listed them in
    different orders), so the same statement's SQL, and what caches keyed on it, changed from
    one worker or restart to the next."""
    import os
    import subprocess
    import sys

    probe = (
        "import sqlglot\n"
        "from dpsql.catalog.overrides import overridden_relation\n"
        "print(overridden_relation('pg_catalog', 'pg_roles', sqlglot.exp.true(), 'ann')"
        ".sql('postgres'))"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1")
    }
    assert len(texts) == 1 and "rolsuper" in next(iter(texts))

"""A hidden object and a missing one must answer alike: no existence oracle through any
name-taking function, cast or privilege check, by value AND by error (SQLSTATE, text, position).

The demo database gets objects the policy does not declare: table ``salaries`` (serial id,
index, view, comment, row type), schema ``hr`` with a table and a function, and an undeclared
column ``purchases.secret_note``. Each probe runs once with the hidden name and once with a
missing name of the same length; the outcomes, with the name masked, must be equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.policy.model import Policy
from dpsql.session import SessionContext

SETUP = [
    "CREATE TABLE salaries (id serial PRIMARY KEY, x int, secret text)",
    "CREATE INDEX salaries_x ON salaries (x)",
    "CREATE VIEW salaries_v AS SELECT x FROM salaries",
    "COMMENT ON TABLE salaries IS 'top secret'",
    "COMMENT ON COLUMN salaries.secret IS 'pay'",
    "INSERT INTO salaries (x, secret) SELECT g, 'x' FROM generate_series(1, 1000) AS g",
    "CREATE SCHEMA hr",
    "CREATE TABLE hr.t (a int)",
    "CREATE FUNCTION hr.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "ALTER TABLE purchases ADD COLUMN secret_note text",
    "COMMENT ON COLUMN purchases.secret_note IS 'hidden column comment'",
]


@pytest.fixture(scope="module")
def hidden_engine(make_demo_db, demo_policy: Policy) -> Iterator[Engine]:  # type: ignore[no-untyped-def]
    dsn = make_demo_db("existence")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stmt in SETUP:
            conn.execute(stmt)  # type: ignore[arg-type]
    e = Engine(demo_policy, dsn, pool_size=2)
    yield e
    e.close()


def outcome(e: Engine, sql: str, name: str = "") -> tuple[Any, ...]:
    """("ok", rows) or (sqlstate, message, hint, position), with ``name`` masked as {t}."""

    def mask(text: str) -> str:
        return text.replace(name, "{t}") if name else text

    try:
        rows = e.execute(e.prepare(sql, "analyst"), SessionContext(analyst="analyst")).rows
        return ("ok", mask(repr(rows)))
    except DpsqlError as err:
        return (err.sqlstate, mask(err.message), err.hint, err.position)


def assert_alike(e: Engine, template: str, hidden: str, missing: str) -> tuple[Any, ...]:
    assert len(hidden) == len(missing)  # so that error positions agree as well
    got = outcome(e, template.format(t=hidden), hidden)
    assert got == outcome(e, template.format(t=missing), missing), template
    return got


# {t}: a hidden table (salaries) / a missing one (salariez)
TABLE_PROBES = [
    "SELECT has_table_privilege('{t}', 'SELECT')",
    "SELECT has_table_privilege(current_user, '{t}', 'SELECT')",
    "SELECT has_any_column_privilege('{t}', 'SELECT')",
    "SELECT has_column_privilege('{t}', 'x', 'SELECT')",
    "SELECT has_column_privilege('{t}', 1::smallint, 'SELECT')",
    "SELECT has_sequence_privilege('{t}_id_seq', 'SELECT')",
    "SELECT has_sequence_privilege('{t}', 'SELECT')",
    "SELECT has_type_privilege('{t}', 'USAGE')",
    "SELECT '{t}'::regclass",
    "SELECT CAST('{t}' AS regclass)::oid",
    "SELECT 'public.{t}'::regclass::oid",
    "SELECT '{t}'::regtype",
    "SELECT quote_ident('{t}')::regclass",
    "SELECT ('public.' || '{t}')::regclass",
    "SELECT v::regclass FROM (VALUES ('{t}')) AS s(v)",
    "SELECT CAST(v AS regclass) FROM unnest(ARRAY['{t}']) AS v",
    "SELECT to_regclass('{t}')",
    "SELECT to_regclass('{t}')::oid",
    "SELECT to_regtype('{t}')",
    "SELECT pg_get_serial_sequence('{t}', 'id')",
    "SELECT pg_get_serial_sequence('{t}', 'nope')",
    "SELECT pg_get_serial_sequence(v, 'id') FROM (VALUES ('{t}')) AS s(v)",
    "SELECT pg_get_viewdef('{t}_v')",
    "SELECT pg_get_viewdef('{t}_v'::regclass)",
    "SELECT pg_get_viewdef(v) FROM (VALUES ('{t}_v')) AS s(v)",
    "SELECT obj_description('{t}'::regclass)",
    "SELECT obj_description('{t}'::regclass, 'pg_class')",
    "SELECT col_description('{t}'::regclass, 3)",
    "SELECT pg_table_is_visible('{t}'::regclass)",
    "SELECT format_type('{t}'::regtype, NULL)",
    "SELECT pg_get_indexdef('{t}_x'::regclass)",
    "SELECT pg_get_indexdef(v::regclass) FROM (VALUES ('{t}_x')) AS s(v)",
    "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = '{t}_pkey'",
    "SELECT pg_get_partkeydef('{t}'::regclass)",
    "SELECT pg_relation_is_publishable('{t}')",
    "SELECT pg_partition_root('{t}')",
    "SELECT pg_relation_size('{t}')",
    "SELECT pg_table_size('{t}')",
    "SELECT pg_total_relation_size('{t}')",
    "SELECT pg_indexes_size('{t}')",
    "SELECT pg_relation_filenode('{t}')",
    "SELECT pg_relation_filepath('{t}')",
    "SELECT pg_describe_object('pg_class'::regclass, '{t}'::regclass, 0)",
    "SELECT current_setting('{t}')",
    "SELECT current_setting('{t}', true)",
    "SELECT relname FROM pg_class WHERE relname = '{t}'",
    "SELECT relname FROM pg_class WHERE oid = '{t}'::regclass",
    "SELECT table_name FROM information_schema.tables WHERE table_name = '{t}'",
    "SELECT attname FROM pg_attribute WHERE attrelid = '{t}'::regclass",
    "SELECT typname FROM pg_type WHERE typname = '{t}'",
    "SELECT description FROM pg_description WHERE description = 'top secret' AND '{t}' <> ''",
    # an untyped literal PostgreSQL would read as an object name (refused alike)
    "SELECT to_regclass('purchases') = '{t}'",
    "SELECT COALESCE(to_regclass('nosuch'), '{t}')",
    "SELECT x FROM (SELECT 'purchases'::regclass AS x) AS s WHERE x = '{t}'",
    "SELECT 'purchases'::regclass UNION SELECT '{t}'",
    "SELECT array_position(ARRAY['purchases'::regclass], '{t}')",
    # arrays of object ids (refused: they would print hidden names)
    "SELECT '{{{t}}}'::regclass[]",
    "SELECT ARRAY['{t}']::regclass[]",
    # a public table in FROM does not open a way around the catalog checks
    "SELECT has_table_privilege('{t}', 'SELECT') FROM regions",
    "SELECT '{t}'::regclass FROM regions",
    "SELECT obj_description('{t}'::regclass, 'pg_class') FROM regions",
    # the table itself
    "SELECT COUNT(*) FROM {t}",
    "SELECT COUNT(*) FROM public.{t} AS s",
    "SELECT * FROM {t}",
    "SELECT relname FROM pg_class, {t}",
]


@pytest.mark.parametrize("template", TABLE_PROBES)
def test_hidden_and_missing_tables_answer_alike(hidden_engine: Engine, template: str) -> None:
    got = assert_alike(hidden_engine, template, "salaries", "salariez")
    assert "top secret" not in repr(got) and "1000" not in repr(got)


def test_privileges_of_visible_tables_still_answer(hidden_engine: Engine) -> None:
    got = outcome(hidden_engine, "SELECT has_table_privilege('purchases', 'SELECT')")
    assert got == ("ok", "[(True,)]")
    got = outcome(hidden_engine, "SELECT pg_get_serial_sequence('purchases', 'id')")
    assert got[0] == "ok"


def test_sizes_are_never_data(hidden_engine: Engine) -> None:
    """Sizes measure the data: NULL whatever the table (visible, hidden or missing), so psql
    ``\\dt+`` and DBeaver's table statistics keep working and learn nothing."""
    for t in ("purchases", "salaries", "salariez"):
        for f in ("pg_relation_size", "pg_table_size", "pg_total_relation_size"):
            assert outcome(hidden_engine, f"SELECT {f}('{t}')", t) == ("ok", "[(None,)]")


# {t}: a hidden schema (hr) / a missing one (hx)
SCHEMA_PROBES = [
    "SELECT has_schema_privilege('{t}', 'USAGE')",
    "SELECT '{t}'::regnamespace",
    "SELECT to_regnamespace('{t}')",
    "SELECT '{t}.t'::regclass",
    "SELECT '{t}.f'::regproc",
    "SELECT '{t}.f()'::regprocedure",
    "SELECT to_regproc('{t}.f')",
    "SELECT has_function_privilege('{t}.f()', 'EXECUTE')",
    "SELECT pg_get_function_arguments('{t}.f'::regproc)",
    "SELECT has_type_privilege('{t}.t', 'USAGE')",
    "SELECT typname FROM pg_type WHERE typinput = '{t}.f'",
    "SELECT nspname FROM pg_namespace WHERE nspname = '{t}'",
    "SELECT COUNT(*) FROM {t}.t",
]


@pytest.mark.parametrize("template", SCHEMA_PROBES)
def test_hidden_and_missing_schemas_answer_alike(hidden_engine: Engine, template: str) -> None:
    assert_alike(hidden_engine, template, "hr", "hx")


# {t}: an undeclared (hidden) column of a private table / a missing column
COLUMN_PROBES = [
    "SELECT has_column_privilege('purchases', '{t}', 'SELECT')",
    "SELECT has_column_privilege('public.purchases'::regclass, '{t}', 'SELECT')",
    "SELECT has_column_privilege(current_user, 'purchases', '{t}', 'SELECT')",
    "SELECT pg_get_serial_sequence('purchases', '{t}')",
    "SELECT attname FROM pg_attribute WHERE attrelid = 'purchases'::regclass AND attname = '{t}'",
    "SELECT column_name FROM information_schema.columns WHERE column_name = '{t}'",
    "SELECT COUNT({t}) FROM purchases",
]


@pytest.mark.parametrize("template", COLUMN_PROBES)
def test_hidden_and_missing_columns_answer_alike(hidden_engine: Engine, template: str) -> None:
    assert_alike(hidden_engine, template, "secret_note", "secret_nota")


def test_hidden_column_comment_is_not_shown(hidden_engine: Engine) -> None:
    sql = (
        "SELECT col_description(a.attrelid, a.attnum) FROM pg_attribute AS a "
        "WHERE a.attrelid = 'purchases'::regclass AND a.attnum > 0"
    )
    got = outcome(hidden_engine, sql)
    assert got[0] == "ok" and "hidden column comment" not in got[1]
    sql = "SELECT col_description('purchases'::regclass, n) FROM generate_series(1, 20) AS n"
    assert "hidden column comment" not in repr(outcome(hidden_engine, sql, ""))


@pytest.mark.parametrize(
    "setting", ["data_directory", "unix_socket_directories", "dynamic_library_path", "hba_file"]
)
def test_settings_hidden_from_pg_settings_are_refused(hidden_engine: Engine, setting: str) -> None:
    got = outcome(hidden_engine, f"SELECT current_setting('{setting}')", setting)
    assert got[0] == "42501"
    got = outcome(hidden_engine, f"SELECT name FROM pg_settings WHERE name = '{setting}'", setting)
    assert got == ("ok", "[]")
    got = outcome(hidden_engine, "SELECT current_setting('search_path')")
    assert got[0] == "ok"


def test_object_ids_can_not_be_enumerated_into_names(hidden_engine: Engine) -> None:
    """Casting a range of oids to regclass shows visible relations only; as an array, refused."""
    one = (
        "SELECT g::regclass::text FROM generate_series(16384, 200000) AS g "
        "WHERE g::regclass::text LIKE 'sal%'"
    )
    assert outcome(hidden_engine, one) == ("ok", "[]")
    arr = (
        "SELECT x::text FROM unnest((SELECT array_agg(g) FROM generate_series(16384, 200000) AS g)"
        "::regclass[]) AS x"
    )
    assert outcome(hidden_engine, arr)[0] == "42501"

"""Roles through dpsql: an analyst sees one role, itself, never the upstream's role names.

The upstream gets two extra roles (a login role standing for another analyst's upstream role,
and a group role) with grants on the public table ``regions``, comments and memberships. No
catalog answer may contain their names, dpsql's upstream role name or the bootstrap superuser's
name, and a role name that exists upstream must behave as a missing one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.policy.model import Policy
from dpsql.session import SessionContext

TAG = uuid.uuid4().hex[:6]
OTHER = f"zq_other_{TAG}"  # another analyst's upstream role
GROUP = f"zq_group_{TAG}"
MISSING = f"zq_nopes_{TAG}"  # same length as OTHER, exists nowhere


@pytest.fixture(scope="module")
def roles_engine(make_demo_db, demo_policy: Policy) -> Iterator[tuple[Engine, list[str]]]:  # type: ignore[no-untyped-def]
    dsn = make_demo_db("roles")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stmt in (
            "CREATE ROLE {g}",
            "CREATE ROLE {o} LOGIN IN ROLE {g}",
            "GRANT SELECT ON regions TO {o}",
            "GRANT SELECT (code) ON regions TO {g}",
            "GRANT USAGE ON SCHEMA public TO {g}",
            "COMMENT ON ROLE {o} IS 'secret role comment'",
            "CREATE POLICY zq_pol ON regions TO {o} USING (true)",
        ):
            conn.execute(sql.SQL(stmt).format(o=sql.Identifier(OTHER), g=sql.Identifier(GROUP)))
        me = conn.execute("SELECT current_user, (SELECT rolname FROM pg_authid WHERE oid = 10)")
        secrets = [OTHER, GROUP, *me.fetchone()]  # type: ignore[misc]
    e = Engine(demo_policy, dsn, pool_size=2)
    yield e, secrets
    e.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP POLICY zq_pol ON regions")
        for role in (OTHER, GROUP):
            conn.execute(sql.SQL("DROP OWNED BY {r}").format(r=sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {r}").format(r=sql.Identifier(role)))


def outcome(e: Engine, text: str, analyst: str = "analyst", mask: str = "") -> tuple[Any, ...]:
    try:
        rows = e.execute(e.prepare(text, analyst), SessionContext(analyst=analyst)).rows
        got: tuple[Any, ...] = ("ok", repr(rows))
    except DpsqlError as err:
        got = (err.sqlstate, err.message, err.hint, err.position)
    return tuple(str(x).replace(mask, "{r}") if mask else x for x in got)


PSQL_DU = """SELECT r.rolname, r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb,
  r.rolcanlogin, r.rolconnlimit, r.rolvaliduntil,
  ARRAY(SELECT b.rolname FROM pg_catalog.pg_auth_members m
        JOIN pg_catalog.pg_roles b ON (m.roleid = b.oid) WHERE m.member = r.oid) as memberof,
  r.rolreplication, r.rolbypassrls
FROM pg_catalog.pg_roles r WHERE r.rolname !~ '^pg_' ORDER BY 1"""
PSQL_L = """SELECT d.datname as "Name", pg_catalog.pg_get_userbyid(d.datdba) as "Owner",
  pg_catalog.pg_encoding_to_char(d.encoding) as "Encoding",
  pg_catalog.array_to_string(d.datacl, E'\\n') AS "Access privileges"
FROM pg_catalog.pg_database d ORDER BY 1"""
PSQL_DT = """SELECT n.nspname as "Schema", c.relname as "Name",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner"
FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r','p','') AND n.nspname = 'public' ORDER BY 1,2"""

LISTINGS = [
    "SELECT current_user, session_user, user, current_role",
    "SELECT user",  # no relation: routed to the catalog too
    "SELECT current_user AS who, code FROM regions",  # a public table: routed to the catalog
    "SELECT * FROM pg_roles",
    "SELECT * FROM pg_user",
    "SELECT * FROM pg_auth_members",
    "SELECT oid, pg_get_userbyid(oid) FROM pg_roles",
    "SELECT pg_get_userbyid(10), pg_get_userbyid(m.member) FROM pg_auth_members m",
    "SELECT 10::regrole, CAST(c.relowner AS regrole) FROM pg_class c WHERE relname = 'regions'",
    "SELECT c.* FROM pg_class c WHERE relname = 'regions'",
    "SELECT relacl FROM pg_class WHERE relname = 'regions'",
    "SELECT a.* FROM pg_attribute a WHERE attrelid = 'regions'::regclass",
    "SELECT db.oid, db.* FROM pg_database db",
    "SELECT n.* FROM pg_namespace n",
    "SELECT * FROM pg_tables WHERE tablename = 'regions'",
    "SELECT * FROM pg_policies",
    "SELECT row_to_json(p) FROM pg_proc p WHERE p.proname = 'pg_read_file'",
    "SELECT proacl FROM pg_proc WHERE proacl IS NOT NULL",
    "SELECT * FROM information_schema.table_privileges WHERE table_name = 'regions'",
    "SELECT * FROM information_schema.role_table_grants",
    "SELECT * FROM information_schema.column_privileges WHERE table_name = 'regions'",
    "SELECT * FROM information_schema.schemata",
    "SELECT * FROM information_schema.enabled_roles",
    "SELECT * FROM information_schema.applicable_roles",
    "SELECT description FROM pg_shdescription",
    "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles",
    "SELECT has_table_privilege(r.rolname, 'regions', 'SELECT') FROM pg_roles r",
    "SELECT a.oid, a.*, pd.description FROM pg_catalog.pg_roles a "
    "LEFT JOIN pg_catalog.pg_shdescription pd ON a.oid = pd.objoid ORDER BY a.rolname",
    PSQL_DU,
    PSQL_L,
    PSQL_DT,
]


@pytest.mark.parametrize("text", LISTINGS)
def test_no_upstream_role_name_is_shown(roles_engine: tuple[Engine, list[str]], text: str) -> None:
    e, secrets = roles_engine
    got = outcome(e, text)
    assert got[0] == "ok", got
    for name in secrets:
        assert name not in got[1], (name, got[1])
    assert "secret role comment" not in got[1]


def test_the_analyst_is_the_one_role(roles_engine: tuple[Engine, list[str]]) -> None:
    e, _ = roles_engine
    assert outcome(e, "SELECT rolname, rolsuper, rolcanlogin FROM pg_roles") == (
        "ok",
        "[('analyst', False, True)]",
    )
    assert outcome(e, "SELECT current_user, session_user, user, current_role") == (
        "ok",
        "[('analyst', 'analyst', 'analyst', 'analyst')]",
    )
    checks = (
        "SELECT 'analyst'::regrole = (SELECT oid FROM pg_roles), to_regrole('analyst') IS NOT NULL,"
        " pg_has_role('analyst', 'USAGE'), pg_has_role(current_user, 'analyst', 'MEMBER'),"
        " has_table_privilege('analyst', 'regions', 'SELECT'),"
        " has_table_privilege(current_user, 'regions', 'SELECT'),"
        " has_table_privilege('public', 'regions', 'SELECT') IS NOT NULL,"
        " has_schema_privilege((SELECT oid FROM pg_roles), 'public', 'USAGE')"
    )
    assert outcome(e, checks) == ("ok", "[(True, True, True, True, True, True, True, True)]")
    # predefined roles exist everywhere; the analyst is a member of none of them
    predefined = (
        "SELECT pg_has_role('pg_monitor', 'MEMBER'), pg_has_role('analyst', 'pg_read_all_data',"
        " 'USAGE'), 'pg_monitor'::regrole IS NOT NULL, to_regrole('pg_monitor') IS NOT NULL,"
        " has_table_privilege('pg_read_all_data', 'regions', 'SELECT') IS NOT NULL"
    )
    assert outcome(e, predefined) == ("ok", "[(False, False, True, True, True)]")
    # every owner reads as the analyst (psql \dt, \l)
    owners = outcome(e, PSQL_DT)[1]
    assert "'regions', 'analyst')" in owners
    assert outcome(e, "SELECT current_user", "bob") == ("ok", "[('bob',)]")
    # PostgreSQL's column labels are kept (drivers look rows up by them)
    text = "SELECT current_user, session_user, user, current_role, current_user AS me"
    result = e.execute(e.prepare(text, "analyst"), SessionContext(analyst="analyst"))
    labels = [c.name for c in result.columns]
    assert labels == ["current_user", "session_user", "user", "current_role", "me"]


@pytest.mark.parametrize(
    "text",
    [
        "SELECT '{r}'::regrole",
        "SELECT CAST('{r}' AS pg_catalog.regrole)",
        "SELECT to_regrole('{r}')",
        "SELECT pg_has_role('{r}', 'USAGE')",
        "SELECT pg_has_role('{r}', 'analyst', 'MEMBER')",
        "SELECT has_table_privilege('{r}', 'regions', 'SELECT')",
        "SELECT has_column_privilege('{r}', 'regions', 'code', 'SELECT')",
        "SELECT has_schema_privilege('{r}', 'public', 'USAGE')",
        "SELECT has_database_privilege('{r}', current_database(), 'CONNECT')",
        "SELECT rolname FROM pg_roles WHERE rolname = '{r}'",
        "SELECT count(*) FROM pg_auth_members WHERE roleid = to_regrole('{r}')",
        "SELECT count(*) FROM pg_roles NATURAL JOIN (SELECT CAST('{r}' AS name) AS rolname) q",
        "SELECT count(*) FROM pg_roles JOIN (SELECT CAST('{r}' AS name) AS rolname) q "
        "USING (rolname)",
        "SELECT count(*) FROM pg_user AS u JOIN (SELECT CAST('{r}' AS name) AS usename) q "
        "USING (usename)",
    ],
)
def test_upstream_role_names_behave_as_missing(
    roles_engine: tuple[Engine, list[str]], text: str
) -> None:
    e, secrets = roles_engine
    missing = outcome(e, text.format(r=MISSING), mask=MISSING)
    for name in secrets:  # other roles, dpsql's own upstream role, the bootstrap superuser
        assert outcome(e, text.format(r=name), mask=name) == missing
    if missing[0] != "ok":
        assert missing[:2] == ("42704", 'role "{r}" does not exist')


@pytest.mark.parametrize(
    "text",
    [
        "SELECT current_setting('session_authorization')",
        "SELECT current_setting('role')",
        "SELECT current_setting('is_superuser')",
        "SELECT 'x=r/y'::aclitem",
        "SELECT CAST('{x=r/y}' AS aclitem[]) FROM regions",
        "SELECT CAST('{10}' AS _regrole)",
        "SELECT acldefault('r', 10)",
        "SELECT aclexplode(relacl) FROM pg_class",
        "SELECT * FROM pg_authid",
        "SELECT * FROM pg_shadow",
        "SELECT * FROM pg_group",
    ],
)
def test_other_role_readers_are_refused(roles_engine: tuple[Engine, list[str]], text: str) -> None:
    e, _ = roles_engine
    assert outcome(e, text)[0] in ("42501", "0A000")


REGROLE_PRINTS = [
    ("SELECT 'analyst'::regrole", ["regrole"], [("analyst",)]),
    ("SELECT 'analyst'::regrole::text, to_regrole('analyst')", ["text", "to_regrole"],
     [("analyst", "analyst")]),
    ("SELECT CAST('Analyst' AS pg_catalog.regrole) AS r, pg_catalog.to_regrole('pg_monitor')",
     ["r", "to_regrole"], [("analyst", "pg_monitor")]),
    ("SELECT oid::regrole, rolname::regrole, current_user::regrole FROM pg_roles",
     ["oid", "rolname", "current_user"], [("analyst", "analyst", "analyst")]),
    ("SELECT 4294967295::regrole, '4294967294'::regrole, NULL::regrole", ["regrole"] * 3,
     [("4294967295", "4294967294", None)]),
    ("SELECT 'analyst'::regrole UNION ALL SELECT 'pg_monitor'::regrole", ["regrole"],
     [("analyst",), ("pg_monitor",)]),
    ("SELECT c.relowner::regrole, relname FROM pg_class c WHERE relname = 'regions'",
     ["relowner", "relname"], [("analyst", "regions")]),
    ("SELECT count(*) FROM pg_class WHERE relname = 'regions' AND relowner = 'analyst'::regrole "
     "AND 'analyst'::regrole::text = 'analyst'", ["count"], [(1,)]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "labels", "expected"), REGROLE_PRINTS)
def test_regrole_prints_the_analysts_name(
    roles_engine: tuple[Engine, list[str]], text: str, labels: list[str], expected: list[Any]
) -> None:
    """A regrole prints as PostgreSQL prints it for the analyst's role (its name, never the
    upstream's), with PostgreSQL's column labels; it still compares as the role's oid."""
    e, secrets = roles_engine
    result = e.execute(e.prepare(text, "analyst"), SessionContext(analyst="analyst"))
    assert [c.name for c in result.columns] == labels
    assert list(result.rows) == expected
    for name in secrets:
        assert name not in repr(result.rows)


def test_regrole_errors_like_postgresql(roles_engine: tuple[Engine, list[str]]) -> None:
    """A hidden role's name raises PostgreSQL's 42704 for a missing role, at the same position."""
    e, secrets = roles_engine
    for name in (MISSING, *secrets):
        got = outcome(e, f"SELECT 1, '{name}'::regrole")
        assert (got[0], got[1], got[3]) == ("42704", f'role "{name}" does not exist', 11)

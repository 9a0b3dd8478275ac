"""A name written as a literal that is missing gets PostgreSQL's error, in its SQLSTATE and words
(was: NULL from dpsql's error-free lookups, where PostgreSQL refuses: newcomer20), and a hidden
object the same words as a missing one (test_analyst_permissions); an object id keeps
PostgreSQL's NULL. ``format_type`` of an id that is not a type is PostgreSQL's '???' (was the
table's name: ``format_type('purchases'::regclass, NULL)`` read the regclass as a type name).

PostgreSQL itself is the oracle: each statement also runs directly on the demo's upstream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext

STATEMENTS = [
    "SELECT 'x'::regclass",
    "SELECT 'Public.X'::regclass",
    "SELECT 'nosuch.x'::regclass",
    "SELECT 'x'::regtype",
    "SELECT 'x'::regproc",
    "SELECT 'x(int)'::regprocedure",
    "SELECT 'x'::regnamespace",
    "SELECT has_table_privilege('x', 'select')",
    "SELECT has_any_column_privilege('x', 'select')",
    "SELECT has_sequence_privilege('x', 'usage')",
    "SELECT has_schema_privilege('x', 'usage')",
    "SELECT has_column_privilege('purchases', 'nope', 'select')",
    "SELECT has_column_privilege('x', 'nope', 'select')",
    "SELECT has_function_privilege('x()', 'execute')",
    "SELECT has_type_privilege('x', 'usage')",
    "SELECT has_database_privilege('x', 'connect')",
    "SELECT pg_get_viewdef('x')",
    "SELECT obj_description('x'::regclass, 'pg_class')",
    "SELECT pg_get_serial_sequence('x', 'id')",
    "SELECT pg_get_serial_sequence('purchases', 'nope')",
    "SELECT c.relname FROM pg_class c WHERE c.oid = 'nosuch'::regclass",
    # answered: by id, or present
    "SELECT has_table_privilege(4294967295::oid, 'select')",
    "SELECT has_column_privilege('purchases', 99::int2, 'select')",
    "SELECT 'purchases'::regclass::text, has_table_privilege('purchases', 'select')",
    "SELECT format_type('purchases'::regclass, NULL)",
    "SELECT format_type('int4'::regtype, NULL), format_type(NULL, NULL)",
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, None, pool_size=2)
    yield e
    e.close()


def _postgresql(dsn: str, sql: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            return ("ok", [tuple(r) for r in conn.execute(sql).fetchall()])
        except psycopg.Error as e:
            return (e.diag.sqlstate, e.diag.message_primary)


def _dpsql(engine: Engine, sql: str) -> tuple[Any, ...]:
    try:
        r = engine.execute(engine.prepare(sql, "analyst"), SessionContext(analyst="analyst"))
        return ("ok", [tuple(row) for row in r.rows])
    except DpsqlError as e:
        assert e.severity == "ERROR", e
        return (e.sqlstate, e.message)


@pytest.mark.parametrize("sql", STATEMENTS)
def test_as_postgresql(engine: Engine, demo_dsn: str, sql: str) -> None:
    assert _dpsql(engine, sql) == _postgresql(demo_dsn, sql)

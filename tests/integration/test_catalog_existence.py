"""A hidden table and a missing one must answer alike (no existence oracle through privileges)."""

from __future__ import annotations

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext


@pytest.fixture
def hidden_engine(make_db, demo_policy):  # type: ignore[no-untyped-def]
    from dpsql.demo import load_demo

    dsn = make_db("existence")
    load_demo(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE salaries (x int, secret text)")
    e = Engine(demo_policy, dsn, pool_size=2)
    yield e
    e.close()


@pytest.mark.parametrize(
    "template",
    [
        "SELECT has_table_privilege('{t}', 'SELECT')",
        "SELECT has_table_privilege(current_user, '{t}', 'SELECT')",
        "SELECT has_any_column_privilege('{t}', 'SELECT')",
        "SELECT has_column_privilege('{t}', 'x', 'SELECT')",
        "SELECT '{t}'::regclass",
        "SELECT CAST('{t}' AS regclass)::oid",
    ],
)
def test_hidden_and_missing_tables_answer_alike(hidden_engine: Engine, template: str) -> None:
    s = SessionContext(analyst="analyst")

    def ask(t: str):  # type: ignore[no-untyped-def]
        return hidden_engine.execute(hidden_engine.prepare(template.format(t=t)), s).rows

    assert ask("salaries") == ask("no_such_table") == [(None,)]
    if "privilege(" in template and "column" not in template:
        assert ask("purchases") == [(True,)]

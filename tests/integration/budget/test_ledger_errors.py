"""The ledger's errors name their cause (issue #20, D3): DETAIL says what failed in the ledger
database (was: only the exception's class name, e.g. `UndefinedFile`), and nothing escapes as a
traceback."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from dpsql.budget.ledger import Ledger
from dpsql.demo import POLICY
from dpsql.errors import DpsqlError
from dpsql.policy import load_policy


def test_ledger_without_create_privilege_says_so(
    pg_admin_dsn: str, make_db: Callable[[str], str]
) -> None:
    dsn = make_db("ledger_priv")
    role = "ledger_no_create"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(sql.Identifier(role)))
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(sql.Identifier(db)))
    as_role = psycopg.conninfo.make_conninfo(dsn, user=role, password="pw")
    try:
        with pytest.raises(DpsqlError) as e:
            Ledger.open(as_role, load_policy(POLICY))
        assert e.value.sqlstate == "58000"
        assert e.value.detail and "InsufficientPrivilege (42501)" in e.value.detail
        assert "permission denied" in e.value.detail
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_unreachable_ledger_is_08006_with_the_cause(make_db: Callable[[str], str]) -> None:
    dsn = psycopg.conninfo.make_conninfo(make_db("ledger_gone"), port="1", connect_timeout="3")
    with pytest.raises(DpsqlError) as e:
        Ledger.open(dsn, load_policy(POLICY))
    assert e.value.sqlstate == "08006"
    assert e.value.detail and "connection to the ledger database failed" in e.value.detail

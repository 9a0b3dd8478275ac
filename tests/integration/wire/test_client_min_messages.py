"""``client_min_messages`` is honoured as PostgreSQL honours it (newcomer 21's finding 36).

Real engine and PostgreSQL (demo data) behind the in-process server, psycopg. Properties:
- ``SET client_min_messages = warning`` (or the startup option): a private aggregate's accuracy
  NOTICEs are not sent, a WARNING still is (COMMIT outside a transaction); RESET brings the
  NOTICEs back;
- a value PostgreSQL doesn't know: 22023 in its words, with the available values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine

AGG = "SELECT region, COUNT(*) FROM purchases GROUP BY region"


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    with served_engine(demo_policy, demo_dsn) as srv:
        yield srv


def _connect(port: int, options: str = "") -> tuple[psycopg.Connection[Any], list[str]]:
    seen: list[str] = []
    dsn = analyst_dsn(port) + (f" options='{options}'" if options else "")
    conn = psycopg.connect(dsn, autocommit=True)
    conn.add_notice_handler(lambda d: seen.append(d.severity_nonlocalized or ""))
    conn.execute("SET dpsql.epsilon = 0.2")
    return conn, seen


def test_warning_level_quiets_notices(served: ServerThread) -> None:
    conn, seen = _connect(served.port)
    with conn:
        conn.execute("SET client_min_messages = warning")
        assert conn.execute("SHOW client_min_messages").fetchone() == ("warning",)
        conn.execute(AGG).fetchall()
        assert seen == []
        conn.execute("COMMIT")  # WARNING: there is no transaction in progress
        assert seen == ["WARNING"]
        conn.execute("RESET client_min_messages")
        seen.clear()
        conn.execute(AGG + " ORDER BY 1").fetchall()
        assert "NOTICE" in seen


def test_startup_option_and_bad_value(served: ServerThread) -> None:
    conn, seen = _connect(served.port, "-c client_min_messages=error")
    with conn:
        conn.execute(AGG + " ORDER BY 2").fetchall()
        conn.execute("COMMIT")
        assert seen == []
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            conn.execute("SET client_min_messages = loud")
        assert e.value.diag.message_primary == (
            'invalid value for parameter "client_min_messages": "loud"'
        )
        assert "warning" in (e.value.diag.message_hint or "")
        assert conn.execute("SHOW client_min_messages").fetchone() == ("error",)

"""Session settings BI tools and drivers send take effect as on PostgreSQL, or are refused.

Real engine and PostgreSQL (demo data) behind the in-process server, psycopg. Properties:
- ``SET client_min_messages = warning`` (or the startup option): a private aggregate's accuracy
  NOTICEs are not sent, a WARNING still is (COMMIT outside a transaction); RESET brings the
  NOTICEs back; a value PostgreSQL doesn't know: 22023 in its words, with the available values
  (newcomer 21's finding 36);
- transaction isolation (finding 22): read committed and read uncommitted are kept and SHOW
  transaction_isolation says which; repeatable read and serializable (psycopg's
  ``isolation_level``, ``BEGIN ISOLATION LEVEL``, ``SET TRANSACTION``, PgJDBC's
  ``SET SESSION CHARACTERISTICS``, ``default_transaction_isolation``) are refused 0A000 with a
  hint, nothing else changed (was: BEGIN, then silently read committed).
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


def test_read_committed_levels_are_kept(served: ServerThread) -> None:
    conn, seen = _connect(served.port)
    with conn:
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
        conn.execute("BEGIN ISOLATION LEVEL READ UNCOMMITTED, READ ONLY")
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("read uncommitted",)
        conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        assert conn.execute("SHOW TRANSACTION ISOLATION LEVEL").fetchone() == ("read committed",)
        conn.execute("COMMIT")
        conn.execute("SET default_transaction_isolation = 'read uncommitted'")
        conn.execute("START TRANSACTION")
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("read uncommitted",)
        conn.execute("ROLLBACK")  # the SET was before the block: it stays
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("read uncommitted",)
        conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        assert seen[-1:] == ["WARNING"]  # outside a block, as PostgreSQL
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SET default_transaction_isolation = 'sometimes'")


@pytest.mark.parametrize(
    "statement",
    [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "START TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET default_transaction_isolation = 'repeatable read'",
    ],
)
def test_snapshot_levels_are_refused(served: ServerThread, statement: str) -> None:
    conn, _ = _connect(served.port)
    with conn:
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            conn.execute(statement)
        assert "read committed" in (e.value.diag.message_hint or "")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)


def test_psycopg_isolation_level(served: ServerThread) -> None:
    with psycopg.connect(analyst_dsn(served.port)) as conn:  # not autocommit: psycopg BEGINs
        conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("SELECT 1")
        conn.rollback()
        conn.isolation_level = psycopg.IsolationLevel.READ_UNCOMMITTED
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("read uncommitted",)
        conn.rollback()
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")

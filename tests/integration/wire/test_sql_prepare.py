"""SQL-level PREPARE / EXECUTE through the wire server: refused with 0A000 and a hint to use the
extended protocol; DEALLOCATE closes protocol-level prepared statements as in PostgreSQL.

Real engine, real PostgreSQL (demo data), psycopg over the simple (ClientCursor) and the extended
query protocol. PostgreSQL runs these statements; dpsql answers only through its own parse ->
check -> rewrite pipeline, so it refuses them as an unsupported feature (not 25006: they write
nothing) and the session keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine

USER = PASSWORD = "analyst"
REFUSED = [
    "PREPARE p AS SELECT count(*) FROM pums",
    "prepare p (int) AS SELECT $1",
    "EXECUTE p",
    "/* c */ execute p (1, 'x')",
]


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    with served_engine(demo_policy, demo_dsn) as srv:
        yield srv


@pytest.fixture
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port, USER, PASSWORD), autocommit=True) as c:
        yield c


@pytest.mark.parametrize("sql", REFUSED)
@pytest.mark.parametrize("simple", [True, False], ids=["simple", "extended"])
def test_sql_prepare_execute_refused_0a000(
    conn: psycopg.Connection[Any], sql: str, simple: bool
) -> None:
    cur = psycopg.ClientCursor(conn) if simple else conn.cursor()
    with pytest.raises(pe.FeatureNotSupported) as e:
        cur.execute(sql)
    word = sql.split()[-1 if sql.startswith("/*") else 0].upper()
    word = "EXECUTE" if sql.startswith("/*") else word
    assert str(e.value.diag.message_primary) == f"SQL-level {word} is not supported by dpsql"
    hint = e.value.diag.message_hint or ""
    assert "extended query protocol" in hint and "prepared statements" in hint
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the session still works


def test_prepare_transaction_and_transaction_block(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(pe.FeatureNotSupported, match="PREPARE TRANSACTION"):
        conn.execute("PREPARE TRANSACTION 'x'")
    conn.execute("BEGIN")
    with pytest.raises(pe.FeatureNotSupported):
        conn.execute("EXECUTE p")
    with pytest.raises(pe.InFailedSqlTransaction):  # the refusal fails the block, as in PostgreSQL
        conn.execute("SELECT 1")
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_driver_prepared_statements_and_deallocate(conn: psycopg.Connection[Any]) -> None:
    for _ in range(3):  # prepare=True: a named protocol-level statement, reused
        assert conn.execute("SELECT %s::int + 1", (1,), prepare=True).fetchone() == (2,)
    conn.execute("DEALLOCATE ALL")
    assert conn.execute("SELECT %s::int + 1", (2,), prepare=True).fetchone() == (3,)
    with pytest.raises(pe.InvalidSqlStatementName):  # 26000, as PostgreSQL
        conn.execute("DEALLOCATE nosuch")
    assert conn.execute("SELECT 1").fetchone() == (1,)

"""A constant PostgreSQL can't read (``amount > 'abc'``, ``DATE '2025-13-45'``,
``TO_DATE('xx', 'YYYY')``) fails in PostgreSQL from the statement alone, before any row is
read: dpsql refuses it with PostgreSQL's own SQLSTATE and words (its constants are checked by
PostgreSQL with no table read: dpsql.execute.constant_probe), before any budget is reserved.

Was: 22000 "PostgreSQL refused this statement while planning it ... the database's message is
withheld" (the zero-row probe), dpsql's own 22023 / 0A000 for a cast or to_date of a bad
constant, and a charged answer then 22P02 for ``HAVING COUNT(*) > 'abc'``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_const") as e:
        yield e


def _spent(engine: Engine, s: SessionContext) -> list[tuple[Any, ...]]:
    rows = engine.execute(engine.prepare("SELECT * FROM dpsql.history"), s).rows
    return [r for r in rows if r[8] != "refunded"]


def _postgres_error(dsn: str, sql: str) -> tuple[str | None, str | None]:
    """What PostgreSQL itself says to ``sql`` (the demo tables are the same)."""
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as e:
        conn.execute(sql)
    return e.value.sqlstate, e.value.diag.message_primary


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("SELECT COUNT(*) FROM purchases WHERE amount > 'abc'", "22P02"),
        ("SELECT SUM(amount) FROM purchases WHERE amount::numeric > 'abc'", "22P02"),
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at > 'notadate'", "22007"),
        ("SELECT category, COUNT(*) FROM purchases WHERE amount > 'x1' GROUP BY 1", "22P02"),
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at > DATE '2025-13-45'", "22008"),
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at > '2025-02-30'::date", "22008"),
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at > TO_DATE('xx', 'YYYY')", "22007"),
        ("SELECT COUNT(*) FROM purchases WHERE quantity = CAST('1.5x' AS int)", "22P02"),
        (
            "SELECT category, COUNT(*) FROM purchases GROUP BY category HAVING COUNT(*) > 'abc'",
            "22P02",
        ),
        (
            "SELECT COUNT(*) FROM purchases p JOIN regions r ON p.region = r.code "
            "WHERE r.name > 'a' AND p.amount > 'abc'",
            "22P02",
        ),
    ],
)
def test_a_bad_constant_is_postgresqls_own_error_and_free(
    engine: Engine, demo_dsn: str, sql: str, sqlstate: str
) -> None:
    s = SessionContext(analyst="analyst")
    before = _spent(engine, s)  # the module's ledger: test_good_constants_are_answered may be first
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare(sql, "analyst"), s)
    assert (e.value.sqlstate, e.value.message) == _postgres_error(demo_dsn, sql), e.value
    assert e.value.sqlstate == sqlstate
    assert _spent(engine, s) == before  # no auto-bound slice, no answer


def test_good_constants_are_answered(engine: Engine) -> None:
    s = SessionContext(analyst="analyst")
    sql = "SELECT COUNT(*) FROM purchases WHERE purchased_at > '2025-03-01' AND amount > '10'"
    r = engine.execute(engine.prepare(sql), s)
    assert r.rows and r.epsilon_spent > 0

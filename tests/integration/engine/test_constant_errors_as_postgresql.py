"""Statements PostgreSQL refuses from their constants alone are refused by dpsql the same way:
its SQLSTATE and its words, before anything is charged (was: answered, as a number with an
error bar, or refused after the charge with the database's message withheld; newcomer20).

* a constant PostgreSQL folds while planning (``amount > 1/0``, ``COUNT(1/0)``,
  ``'1e400'::float8``, ``1e30::int``) is sent as written: it fails whatever the data;
* a row's value divided by a constant that is 0 (``amount % 0``): PostgreSQL fails on the first
  row it divides; dpsql fails while planning, whatever the data (no row decides the error:
  ``WHERE amount < 0 AND amount % 0 = 1`` selects no row, PostgreSQL answers it, dpsql still
  refuses it);
* ``%`` and ``div()`` of a float: PostgreSQL has no such operator (42883).

PostgreSQL itself is the oracle: each statement also runs directly on the demo's upstream.
Deterministic (which statements are refused, with which SQLSTATE and words).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

REFUSED = [
    "SELECT COUNT(*) FROM purchases WHERE amount % 0 = 1",
    "SELECT COUNT(*) FROM purchases WHERE amount > 1/0",
    "SELECT COUNT(*) FROM purchases WHERE amount % (1 - 1) = 1",
    "SELECT COUNT(*) FROM purchases WHERE quantity::float8 / 0 > 1",
    "SELECT COUNT(*) FROM purchases WHERE amount / 0.0 > 1",
    "SELECT COUNT(1/0) FROM purchases",
    "SELECT COUNT(amount % 0) FROM purchases",
    "SELECT category, COUNT(1e30::int) FROM purchases GROUP BY category",
    "SELECT COUNT(*) FROM purchases WHERE amount > '1e400'::float8",
    "SELECT COUNT(*) FROM purchases WHERE amount > 1e30::int",
    "SELECT COUNT(*) / 0 FROM purchases",
    "SELECT COUNT(*) FROM purchases WHERE amount::float8 % 2 = 1",
    "SELECT COUNT(*) FROM purchases WHERE (amount::float8 + 1) % 2 = 1",
    "SELECT COUNT(*) FROM purchases WHERE div(amount::float8, 2) = 1",
    "SELECT SUM(quantity % 2.5::float8) FROM purchases",
    "SELECT COUNT(*) FROM purchases LIMIT 1/0",
    "SELECT category, COUNT(*) FROM purchases GROUP BY category OFFSET 1e30::int",
]
ANSWERED = [
    "SELECT COUNT(*) FROM purchases WHERE amount % 2 = 1",
    "SELECT COUNT(*) FROM purchases WHERE CASE WHEN false THEN amount % 0 END = 1",
    "SELECT COUNT(*) FROM purchases WHERE amount > 7 % 2",
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy, demo_dsn, "dpsql_ce") as e:
        yield e


def _postgresql(dsn: str, sql: str) -> tuple[str, str] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(sql)
        except psycopg.Error as e:
            assert e.diag.sqlstate is not None and e.diag.message_primary is not None
            return e.diag.sqlstate, e.diag.message_primary
    return None


def _dpsql(engine: Engine, sql: str) -> tuple[str, str] | None:
    try:
        engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    except DpsqlError as e:
        return e.sqlstate, e.message
    return None


def _spent(engine: Engine) -> list[object]:
    assert engine.ledger is not None
    return [s.epsilon_spent for s in engine.ledger.remaining("analyst")]


@pytest.mark.parametrize("sql", REFUSED)
def test_refused_as_postgresql(engine: Engine, demo_dsn: str, sql: str) -> None:
    pg = _postgresql(demo_dsn, sql)
    assert pg is not None, sql
    before = _spent(engine)
    assert _dpsql(engine, sql) == pg
    assert _spent(engine) == before  # refused before anything is charged


@pytest.mark.parametrize("sql", ANSWERED)
def test_answered_as_postgresql(engine: Engine, demo_dsn: str, sql: str) -> None:
    assert _postgresql(demo_dsn, sql) is None
    assert _dpsql(engine, sql) is None


def test_no_row_decides_the_error(engine: Engine, demo_dsn: str) -> None:
    """No purchase has amount < 0: PostgreSQL never divides and answers; dpsql refuses it all
    the same, as it refuses ``amount % 0`` over rows that reach it (the data can't tell them
    apart)."""
    reached = "SELECT COUNT(*) FROM purchases WHERE amount >= 0 AND amount % 0 = 1"
    unreached = "SELECT COUNT(*) FROM purchases WHERE amount < 0 AND amount % 0 = 1"
    assert _postgresql(demo_dsn, unreached) is None
    assert _dpsql(engine, unreached) == _dpsql(engine, reached) == ("22012", "division by zero")

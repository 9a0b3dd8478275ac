"""A constant PostgreSQL can't read as its column's type (``amount > 'abc'``, ``purchased_at >
'notadate'``) fails while PostgreSQL plans the statement, before any row is read: it is refused
by the zero-row probe before any budget is reserved (it was charged the ``auto`` bounds' slice,
0.2 of epsilon, and said only "the private query failed in the database")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUM(amount) FROM purchases WHERE amount::numeric > 'abc'",
        "SELECT COUNT(*) FROM purchases WHERE purchased_at > 'notadate'",
        "SELECT category, COUNT(*) FROM purchases WHERE amount > 'x1' GROUP BY 1",
    ],
)
def test_a_bad_constant_is_refused_before_any_charge(engine: Engine, sql: str) -> None:
    s = SessionContext(analyst="analyst")
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare(sql), s)
    assert e.value.sqlstate == "22000"
    assert "before reading any row: nothing was charged" in e.value.message
    assert "constant" in (e.value.hint or "")
    assert _spent(engine, s) == []  # no auto-bound slice, no answer


def test_a_bad_cast_of_a_constant_is_refused_when_prepared(engine: Engine) -> None:
    s = SessionContext(analyst="analyst")
    with pytest.raises(DpsqlError) as e:
        engine.prepare("SELECT COUNT(*) FROM purchases WHERE quantity = CAST('1.5x' AS int)")
    assert e.value.sqlstate == "22023"
    assert _spent(engine, s) == []


def test_good_constants_are_answered(engine: Engine) -> None:
    s = SessionContext(analyst="analyst")
    sql = "SELECT COUNT(*) FROM purchases WHERE purchased_at > '2025-03-01' AND amount > '10'"
    r = engine.execute(engine.prepare(sql), s)
    assert r.rows and r.epsilon_spent > 0

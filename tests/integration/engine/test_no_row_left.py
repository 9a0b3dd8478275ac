"""A statement without GROUP BY whose WHERE clause no row can pass, as read from the policy's
``keys:`` of a column (``category = 'Books'`` when the keys are lower-case): the aggregates of no
rows as PostgreSQL gives them (COUNT 0, SUM/AVG NULL), free, with the notice naming the keys and
the likely typo (newcomer22 #9: charged, answered NULL or a noise value such as ``770 [0, 5000]``
while the GROUP BY form was already free, 25de59e). Only where no row can pass: a WHERE clause a
NULL category may pass, or a declared key, is answered (charged) as before. Deterministic (the
free answers are exact; the charged one is only checked to be charged). All fail before but the
last."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

SESSION = SessionContext("analyst", Fraction(1, 2), show_intervals=True)
NOTICE = "the WHERE clause leaves no declared key of category (the declared keys: books, "


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy, demo_dsn, "dpsql_nrl") as e:
        yield e


def _history(engine: Engine) -> list[tuple[object, ...]]:
    return engine.execute(engine.prepare("TABLE dpsql.history", "analyst"), SESSION).rows


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT avg(amount) FROM purchases WHERE category = 'Books'", (None, None, None)),
        (
            "SELECT COUNT(*), SUM(amount), COALESCE(SUM(amount), 0) AS s FROM purchases "
            "WHERE category IN ('Books', 'Travel') AND amount > 10",
            (0, None, 0, 0, 0, None, None),
        ),
        (
            "SELECT MEDIAN(amount) FROM purchases WHERE category IN ('Food', 'Toys')",
            (None, None, None),
        ),
    ],
    ids=["avg", "count sum coalesce", "median"],
)
def test_no_row_can_pass_the_where_clause(engine: Engine, sql: str, want: tuple[Any]) -> None:
    before = _history(engine)
    got = engine.execute(engine.prepare(sql, "analyst"), SESSION)
    assert [tuple(r) for r in got.rows] == [want]
    assert got.epsilon_spent == 0 and _history(engine) == before
    assert got.notices[0].startswith(NOTICE), got.notices
    assert "no row can pass it whatever the data" in got.notices[0]
    assert "(nothing was read or charged)" in got.notices[0]
    if "Books" in sql:
        assert got.notices[0].endswith("keys are compared exactly: write 'books'")


def test_having_over_no_rows(engine: Engine) -> None:
    sql = "SELECT COUNT(*) FROM purchases WHERE category = 'Books' HAVING COUNT(*) > 0"
    got = engine.execute(engine.prepare(sql, "analyst"), SESSION)
    assert got.rows == [] and got.epsilon_spent == 0


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM purchases WHERE category = 'Books' OR category IS NULL",
        "SELECT COUNT(*) FROM purchases WHERE category = 'books'",
    ],
    ids=["a NULL may pass", "a declared key"],
)
def test_a_where_some_row_may_pass_is_answered(engine: Engine, sql: str) -> None:
    got = engine.execute(engine.prepare(sql, "analyst"), SESSION)
    assert got.epsilon_spent > 0 and not any(n.startswith(NOTICE) for n in got.notices)

"""The analyst's ledger statements: SHOW dpsql.budget, dpsql.budget and dpsql.history."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction

import pytest
import sqlglot

from dpsql.budget import route
from dpsql.budget.ledger import Ledger
from dpsql.dp.accounting import Cost
from dpsql.errors import UndefinedColumn, UndefinedTable, UnsupportedSql
from tests.integration.ledger_support import policy


@pytest.fixture(scope="module")
def ledger(make_db: Callable[[str], str]) -> Iterator[Ledger]:
    pol = policy(
        {"alice": {"epsilon": 2.0}, "bob": {"epsilon": 2.0}}, dataset_budget={"epsilon": 3.0}
    )
    lg = Ledger.open(make_db("views"), pol)
    lg.commit(lg.reserve("alice", Cost(epsilon=Fraction(1, 2)), "fp-a1"), "k1", b"x")
    lg.commit(lg.reserve("alice", Cost(epsilon=Fraction(1, 4)), "fp-a2"))
    lg.lookup("alice", "k1")
    lg.commit(lg.reserve("bob", Cost(epsilon=Fraction(1)), "fp-bob"))
    yield lg
    lg.close()


def test_show_budget(ledger: Ledger) -> None:
    r = route.answer(ledger, "alice", "SHOW dpsql.budget")
    assert [c.name for c in r.columns] == ["dpsql.budget"] and r.command_tag == "SHOW"
    [(text,)] = r.rows
    assert text.startswith("analyst alice: epsilon 1.25 of 2")
    assert "dataset testdata: epsilon 1.25 of 3" in text
    tree = sqlglot.parse_one("SHOW dpsql.budget", read="postgres")
    assert route.answer(ledger, "alice", tree).rows == r.rows


def test_select_budget_and_history(ledger: Ledger) -> None:
    r = route.answer(ledger, "alice", "SELECT * FROM dpsql.budget")
    assert r.command_tag == "SELECT 2"
    assert [c.name for c in r.columns] == [c.name for c in route.describe("TABLE dpsql.budget")]
    mine = dict(zip([c.name for c in r.columns], r.rows[0], strict=True))
    assert mine["name"] == "alice" and mine["epsilon_spent"] == Fraction(3, 4)
    h = route.answer(ledger, "alice", "select fingerprint, cached FROM DPSQL.history ORDER BY id")
    assert h.rows == [("fp-a1", False), ("fp-a2", False), ("fp-a1", True)]  # never bob's
    one = route.answer(
        ledger,
        "alice",
        "SELECT fingerprint AS f FROM dpsql.history ORDER BY cached DESC, id LIMIT 1 OFFSET 1",
    )
    assert one.rows == [("fp-a1",)] and [c.name for c in one.columns] == ["f"]
    assert route.answer(ledger, "bob", "TABLE dpsql.history").command_tag == "SELECT 1"


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("SELECT * FROM dpsql.release", UndefinedTable),
        ("SELECT payload FROM dpsql.answer", UndefinedTable),
        ("SELECT * FROM dpsql.budget WHERE name = 'bob'", UnsupportedSql),
        ("SELECT * FROM dpsql.history h JOIN dpsql.release r ON true", UnsupportedSql),
        ("SELECT count(*) FROM dpsql.history", UnsupportedSql),
        ("SELECT analyst FROM dpsql.history", UndefinedColumn),
        ("SELECT * FROM dpsql.budget LIMIT (SELECT 1)", UnsupportedSql),
        ("WITH x AS (SELECT 1) SELECT * FROM dpsql.budget", UnsupportedSql),
    ],
)
def test_anything_else_is_refused(ledger: Ledger, sql: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        route.answer(ledger, "alice", sql)

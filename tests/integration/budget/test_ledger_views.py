"""The analyst's ledger statements: SHOW dpsql.budget, dpsql.budget and dpsql.history."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction

import pytest
import sqlglot

from dpsql.budget import route
from dpsql.budget.ledger import Ledger
from dpsql.dp.accounting import Cost
from dpsql.errors import InvalidColumnReference, UndefinedColumn, UndefinedTable, UnsupportedSql
from tests.integration.budget.ledger_support import policy


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
    assert text.startswith('analyst "alice": epsilon 1.25 of 2')
    assert 'dataset "testdata": epsilon 1.25 of 3' in text
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


def test_order_by_position_and_output_alias(ledger: Ledger) -> None:
    """ORDER BY 2 DESC and ORDER BY an output alias sort as PostgreSQL would (psql users type both)."""
    by_name = route.answer(ledger, "alice", "SELECT fingerprint, id FROM dpsql.history ORDER BY id")
    by_pos = route.answer(
        ledger, "alice", "SELECT fingerprint, id FROM dpsql.history ORDER BY 2 DESC"
    )
    assert by_pos.rows == by_name.rows[::-1]
    by_alias = route.answer(
        ledger, "alice", "SELECT fingerprint, id AS n FROM dpsql.history ORDER BY n DESC"
    )
    assert by_alias.rows == by_pos.rows
    with pytest.raises(InvalidColumnReference):
        route.answer(ledger, "alice", "SELECT id FROM dpsql.history ORDER BY 2")


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


def test_units_agree_across_views_refusals_and_admin(make_db: Callable[[str], str]) -> None:
    """After pure, partition-selection and Gaussian releases, SHOW dpsql.budget, the dpsql.budget
    view, ``dpsql budget show`` and the 53400 refusal state the same amounts; spent + remaining
    = limit; a query is refused exactly when its need exceeds what remains."""
    from dpsql.budget import admin, views
    from dpsql.budget.filter import Filter
    from dpsql.budget.format import fmt_down, fmt_up
    from dpsql.errors import BudgetExhausted

    micro = Fraction(1, 10**6)
    pol = policy(  # one order each (the policy's own): hand-computed below
        {"alice": {"epsilon": 1.0, "delta": 1e-6, "renyi_order": 23.3}},
        dataset_budget={"epsilon": 5.0, "delta": 1e-5, "renyi_order": 5.0},
    )
    with Ledger.open(make_db("views"), pol) as lg:
        lg.commit(lg.reserve("alice", Cost(epsilon=Fraction(1, 10)), "p"))
        lg.commit(lg.reserve("alice", Cost(epsilon=Fraction(1, 20), delta=micro / 4), "s"))
        gauss = Cost(rho=Fraction(1, 1000))
        lg.commit(lg.reserve("alice", gauss, "g", delta_for_rho=micro))
        [me, ds] = lg.remaining("alice")
        f = Filter.configure(Fraction(1), micro, Fraction(233, 10))  # c = 0.46556
        assert f.overhead is not None and me.renyi_order == f.order
        # r(0.1) = 0.1 (< 23.3 * 0.01 / 2), r(0.05) = 23.3 * 0.0025 / 2 = 0.029125, r(gauss) = a rho
        spent = Fraction(1, 10) + Fraction(29125, 10**6) + f.order * Fraction(1, 1000) + f.overhead
        assert Fraction(me.epsilon_spent) - Fraction(1, 10**12) < spent <= me.epsilon_spent
        assert abs(me.epsilon_spent + me.epsilon_remaining - 1) <= Fraction(1, 10**12)
        assert (me.delta_limit, me.delta_explicit_limit) == (micro, micro / 2)
        assert (me.delta_spent, me.delta_remaining) == (micro / 4, micro / 4)
        g = Filter.configure(Fraction(5), Fraction(1, 10**5), Fraction(5))  # the dataset's
        assert g.overhead is not None and ds.renyi_order == g.order != f.order
        pure = [Cost(epsilon=Fraction(1, 10)), Cost(epsilon=Fraction(1, 20))]
        ds_spent = sum(min(c.epsilon, g.order * c.epsilon**2 / 2) for c in pure) + g.overhead
        ds_spent += g.order * Fraction(1, 1000)
        assert Fraction(ds.epsilon_spent) - Fraction(1, 10**12) < ds_spent <= ds.epsilon_spent
        left = fmt_down(Fraction(me.epsilon_remaining))
        show = views.show_budget(lg, "alice")
        assert show.startswith(
            f'analyst "alice": epsilon {left} of 1 left, delta 0.00000025 of 0.0000005'
        )
        table = admin.show(lg, "alice").splitlines()
        assert table[1].split()[:6] == [
            "analyst",
            "alice",
            "none",
            fmt_up(Fraction(me.epsilon_spent)),
            "1",
            left,
        ]
        assert "renyi order" in table[0] and "23.3" in table[1].split()
        # refused exactly when the need exceeds what remains: need of k Gaussian releases = k a rho
        k = int(Fraction(me.epsilon_remaining) / (f.order * gauss.rho))
        [(st, need), (_, ds_need)] = lg.needs("alice", Cost(rho=gauss.rho * (k + 1)))
        assert st == me and need == f.order * gauss.rho * (k + 1) > st.epsilon_remaining
        assert ds_need == g.order * gauss.rho * (k + 1)  # each budget at its own order
        with pytest.raises(BudgetExhausted) as info:
            lg.reserve("alice", Cost(rho=gauss.rho * (k + 1)), "g", delta_for_rho=micro)
        assert f"you have epsilon {left} left" in info.value.message
        assert f"needs epsilon {fmt_up(f.order * gauss.rho * (k + 1))}" in info.value.message
        lg.commit(lg.reserve("alice", Cost(rho=gauss.rho * k), "g", delta_for_rho=micro))

"""The 53400 refusal in the analyst's terms (newcomer23 #19): a statement run at epsilon 5 was
told it "needs epsilon 4.712" with no word why. Each of its releases (the auto bounds' choices,
the answer) adds to the budget's Renyi privacy filter, which composes many releases for less
than their sum once small ones have been spent: the need is that filter's increase (the number
is right, :meth:`dpsql.budget.filter.Filter.need`); the words now say so. And "analyst analyst
(analyst asked)" (an analyst named analyst) read as a typo: the analyst's own budget is "your
budget", its name quoted ('your budget (analyst "analyst")': "analyst analyst" read as a typo
still, newcomer24 #12)."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction as F

from dpsql.budget.filter import Spent
from dpsql.budget.records import BudgetRow, Limit, exhausted
from dpsql.dp.accounting import Cost

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LIMIT = Limit("analyst", "analyst", F(100), F(1, 10**4), "none")
STATEMENT = (Cost(epsilon=F(4)), Cost(epsilon=F(1, 2)), Cost(epsilon=F(1, 2)))  # at epsilon 5


def _row(n: int) -> BudgetRow:
    f = BudgetRow(Spent(), F(0), F(0), 0, 0).filter(LIMIT)
    s = Spent()
    for _ in range(n):  # n earlier releases at epsilon 0.2
        s = f.add(s, Cost(epsilon=F(1, 5)))
    return BudgetRow(s, F(0), F(0), 0, n, f.order, f.delta_share, f.more)


def test_a_need_below_the_statements_epsilon_says_why() -> None:
    row = _row(480)  # 96 in releases; the filter counts them as about 41
    e = exhausted("analyst", LIMIT, row, STATEMENT[0], NOW, STATEMENT[1:])
    need = row.filter(LIMIT).need(row.spent, *STATEMENT)
    assert need is not None and need < 5
    assert f"the query needs epsilon {float(need):.4g}" in e.message, e.message
    assert "(its releases add up to epsilon 5; the budget counts them as " in e.message
    assert 'docs/budget.md, "The privacy filter"' in e.message, e.message
    assert e.detail is not None and e.detail.startswith('your budget (analyst "analyst"): '), e
    assert "analyst analyst" not in e.detail, e.detail  # newcomer24 #12: read as a typo


def test_a_need_equal_to_it_says_nothing_more() -> None:
    row = _row(0)
    e = exhausted(
        "analyst",
        Limit("analyst", "analyst", F(4), F(0), "none"),
        row,
        *STATEMENT[:1],
        NOW,
        STATEMENT[1:],
    )
    assert "the query needs epsilon 5 and delta 0" in e.message, e.message
    assert "add up to" not in e.message, e.message
    d = exhausted("bob", Limit("dataset", "demo", F(4), F(0), "none"), row, STATEMENT[0], NOW)
    assert d.detail is not None and d.detail.startswith("dataset demo (bob asked): "), d.detail


def test_at_nothing_left_the_hint_does_not_say_lower_the_epsilon() -> None:
    """At exactly 0 left, 'lower SET dpsql.epsilon' cannot help (newcomer24 #19: SET
    dpsql.epsilon = 0.01 was refused 53400 again): the hint says nothing is left and what can
    help (a repeat, the renewal, a grant); with some left it still says lower it."""
    lim = Limit("analyst", "analyst", F(1), F(0), "day")
    f = BudgetRow(Spent(), F(0), F(0), 0, 0).filter(lim)
    spent = f.add(Spent(), Cost(epsilon=F(1)))
    row = BudgetRow(spent, F(0), F(0), 0, 1, f.order, f.delta_share, f.more)
    assert f.epsilon_remaining(spent) == 0
    e = exhausted("analyst", lim, row, Cost(epsilon=F(1, 100)), NOW)
    assert "epsilon 0 left" in e.message, e.message
    assert e.hint is not None and "lower SET dpsql.epsilon" not in e.hint, e.hint
    assert e.hint.startswith("nothing is left for a new answer at any epsilon: repeat an earlier")
    assert "wait for the budget to renew at 2026-01-02 00:00 UTC" in e.hint, e.hint
    assert "dpsql budget grant" in e.hint, e.hint
    half = f.add(Spent(), Cost(epsilon=F(1, 2)))
    row = BudgetRow(half, F(0), F(0), 0, 1, f.order, f.delta_share, f.more)
    e = exhausted("analyst", lim, row, Cost(epsilon=F(1)), NOW)
    assert e.hint is not None and e.hint.startswith("lower SET dpsql.epsilon, "), e.hint

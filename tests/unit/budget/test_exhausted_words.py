"""The 53400 refusal in the analyst's terms (newcomer23 #19): a statement run at epsilon 5 was
told it "needs epsilon 4.712" with no word why. Each of its releases (the auto bounds' choices,
the answer) adds to the budget's Renyi privacy filter, which composes many releases for less
than their sum once small ones have been spent: the need is that filter's increase (the number
is right, :meth:`dpsql.budget.filter.Filter.need`); the words now say so. And "analyst analyst
(analyst asked)" (an analyst named analyst) read as a typo: the analyst's own budget is "your
budget", its name quoted ('your budget (analyst "analyst")': "analyst analyst" read as a typo
still, newcomer24 #12)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
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
    assert e.hint is not None and e.hint.startswith(
        "SET dpsql.epsilon = 0.5 or lower would pass now, "
    )


TIGHT = Limit("analyst", "analyst", F(40), F(1, 10**4), "none")  # 35.67 of it spent by _row(480)


def _scaled_fits(row: BudgetRow, e: F) -> bool:
    f = row.filter(TIGHT)
    spent = row.spent
    for c in STATEMENT:
        spent = f.add(spent, Cost(epsilon=c.epsilon * e / 5))
    return f.admits(spent)


def test_the_hint_names_the_epsilon_that_passes_now() -> None:
    """Property (newcomer25 #12): after the privacy filter's conversion ("needs epsilon ...
    counts them as ..."), the hint names the largest SET dpsql.epsilon (3 significant digits,
    rounded down) the statement's releases, each at its share, would pass this budget at now:
    at that epsilon they fit, one step (in its 3rd digit) above it they do not. Numbers read
    from the ledger's totals; amounts to 4 significant digits, what is left rounded down and
    what is needed up (never a refusal whose numbers read as if it fit)."""
    row = _row(480)
    f = row.filter(TIGHT)
    need = f.need(row.spent, *STATEMENT)
    left = f.epsilon_remaining(row.spent)
    assert need is not None and left < need < 5  # refused, after the filter's conversion
    e = exhausted("analyst", TIGHT, row, STATEMENT[0], NOW, STATEMENT[1:], F(1, 1000))
    assert e.hint is not None and e.hint.startswith("SET dpsql.epsilon = "), e.hint
    text = e.hint.split(" = ")[1].split(" ")[0]
    assert e.hint.startswith(f"SET dpsql.epsilon = {text} or lower would pass now, "), e.hint
    said = F(text)
    digits = len(text.replace(".", "").lstrip("0"))
    assert digits <= 3, text
    step = F(10) ** (len(str(int(said))) - 3) if said >= 1 else F(1, 10 ** (len(text) - 2))
    assert _scaled_fits(row, said), said
    assert not _scaled_fits(row, said + step), (said, step)
    shown = F(e.message.split("you have epsilon ")[1].split(" ")[0])
    needed = F(e.message.split("the query needs epsilon ")[1].split(" ")[0])
    assert shown <= left and needed >= need and shown < needed, (shown, left, needed, need)
    assert len(str(float(shown)).replace(".", "").lstrip("0")) <= 4, shown


def test_no_epsilon_the_policy_allows_fits() -> None:
    """Where even the analyst's smallest epsilon does not fit, the hint says so, not 'lower'."""
    lim = Limit("analyst", "analyst", F(1), F(0), "none")
    f = BudgetRow(Spent(), F(0), F(0), 0, 0).filter(lim)
    spent = f.add(Spent(), Cost(epsilon=F(9999, 10000)))
    row = BudgetRow(spent, F(0), F(0), 0, 1, f.order, f.delta_share, f.more)
    e = exhausted("analyst", lim, row, Cost(epsilon=F(1, 10)), NOW, (), F(1, 1000))
    assert e.hint is not None and e.hint.startswith(
        "no SET dpsql.epsilon this statement may use fits what is left (its smallest, 0.001, "
        "does not): repeat an earlier query"
    ), e.hint


def test_the_delta_words_tell_one_story() -> None:
    """Property (newcomer25 #12): the DETAIL's delta in all names its two parts, as SHOW
    dpsql.budget does: the part for partition selection and the other, the privacy filter's
    ('delta 0.0001 in all (0.00005 of that delta for partition selection, the other 0.00005
    the privacy filter's)'; SHOW: 'delta 0.00005 of 0.00005 left for partition selection (the
    other 0.00005 of its delta 0.0001 is the privacy filter's)')."""
    row = _row(480)
    e = exhausted("analyst", LIMIT, row, STATEMENT[0], NOW, STATEMENT[1:])
    assert e.detail is not None
    assert (
        "epsilon 100 and delta 0.0001 in all (0.00005 of that delta for partition selection, "
        "the other 0.00005 the privacy filter's); spent so far"
    ) in e.detail, e.detail


def test_spent_and_left_add_up_to_the_limit_as_shown() -> None:
    """Property (newcomer26 #8): the DETAIL's "spent so far" is shown to the decimal places of
    the epsilon left beside it, so the two read as the limit: spent rounded up, left rounded
    down, their sum at or above the limit by at most two units of the last place shown (was
    "spent so far: epsilon 99.05" beside "0.9597 left", 100.0097; "epsilon 100" beside
    "7.258e-7 left"). And a small amount left is written in decimals, as the others are."""
    rows = [_row(n) for n in (1, 100, 480)]
    for costs in ([F(990403, 10**4)], [F(999999992742, 10**10)], [F(50), F(49), F(9, 10)]):
        f = BudgetRow(Spent(), F(0), F(0), 0, 0).filter(LIMIT)
        s = Spent()
        for c in costs:  # one release each: the filter counts a lone one as its epsilon
            s = f.add(s, Cost(epsilon=c))
        rows.append(BudgetRow(s, F(0), F(0), 0, len(costs), f.order, f.delta_share, f.more))
    for row in rows:
        e = exhausted("analyst", LIMIT, row, STATEMENT[0], NOW, STATEMENT[1:])
        left = re.search(r"epsilon ([\d.e-]+) left", e.message)
        spent = re.search(r"spent so far: epsilon ([\d.e-]+)", e.detail or "")
        if left is None or float(left.group(1)) == 0:
            continue  # nothing left: no amount to read beside it
        assert spent is not None, e.detail
        assert "e" not in left.group(1), e.message
        places = len(left.group(1).partition(".")[2])
        total = Decimal(spent.group(1)) + Decimal(left.group(1))
        assert 0 <= total - 100 <= 2 * Decimal(10) ** -places, (e.message, e.detail)

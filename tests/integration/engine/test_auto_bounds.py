"""``auto`` contribution bounds through the engine: chosen, shown, stored, and charged once.

Deterministic checks on the ledger (no statistics): a bound is a release charged once at its
slice of the statement's epsilon, later statements over the same slice reuse it free (the
statement then gets its whole epsilon), a different filter chooses again, a repeat of a
statement is free, and a fixed policy behaves as before (no bound release, no notice). The
twin that never reuses stored bounds is caught by the same check.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.result import Result
from dpsql.session import SessionContext

COUNT = "SELECT COUNT(*) FROM purchases"
SAME_SLICE = "SELECT COUNT(quantity) FROM purchases"  # same rows: reuses R
OTHER_SLICE = "SELECT COUNT(*) FROM purchases WHERE quantity > 2"


@pytest.fixture
def charged(demo_dsn: str, demo_policy_auto: Any) -> Iterator[tuple[Engine, Ledger]]:
    ledger = Ledger.open(demo_dsn, demo_policy_auto, schema=f"dpsql_ab{uuid.uuid4().hex[:8]}")
    engine = Engine(demo_policy_auto, demo_dsn, ledger, pool_size=2)
    yield engine, ledger
    engine.close()
    ledger.close()


def ask(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> Result:
    return engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", epsilon))


def bound_releases(ledger: Ledger) -> list[Fraction]:
    return [Fraction(h.epsilon) for h in ledger.history("analyst") if h.mechanism == "auto_bound"]


def spent(ledger: Ledger) -> Fraction:
    return sum((Fraction(h.epsilon) for h in ledger.history("analyst")), Fraction(0))


def check_charged_once(engine: Engine, ledger: Ledger) -> list[str]:
    """The property, as a list of violations (empty: holds)."""
    bad = []
    first = ask(engine, COUNT)
    if "chosen from the data with epsilon 0.2 of this statement's 1" not in first.notices[0]:
        bad.append(f"first notice: {first.notices}")
    if bound_releases(ledger) != [Fraction(1, 5)] or spent(ledger) != 1:
        bad.append(f"first: {bound_releases(ledger)}, total {spent(ledger)}")
    second = ask(engine, SAME_SLICE)
    if bound_releases(ledger) != [Fraction(1, 5)]:
        bad.append(f"the same slice chose again: {bound_releases(ledger)}")
    if spent(ledger) != 2 or second.epsilon_spent != pytest.approx(1.0):
        bad.append(f"second: total {spent(ledger)}")
    if "reused free" not in second.notices[0]:
        bad.append(f"second notice: {second.notices}")
    again = ask(engine, COUNT)
    if not again.cached or again.rows != first.rows or spent(ledger) != 2:
        bad.append("a repeat was not free")
    return bad


def test_a_bound_is_charged_once_and_reused_free(charged: tuple[Engine, Ledger]) -> None:
    engine, ledger = charged
    assert check_charged_once(engine, ledger) == []
    ask(engine, OTHER_SLICE)  # another filter: its own choice
    assert bound_releases(ledger) == [Fraction(1, 5)] * 2 and spent(ledger) == 3


def test_a_twin_that_never_reuses_is_caught(charged: tuple[Engine, Ledger]) -> None:
    engine, ledger = charged
    ledger.peek = lambda analyst, key: None  # type: ignore[method-assign]
    bad = check_charged_once(engine, ledger)
    assert any("the same slice chose again" in b for b in bad), bad


JOIN_COUNT = "SELECT COUNT(*) FROM purchases p JOIN pums q ON p.user_id = q.pid"
JOIN_SAME = "SELECT COUNT(p.quantity) FROM purchases p JOIN pums q ON p.user_id = q.pid"


def check_join_scope(engine: Engine, ledger: Ledger) -> list[str]:
    """A join's bound is its own slice: chosen once for the join and reused by the join only;
    the table alone chooses its own (and reuses that), never the join's (violations listed)."""
    bad = []
    first = ask(engine, JOIN_COUNT)
    if bound_releases(ledger) != [Fraction(1, 5)] or "chosen from the data" not in first.notices[0]:
        bad.append(f"join first: {bound_releases(ledger)} {first.notices[:1]}")
    second = ask(engine, JOIN_SAME)
    if bound_releases(ledger) != [Fraction(1, 5)] or "reused free" not in second.notices[0]:
        bad.append(f"join again chose: {bound_releases(ledger)} {second.notices[:1]}")
    alone = ask(engine, COUNT)
    if bound_releases(ledger) != [Fraction(1, 5)] * 2:
        bad.append(f"the table alone reused the join's bound: {alone.notices[:1]}")
    ask(engine, SAME_SLICE)
    ask(engine, "SELECT COUNT(q.age) FROM purchases p JOIN pums q ON p.user_id = q.pid")
    if bound_releases(ledger) != [Fraction(1, 5)] * 2 or spent(ledger) != 5:
        bad.append(f"reuse: {bound_releases(ledger)}, total {spent(ledger)}")
    return bad


def test_a_join_bound_is_charged_once_in_its_own_slice(charged: tuple[Engine, Ledger]) -> None:
    engine, ledger = charged
    assert check_join_scope(engine, ledger) == []


def test_a_twin_whose_slice_ignores_the_join_is_caught(
    charged: tuple[Engine, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broken twin keys a choice by the table and filter only (no join, no alias): the
    table alone then reuses the join's bound, and the check says so."""
    from dpsql.sql import auto_bounds as sql_auto

    def table_only(a: Any, groups: bool) -> str:
        return a.table + (a.where.sql("postgres") if a.where is not None else "")

    monkeypatch.setattr(sql_auto, "_slice", table_only)
    engine, ledger = charged
    bad = check_join_scope(engine, ledger)
    assert any("the table alone reused the join's bound" in b for b in bad), bad


def test_explain_shows_the_choice_before_and_after(charged: tuple[Engine, Ledger]) -> None:
    engine, ledger = charged
    sql = "SELECT category, SUM(amount) FROM purchases GROUP BY category"

    def explain() -> str:
        return "\n".join(r[0] for r in ask(engine, f"EXPLAIN {sql}").rows)

    before = explain()
    # 5 categories: G set from the declared keys, named so (not as stored: nothing is yet)
    assert "5 groups per user_id (from the declared keys; set without the data, free)" in before
    assert "stored" not in before.split("Auto bounds: ")[1].split("\n")[0]
    # per-group SUM: one L1 cap over a unit's groups, not R and a clamp
    assert "amount summed per user_id over all its groups: chosen from the data when" in before
    assert bound_releases(ledger) == []  # EXPLAIN spends nothing
    notice = ask(engine, sql).notices[0]
    after = explain()
    chosen = notice.split("contribution bounds: ")[1].split(" (")[0]
    line = after.split("Auto bounds: ")[1].split("\n")[0]
    for bound in chosen.split(", "):  # each bound the statement ran with, in EXPLAIN now
        assert bound in line, (notice, after)
    assert (
        "(chosen from the data by an earlier statement over the same rows: stored, reused free)"
        in line
    )
    assert "when the statement runs" not in line, line
    assert "amount summed to at most" in chosen and "5 groups per user_id" in chosen
    assert "per unit over all its groups at most: SUM " in after, after  # the plan's L1 cap
    assert "per user_id over all groups" in chosen and "rows per user_id" not in chosen


def test_fixed_numbers_choose_nothing(demo_dsn: str, demo_policy: Any) -> None:
    """The fixed-bounds demo policy (its former numbers): no bound release, no notice."""
    ledger = Ledger.open(demo_dsn, demo_policy, schema=f"dpsql_ab{uuid.uuid4().hex[:8]}")
    engine = Engine(demo_policy, demo_dsn, ledger, pool_size=2)
    try:
        r = ask(engine, "SELECT category, SUM(amount) FROM purchases GROUP BY category")
        assert not any("contribution bounds:" in n for n in r.notices), r.notices
        assert bound_releases(ledger) == [] and spent(ledger) == 1
    finally:
        engine.close()
        ledger.close()


def test_without_a_ledger_every_statement_chooses(engine_auto: Engine) -> None:
    r = engine_auto.execute(engine_auto.prepare(COUNT), SessionContext())
    assert "stored" not in r.notices[0] and r.epsilon_spent == pytest.approx(1.0)


@pytest.fixture
def engine_auto(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    e = Engine(demo_policy_auto, demo_dsn, pool_size=2)
    yield e
    e.close()


def test_exact_choice_reads_the_data(
    demo_dsn: str, demo_policy_auto: Any, make_db: Callable[[str], str]
) -> None:
    """PUMS has 1-4 rows a person: the zero-noise choice keeps 3 or 4 (never 1), over all of a
    person's groups (a per-group COUNT: one L1 cap over the groups)."""
    from tests.helpers import EXACT

    e = Engine(demo_policy_auto, demo_dsn, pool_size=2, noise=EXACT)
    try:
        r = e.execute(e.prepare("SELECT sex, COUNT(*) FROM pums GROUP BY sex"), SessionContext())
        notice = r.notices[0]
        assert any(f"at most {n} rows per pid over all groups" in notice for n in (3, 4)), notice
        assert "2 groups per pid" in r.notices[0]
    finally:
        e.close()


@pytest.mark.parametrize(
    "sql, expect",
    [
        (  # grouping sets: R over all of a unit's rows, G from the declared keys (5)
            "SELECT category, COUNT(*), SUM(amount) FROM purchases GROUP BY ROLLUP (category)",
            "5 groups per user_id",
        ),
        (  # monthly keys without declared values: partition selection, G chosen
            "SELECT date_trunc('month', purchased_at) AS m, COUNT(DISTINCT user_id) "
            "FROM purchases GROUP BY 1",
            "groups per user_id",
        ),
        (  # a public table joined: the private table's own bounds are chosen
            "SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON p.region = r.code "
            "GROUP BY r.name",
            "per user_id per group",  # "N rows" ("1 row" when R = 1)
        ),
        (  # per-group COUNT on one table: an L1 cap over a unit's groups
            "SELECT region, COUNT(*) FROM purchases GROUP BY region",
            "rows per user_id over all groups",
        ),
        (  # two private tables joined on their units: R chosen from the joined rows
            "SELECT COUNT(*) FROM purchases p JOIN pums q ON p.user_id = q.pid",
            "rows per user_id (chosen from the data",
        ),
    ],
)
def test_query_shapes(engine_auto: Engine, sql: str, expect: str) -> None:
    r = engine_auto.execute(engine_auto.prepare(sql), SessionContext())
    assert expect in r.notices[0], r.notices
    assert r.epsilon_spent == pytest.approx(1.0)


def test_parameters_are_part_of_the_slice(charged: tuple[Engine, Ledger]) -> None:
    engine, ledger = charged
    p = engine.prepare("SELECT COUNT(*) FROM purchases WHERE quantity > $1", "analyst")
    s = SessionContext("analyst", Fraction(1))
    engine.execute(p, s, [2])
    engine.execute(p, s, [2])  # a repeat: free
    engine.execute(p, s, [5])  # another filter: chooses again
    assert bound_releases(ledger) == [Fraction(1, 5)] * 2 and spent(ledger) == 2


def test_an_epsilon_too_small_to_choose_keeps_the_defaults(
    demo_dsn: str, demo_policy_auto: Any
) -> None:
    """Below what the exact sampler draws (2^-20 per bound), nothing is chosen or spent on
    bounds: 1 row and 1 group per unit, said in the notice (was: an internal error)."""
    policy = demo_policy_auto.model_copy(
        update={"defaults": demo_policy_auto.defaults.model_copy(update={"min_epsilon": 1e-9})}
    )
    e = Engine(policy, demo_dsn, pool_size=2)
    try:
        r = e.execute(e.prepare(COUNT), SessionContext(epsilon=Fraction(1, 10**6)))
        assert "too small to choose contribution bounds" in r.notices[0], r.notices
        assert r.epsilon_spent == pytest.approx(1e-6)
    finally:
        e.close()


def test_a_join_of_auto_and_fixed_tables_keeps_the_smallest_and_says_so(
    demo_dsn: str, demo_policy_auto: Any
) -> None:
    """pums fixes max_rows_per_unit (3) while purchases says auto: the join's R is not chosen
    (the smallest number is kept, 1 for auto, as before auto existed for joins), nothing is
    spent on it, each table keeps R before the join (no P), nothing is estimated, and the
    notice says why and what to do."""
    tables = dict(demo_policy_auto.tables)
    tables["public.pums"] = tables["public.pums"].model_copy(update={"max_rows_per_unit": 3})
    policy = demo_policy_auto.model_copy(update={"tables": tables})
    e = Engine(policy, demo_dsn, pool_size=2)
    try:
        prepared = e.prepare(JOIN_COUNT)
        a = e.analysis(prepared, [])
        assert a.pre_join_rows == 0 and a.max_rows == 1
        r = e.execute(prepared, SessionContext(epsilon=Fraction(1)))
        assert "max_rows_per_unit is auto for some of the joined private tables" in r.notices[0]
        count = next(n for n in r.notices if n.startswith("COUNT(*)"))
        assert "covers the noise only" in count and "at most 1 row per user_id" in count, count
        assert r.epsilon_spent == pytest.approx(1.0)
    finally:
        e.close()


def test_a_refused_statement_charges_nothing(charged: tuple[Engine, Ledger]) -> None:
    """One statement, one charge: the bound choice and the answer are reserved together before
    any data is read. With 0.5 of the budget left, a statement at epsilon 1 that must choose
    its bound (0.2 of it, affordable alone) is refused whole: nothing charged, no bound
    release; one at 0.5 is answered and uses the rest exactly (before: the refused statement
    had paid its 0.2 slice, and the second was refused too)."""
    from dpsql.dp.accounting import Cost
    from dpsql.errors import BudgetExhausted

    engine, ledger = charged
    for _ in range(20):  # 99.5 of the analyst's 100, in releases under the per-query maximum
        ledger.commit(ledger.reserve("analyst", Cost(epsilon=Fraction(199, 40)), "fill"))
    with pytest.raises(BudgetExhausted):
        ask(engine, OTHER_SLICE)
    assert bound_releases(ledger) == [] and spent(ledger) == Fraction(199, 2)
    assert {h.state for h in ledger.history("analyst")} == {"committed"}
    res = ask(engine, OTHER_SLICE, Fraction(1, 2))
    # answered (one row); not its value: the auto row bound lands far above the data (up to
    # 10^6) with probability ~0.7% (dpsql.dp.bounds: beta), and the count's noise with it, so
    # `> 0` failed with p ~ 5e-4
    assert res.epsilon_spent == pytest.approx(0.5) and len(res.rows) == 1
    assert bound_releases(ledger) == [Fraction(1, 10)] and spent(ledger) == 100


def test_a_small_slice_keeps_the_defaults_and_says_so(demo_dsn: str, demo_policy_auto: Any) -> None:
    """The guard of dpsql.dp.bounds, deterministic on a zero-noise engine (exact unit count):
    PUMS's 201 people over 60 at a slice of 0.2 are fewer than the 341 a reliable choice needs,
    so R keeps its default of 1 and the notice says why; all 1,000 choose from the data."""
    from tests.helpers import EXACT

    e = Engine(demo_policy_auto, demo_dsn, pool_size=2, noise=EXACT)
    try:
        small = e.execute(e.prepare("SELECT COUNT(*) FROM pums WHERE age > 60"), SessionContext())
        assert "1 row per pid" in small.notices[0], small.notices
        assert "rows per pid: too few pid values to choose reliably" in small.notices[0]
        whole = e.execute(e.prepare("SELECT COUNT(*) FROM pums"), SessionContext())
        assert "too few pid values" not in whole.notices[0], whole.notices
    finally:
        e.close()

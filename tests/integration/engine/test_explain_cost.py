"""What dpsql says a statement costs is what it charges (EXPLAIN, the 53400 refusal, keys_from).

Deterministic properties, on the demo data with the shipped policy (``auto`` bounds), each read
from the ledger after the statement ran (never from a mechanism's claim):

* EXPLAIN's "Privacy Cost" and each budget's "Epsilon Needed" are what running the statement
  then adds to ``epsilon_spent`` (``SELECT * FROM dpsql.budget``), the ``auto`` bound choice of a
  first statement included; once answered, EXPLAIN says nothing would be charged;
* ``SELECT DISTINCT`` of a ``keys_from`` column (public keys, nothing measured) charges nothing
  and chooses no bound, as one of a ``keys:`` column;
* a ``keys_from`` key has as many keys as its public table: G is at most that many (no bound
  chosen for it, nothing dropped), in EXPLAIN and in the charge;
* a refusal (53400) of a statement that would choose bounds says what ``SHOW dpsql.budget`` says
  is left, and what the whole statement (bound choices included) needs;
* before its bounds are chosen, EXPLAIN's plan holds them at their defaults (1 row, 1 group, the
  declared range, one row's worth over all groups), as its note says, not at the ceilings.

Before: the DISTINCT charged 0.2 (an ``auto_bound``), G was 6 for 5 regions, EXPLAIN said 0.4 for a
statement charged 0.5, the refusal said "0.4 left ... needs 0.8" while SHOW said 0.6 left, and the
plan showed ``<= 1000000 rows per group`` with an error of 2.5e7.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import BudgetExhausted
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine
from tests.policies import build_policy

SUM_FIRST = "SELECT category, SUM(quantity) FROM purchases WHERE quantity < 9 GROUP BY 1"
DISTINCT = "SELECT DISTINCT region FROM purchases WHERE quantity > 4"
BY_REGION = "SELECT region, COUNT(DISTINCT user_id) FROM purchases GROUP BY region"


@pytest.fixture
def auto_engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_cost") as engine:
        yield engine


def run(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> Any:
    return engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", epsilon))


def explain(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> dict[str, Any]:
    doc: dict[str, Any] = run(engine, f"EXPLAIN (FORMAT JSON) {sql}", epsilon).rows[0][0][0]
    return doc


def ledger_of(engine: Engine) -> Ledger:
    assert isinstance(engine.ledger, Ledger)
    return engine.ledger


def spent(engine: Engine) -> dict[str, Fraction]:
    """Each budget's epsilon_spent, as ``SELECT * FROM dpsql.budget`` shows it."""
    return {s.budget: Fraction(s.epsilon_spent) for s in ledger_of(engine).remaining("analyst")}


def history(engine: Engine) -> list[tuple[str, Fraction]]:
    return [(h.mechanism, Fraction(h.epsilon)) for h in ledger_of(engine).history("analyst")]


def test_explain_states_the_first_charge_and_then_nothing(auto_engine: Engine) -> None:
    eps = Fraction(1, 2)
    doc = explain(auto_engine, SUM_FIRST, eps)
    plan, budget = doc["Plan"], doc["Budget"]
    assert plan["Privacy Cost Epsilon"] == pytest.approx(0.5)
    assert plan["Auto Bound Epsilon"] == pytest.approx(0.1)
    assert (
        "0.4 for the answer and 0.1 for choosing 1 contribution bound"
        in (plan["Privacy Cost Detail"])
    )
    assert budget["Free Repeat"] is False and budget["Would Spend Epsilon"] == pytest.approx(0.5)
    needed = {s["Budget"]: s["Epsilon Needed"] for s in budget["Charged To"]}
    before = spent(auto_engine)
    run(auto_engine, SUM_FIRST, eps)
    after = spent(auto_engine)
    assert sorted(history(auto_engine)) == [
        ("auto_bound", Fraction(1, 10)),
        ("laplace", Fraction(2, 5)),
    ]
    for name, need in needed.items():  # what the filter counts, budget by budget
        assert float(after[name] - before[name]) == pytest.approx(need, abs=1e-9), name
    # answered: a free repeat charges nothing, and EXPLAIN says so everywhere
    again = explain(auto_engine, SUM_FIRST, eps)
    assert again["Budget"]["Free Repeat"] is True
    assert again["Budget"]["Would Spend Epsilon"] == 0
    assert again["Plan"]["Privacy Cost Epsilon"] == 0
    assert {s["Epsilon Needed"] for s in again["Budget"]["Charged To"]} == {0}
    text = [r[0] for r in run(auto_engine, f"EXPLAIN {SUM_FIRST}", eps).rows]
    assert any("Privacy cost: epsilon=0," in t and "free repeat" in t for t in text)
    run(auto_engine, SUM_FIRST, eps)
    assert spent(auto_engine) == after


def test_text_explain_names_the_whole_charge(auto_engine: Engine) -> None:
    text = [r[0] for r in run(auto_engine, f"EXPLAIN {SUM_FIRST}", Fraction(1, 2)).rows]
    cost = next(t for t in text if "Privacy cost:" in t)
    assert "epsilon=0.5," in cost and "0.4 for the answer and 0.1 for choosing" in cost
    charged = [t for t in text if "Charged to:" in t]
    assert len(charged) == 2 and all("epsilon=0.5 of" in t for t in charged)


def test_distinct_of_keys_from_is_free(auto_engine: Engine, demo_dsn: str) -> None:
    doc = explain(auto_engine, DISTINCT)
    assert doc["Plan"]["Privacy Cost Epsilon"] == 0
    assert doc["Budget"]["Would Spend Epsilon"] == 0
    assert "chosen from the data" not in doc["Plan"].get("Auto Contribution Bounds", "")
    rows = run(auto_engine, DISTINCT).rows
    with psycopg.connect(demo_dsn) as conn:
        codes = [r[0] for r in conn.execute("SELECT code FROM regions ORDER BY 1").fetchall()]
    assert sorted(r[0] for r in rows) == codes
    assert [m for m, e in history(auto_engine) if e > 0] == []
    assert "auto_bound" not in {m for m, _ in history(auto_engine)}
    assert set(spent(auto_engine).values()) == {0}


def test_keys_from_bounds_the_groups_by_its_keys(auto_engine: Engine, demo_dsn: str) -> None:
    with psycopg.connect(demo_dsn) as conn:
        n = conn.execute("SELECT COUNT(DISTINCT code) FROM regions").fetchone()[0]  # type: ignore[index]
    assert n == 5
    doc = explain(auto_engine, BY_REGION)
    plan = doc["Plan"]
    assert f"<= {n} groups" in plan["Contribution Bound"]
    assert plan["Plan Rows"] == n  # the key table's keys: known from public data
    [count] = [m for m in plan["Plans"] if m["Node Type"] == "DP Measure"]
    assert count["Sensitivity"] == f"L1={n}"  # COUNT(DISTINCT unit): 1 per group, G = 5
    assert plan["Privacy Cost Epsilon"] == 1 and "Auto Bound Epsilon" not in plan
    result = run(auto_engine, BY_REGION)
    assert len(result.rows) == n
    assert history(auto_engine) == [("laplace", Fraction(1))]  # nothing chosen: G is known
    # narrowed by WHERE, as for declared keys
    narrow = explain(
        auto_engine, BY_REGION.replace("GROUP BY", "WHERE region IN ('N', 'S') GROUP BY")
    )
    assert "<= 2 groups" in narrow["Plan"]["Contribution Bound"]


def test_plan_before_the_bounds_are_chosen_shows_the_defaults(auto_engine: Engine) -> None:
    doc = explain(auto_engine, SUM_FIRST)
    plan = doc["Plan"]
    assert "at most: SUM 10 (L1 cap)" in plan["Contribution Bound"]  # one row's worth
    sums = [m for m in plan["Plans"] if m["Node Type"] == "DP Measure"]
    assert sums[0]["Sensitivity"] == "L1=10"  # not G R c = 5 * 1,000,000 * 10
    [out] = [o for o in doc["Outputs"] if o["Column"] == "sum"]
    assert "at the default bounds shown" in out["Error Interval"]
    count = explain(auto_engine, "SELECT COUNT(*) FROM purchases")["Plan"]
    assert "<= 1 row per group" in count["Contribution Bound"]
    assert "until chosen it shows each at its default" in count["Auto Contribution Bounds"]


SMALL = {
    "analyst": {
        "budget": {"epsilon": 1.6, "delta": 1.0e-4},
        "default_epsilon": 1.0,
        "max_epsilon": 5.0,
    }
}


def _word(pattern: str, text: str) -> str:
    got = re.search(pattern, text)
    assert got is not None, (pattern, text)
    return got.group(1)


def _number(pattern: str, text: str) -> float:
    return float(_word(pattern, text))


def test_refusal_says_what_show_says_and_the_whole_need(demo_dsn: str) -> None:
    policy = build_policy(analysts=SMALL)
    with ledgered_engine(policy, demo_dsn, "dpsql_refuse") as engine:
        run(engine, "SELECT COUNT(*) FROM purchases")  # 0.2 choosing R, 0.8 the answer
        other = "SELECT COUNT(*) FROM purchases WHERE quantity > 2"  # another slice: chooses
        need = next(
            s["Epsilon Needed"]
            for s in explain(engine, other)["Budget"]["Charged To"]
            if s["Budget"] == "analyst"
        )
        show = run(engine, "SHOW dpsql.budget").rows[0][0]
        left = _number(r'analyst "analyst": epsilon ([0-9.e+-]+) of', show)
        before = history(engine)
        with pytest.raises(BudgetExhausted) as refused:
            run(engine, other)
        msg = refused.value.message
        assert _number(r"you have epsilon ([0-9.e+-]+) left", msg) == pytest.approx(left)
        assert _number(r"the query needs epsilon ([0-9.e+-]+)", msg) == pytest.approx(need)
        assert need == pytest.approx(1.0) and left == pytest.approx(0.6)
        assert history(engine) == before  # nothing charged
        # the three say it in the same words: SHOW's left, the refusal's, EXPLAIN's
        words = _word(r'analyst "analyst": epsilon ([0-9.e+-]+) of', show)
        assert _word(r"you have epsilon ([0-9.e+-]+) left", msg) == words
        text = [r[0] for r in run(engine, f"EXPLAIN {other}").rows]
        [line] = [t for t in text if "Charged to: analyst" in t]
        assert f"of {words} remaining" in line and "(exceeds the remaining budget)" in line
        needs = _word(r"the query needs epsilon ([0-9.e+-]+)", msg)
        assert f"epsilon={needs} of" in line


TREE = (
    "SELECT 'many' AS k, COUNT(*) AS n FROM purchases WHERE quantity > 3 "
    "UNION ALL SELECT 'few', COUNT(*) FROM purchases WHERE quantity <= 3"
)


def test_tree_explain_states_its_one_charge(auto_engine: Engine) -> None:
    doc = explain(auto_engine, TREE)
    budget = doc["Budget"]
    assert budget["Free Repeat"] is False and budget["Auto Bound Releases"] == 2
    assert budget["Would Spend Epsilon"] == pytest.approx(1.0)
    needed = {s["Budget"]: s["Epsilon Needed"] for s in budget["Charged To"]}
    for leaf in doc["Plan"]["Plans"]:  # R at its default until chosen, and said so
        assert "<= 1 row per group" in leaf["Contribution Bound"]
        [n] = [o for o in leaf["Outputs"] if o["From"] == "COUNT(*)"]
        assert "at the default bounds shown" in n["Error Interval"]
    before = spent(auto_engine)
    run(auto_engine, TREE)
    after = spent(auto_engine)
    assert sum(e for _, e in history(auto_engine)) == 1
    for name, need in needed.items():
        assert float(after[name] - before[name]) == pytest.approx(need, abs=1e-9), name
    again = explain(auto_engine, TREE)["Budget"]
    assert again["Free Repeat"] is True and "Would Spend Epsilon" not in again


def test_explain_says_what_the_answers_notice_says(auto_engine: Engine) -> None:
    """newcomer22 #15: three numbers for one answer's noise (EXPLAIN before it ran, its notice,
    EXPLAIN after). Before: the plan's error is labelled the noise alone (the interval adds
    what the bounds leave out, estimated when it runs); a free repeat's EXPLAIN gives the
    stored answer's own words, those its notice repeats (released at 0.8 of 1: the bound
    choice took 0.2, so its noise is not the full-epsilon plan's)."""
    sql = "SELECT COUNT(*) FROM purchases WHERE quantity > 3"
    [before] = [o for o in explain(auto_engine, sql)["Outputs"] if o["Column"] == "count"]
    assert (
        "(the noise alone; the answer's interval also holds what the bounds leave out"
        in (before["Error Interval"])
    ), before
    notice = next(n for n in run(auto_engine, sql).notices if n.startswith("COUNT(*): "))
    [after] = [o for o in explain(auto_engine, sql)["Outputs"] if o["Column"] == "count"]
    said = "the stored answer's, as its notice says: "
    assert after["Error Interval"] == said + notice[len("COUNT(*): ") :], (after, notice)
    repeat = next(n for n in run(auto_engine, sql).notices if n.startswith("COUNT(*): "))
    assert repeat == notice  # the free repeat says it again, as EXPLAIN said


def test_a_repeated_quantiles_explain_says_its_notice(auto_engine: Engine) -> None:
    """A quantile's words are the release's own (Release.words): a free repeat's EXPLAIN
    gives them as its notice repeats them."""
    # (quantity > 4: about 24,000 rows, a clear median; > 5, about 1,000 rows, is NULL)
    sql = "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases WHERE quantity > 4"
    head = "percentile_cont(0.5) WITHIN GROUP (ORDER BY amount): "
    notice = next(n for n in run(auto_engine, sql).notices if n.startswith(head))
    [out] = explain(auto_engine, sql)["Outputs"]
    assert (
        out["Error Interval"] == "the stored answer's, as its notice says: " + notice[len(head) :]
    )

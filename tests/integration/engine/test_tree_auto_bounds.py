"""A tree's DP leaves run the flat path's ``auto`` contribution bounds and accuracy notices (#15).

Before, a leaf of a tree statement (a virtual dataset re-aggregated: ``SELECT category,
SUM(revenue) FROM (SELECT category, region, SUM(v) AS revenue ... GROUP BY 1, 2) t GROUP BY
category``) ran with the defaults an ``auto`` policy stands on until bounds are chosen (1 row
and 1 group per unit), silently: on the demo data ~180k per category against a true ~1.8M.

Data: ``visits``, N = 10,000 units, each with exactly 3 rows of value 100 in ONE (category,
region) cell (category = u % 5, region = u / 5 % 2); the policy declares the 5 categories and 2
regions (so G = 10 is free: :func:`dpsql.sql.auto_bounds.declared_groups`), ``auto`` rows per
unit and ``clamp: auto`` on v in [0, 500]. The leaf is a per-group SUM: ``auto`` chooses one
L1 cap L on what a unit adds over all its cells (:func:`dpsql.sql.auto_bounds.total_mode`; R is
set to the rows ceiling and v keeps its declared range). The truth is the statement run on
PostgreSQL.

Property (the re-aggregation): every category's answer is within 2w of the truth, w the
half-width of one leaf cell's noise at level 1 - alpha/10 (10 cells, alpha = 1e-6) as the plan
with the chosen bounds states it (as tests/integration/engine/test_tree.py reads it). It rests on:
(a) bounding removes nothing: a leaf cell's bounded sum is its true sum unless L < 300 (every
unit's total) or the guard falls back. L < 300 needs both of TailRank's selections below the
data's bucket (else L is the first, raised, or the second: dpsql.dp.bounds), each leaving all
N units above it: a gap >= N - N/4 = 7,500 from the best bucket (P(gap >= g) <= B exp(-eps_s
min(g, 128 / eps_s) / 2) <= 80 e^-64 at eps_s = 0.45 each); the guard falls back when N +
DLap(1 / 0.1) < ~600 (P <= e^-900). So (a) fails with probability < 1e-25;
(b) each cell's Laplace noise within w: probability >= 1 - alpha/10 each, 1 - alpha together.
False failure <= 1e-6. The relative error is then at most 2w / T; at the bounds the data calls
for (L = 300 or the next candidate, noise L per cell) 2w is about 0.5% of T = 600,000 (with R = 3
and a clamp, before the L1 cap: 2w = 33,669).

The broken twin: the tree path as it was (leaves planned with the defaults, R = 1): every
category comes back at a third of the truth, far outside 2w, and carries no notice.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.execute import tree_budget
from dpsql.execute.auto_bounds import pending
from dpsql.execute.tree_prepare import leaf_plans
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
from dpsql.sql.auto_bounds import total_column
from tests.policies import build_policy, private_table

ALPHA = 1e-6
UNITS = 10_000
EPSILON = Fraction(5)
CATEGORIES = ["a", "b", "c", "d", "e"]
REAGGREGATE = (
    "SELECT category, SUM(revenue) AS revenue FROM (SELECT category, region, SUM(v) AS revenue "
    "FROM visits GROUP BY 1, 2) AS t GROUP BY category ORDER BY category"
)
POLICY = build_policy(
    base={},
    version=1,
    dataset="visits",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    budget={"epsilon": 10000, "delta": 1e-3},
    analysts={"analyst": {"budget": {"epsilon": 100, "delta": 1e-4}, "max_epsilon": 10.0}},
    tables={
        "public.visits": private_table(
            "uid",
            {
                "category": {"type": "text", "keys": CATEGORIES},
                "region": {"type": "text", "keys": ["x", "y"]},
                "v": {"type": "numeric", "bounds": [0, 500]},
            },
            rows="auto",
            groups="auto",
        )
    },
)
SESSION = SessionContext(analyst="analyst", epsilon=EPSILON, mechanism="laplace")


@pytest.fixture(scope="module")
def visits_dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("visits")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE visits AS SELECT u AS uid, "
            "(ARRAY['a','b','c','d','e'])[1 + u % 5] AS category, "
            "(ARRAY['x','y'])[1 + (u / 5) % 2] AS region, 100::numeric AS v "
            f"FROM generate_series(1, {UNITS}) u, generate_series(1, 3) r"
        )
    return dsn


@pytest.fixture
def charged(visits_dsn: str) -> Iterator[tuple[Engine, Ledger]]:
    policy = POLICY
    ledger = Ledger.open(visits_dsn, policy, schema=f"dpsql_tab{uuid.uuid4().hex[:8]}")
    engine = Engine(policy, visits_dsn, ledger, pool_size=2)
    yield engine, ledger
    engine.close()
    ledger.close()


def truth(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(REAGGREGATE).fetchall()


def cell_half_width(engine: Engine) -> float:
    """w: one leaf cell's noise half-width at 1 - ALPHA/10, for the plan its answer ran with:
    the chosen bounds (stored in the ledger by the run) at the epsilon left after choosing."""
    prepared = engine.prepare(REAGGREGATE, "analyst")
    (leaf,) = prepared.leaves
    (share,) = leaf_plans(engine, prepared.leaves, SESSION)
    known = pending(engine, leaf, SESSION, share.analysis).known
    if not any(c.kind == "total" for c in known.chosen):
        # nothing stored (the broken twin never chooses): w at the cap the data calls for, each
        # unit's total of 300 (R alone is set to the rows ceiling: w would be vacuous)
        (m,) = [m for m in share.analysis.measures if m.kind == "sum"]
        cap = ChosenBound("total", total_column(m), Fraction(300), Fraction(0), 0, 0)
        known = AutoBounds((*known.chosen, cap))
    plan = engine.plan_analysis(
        apply_bounds(share.analysis, known), share.epsilon * 4 / 5, share.delta, "laplace"
    )
    level = 1 - ALPHA / 10
    return max(mp.mechanism.half_width(level) for mp in plan.measures)


def violations(engine: Engine, ledger: Ledger, dsn: str) -> list[str]:
    """The property (module docstring), as a list of violations (empty: holds)."""
    got: Result = engine.execute(engine.prepare(REAGGREGATE, "analyst"), SESSION)
    want = truth(dsn)
    bad = []
    if [r[0] for r in got.rows] != CATEGORIES or [r[0] for r in want] != CATEGORIES:
        return [f"categories: {got.rows} vs {want}"]
    w = cell_half_width(engine)
    for (c, ans), (_, t) in zip(got.rows, want, strict=True):
        if abs(float(ans) - float(t)) > 2 * w:
            bad.append(f"{c}: {ans} vs true {t} (2w = {2 * w:.0f})")
    notices = " | ".join(got.notices)
    for needed in (
        "derived table t: contribution bounds:",
        "derived table t: SUM(v): 95% interval",
        "the statement's output is computed from them in PostgreSQL",
    ):
        if needed not in notices:
            bad.append(f"notice missing {needed!r}: {got.notices}")
    return bad


def test_reaggregation_uses_auto_bounds_within_its_error(
    charged: tuple[Engine, Ledger], visits_dsn: str
) -> None:
    engine, ledger = charged
    explain = engine.execute(engine.prepare(f"EXPLAIN {REAGGREGATE}", "analyst"), SESSION)
    text = "\n".join(r[0] for r in explain.rows)
    assert "One charge includes 1 auto contribution bound choice(s), epsilon 1 in all" in text
    assert "Leaf 0 (derived table t)" in text and "epsilon=5 of" in text, text
    assert violations(engine, ledger, visits_dsn) == []
    history = ledger.history("analyst")
    bounds = sorted(Fraction(h.epsilon) for h in history if h.mechanism == "auto_bound")
    # the L1 cap over a unit's cells (G: the 10 declared cells, free; R set; no clamp chosen)
    assert bounds == [Fraction(1)]
    assert sum((Fraction(h.epsilon) for h in history), Fraction(0)) == EPSILON  # one charge
    again = engine.execute(engine.prepare(REAGGREGATE, "analyst"), SESSION)
    assert again.cached and again.epsilon_spent == 0
    assert sum((Fraction(h.epsilon) for h in ledger.history("analyst")), Fraction(0)) == EPSILON


def test_the_broken_twin_without_auto_bounds_is_caught(
    charged: tuple[Engine, Ledger], visits_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leaves planned as before the fix: never any ``auto`` bound (R = 1, no notice)."""
    engine, ledger = charged

    def without_auto(e: Engine, leaf: Any, share: Any, session: Any) -> Any:
        return tree_budget.LeafBudget(share, None, Fraction(0), share)

    monkeypatch.setattr("dpsql.execute.tree.leaf_budget", without_auto)
    bad = violations(engine, ledger, visits_dsn)
    assert len(bad) >= 5 and any("notice missing" in b for b in bad), bad


def test_a_refused_tree_charges_nothing(charged: tuple[Engine, Ledger]) -> None:
    """One statement, one charge: with 1.5 of the budget left, the tree at epsilon 5 is refused
    whole before any data is read (nothing charged, no bound chosen: the bound's slice of 1
    alone would have fit); the same tree at 1.5 is answered and uses the rest exactly."""
    from dpsql.dp.accounting import Cost
    from dpsql.errors import BudgetExhausted

    engine, ledger = charged
    for _ in range(10):  # 98.5 of the analyst's 100 in releases under the per-query maximum
        ledger.commit(ledger.reserve("analyst", Cost(epsilon=Fraction(197, 20)), "fill"))
    before = sum((Fraction(h.epsilon) for h in ledger.history("analyst")), Fraction(0))
    assert before == Fraction(197, 2)
    with pytest.raises(BudgetExhausted):
        engine.execute(engine.prepare(REAGGREGATE, "analyst"), SESSION)
    history = ledger.history("analyst")
    assert not [h for h in history if h.mechanism == "auto_bound"]
    assert sum((Fraction(h.epsilon) for h in history), Fraction(0)) == before
    assert {h.state for h in history} == {"committed"}
    small = SessionContext(analyst="analyst", epsilon=Fraction(3, 2), mechanism="laplace")
    res = engine.execute(engine.prepare(REAGGREGATE, "analyst"), small)
    assert res.epsilon_spent == pytest.approx(1.5)
    total = sum((Fraction(h.epsilon) for h in ledger.history("analyst")), Fraction(0))
    assert total == 100


def test_notice_reads_as_a_number_the_user_can_check(
    charged: tuple[Engine, Ledger], visits_dsn: str
) -> None:
    """The leaf's notice names its bounds in the user's terms (what a unit's v may add up to over
    all its cells) with probability >= 1 - 1e-25 (module docstring (a): L >= 300, each unit's
    total; L's exact bucket is not asserted: one above the data has probability ~2%)."""
    engine, _ = charged
    got = engine.execute(engine.prepare(REAGGREGATE, "analyst"), SESSION)
    head = got.notices[0]
    m = re.search(
        r"derived table t: contribution bounds: v summed to at most ([\d.,]+) per uid over all "
        r"groups, 10 groups per uid",
        head,
    )
    assert m is not None, got.notices
    assert float(m.group(1).replace(",", "")) >= 300, head


def test_a_part_names_its_own_share_of_epsilon(charged: tuple[Engine, Ledger]) -> None:
    """Two parts (UNION ALL): each chooses its bounds from its own share, and its notice says
    "of this part's 0.5", not "of this statement's 0.5" (the statement's epsilon is 1).
    Deterministic: the wording, whatever the noise."""
    engine, _ = charged
    sql = (
        "SELECT 'a' AS c, COUNT(*) FROM visits WHERE category = 'a' UNION ALL "
        "SELECT 'b', COUNT(*) FROM visits WHERE category = 'b'"
    )
    got = engine.execute(engine.prepare(sql, "analyst"), SESSION)
    chose = [n for n in got.notices if "contribution bounds:" in n and " of this " in n]
    assert chose and all("of this part's" in n for n in chose), got.notices
    assert not any("of this statement's" in n for n in got.notices), got.notices

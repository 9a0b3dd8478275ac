"""A declared per-unit total (``max_rows_per_unit_total``) gives declared bounds auto's shape.

newcomer22 #8: following the notices' advice (declare max_rows_per_unit / max_groups_per_unit
as numbers) switched per-group COUNT and SUM to R x G sensitivity (L1 = 30 for R = G = 6 over 5
departments) where ``auto`` caps what a unit adds over all its groups (L = 6): 5x the noise.
A per-unit total N bounds that L1 norm from the policy: L = N rows (N times a SUM's per-row
bound), nothing spent choosing it, and under ``auto`` R and G are at most N, free.

Data: ``visits``, 3,000 units, unit u with 1 + u % 6 rows (the most: 6) spread over 5
departments. Deterministic properties (plans, the ledger, a zero-noise engine):

* declared R = G = 6 and N = 6: a per-group COUNT's sensitivity is 6 (the twin without N: 30);
* ``auto`` R and G with N = 6: no bound is chosen from the data (no auto_bound charge), the
  COUNT's sensitivity is 6, the notice names the policy's number;
* the declaration is true, so the bounds drop nothing: the zero-noise answer is the truth in
  every group (a cap below the truth, N = 5, is caught: rows dropped);
* N below a declared R is refused when the policy loads, with what to do.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import PolicyError
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from tests.helpers import EXACT
from tests.policies import build_policy, private_table

UNITS = 3000
DEPARTMENTS = ["a", "b", "c", "d", "e"]
GROUPED = "SELECT department, COUNT(*), SUM(cost) FROM visits GROUP BY department ORDER BY 1"
SESSION = SessionContext(analyst="analyst", epsilon=Fraction(1), mechanism="laplace")


BASE = {
    "version": 1,
    "dataset": "visits",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    "analysts": {"analyst": {"budget": {"epsilon": 100, "delta": 1e-3}}},
}
COLUMNS = {
    "department": {"type": "text", "keys": DEPARTMENTS},
    "cost": {"type": "numeric", "bounds": [0, 100], "clamp": "bounds"},
}


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("dtotal")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE visits AS SELECT u AS uid, "
            "(ARRAY['a','b','c','d','e'])[1 + (u + r) % 5] AS department, 10::numeric AS cost "
            f"FROM generate_series(1, {UNITS}) u, generate_series(1, 6) r WHERE r <= 1 + u % 6"
        )
    return dsn


def _plan(engine: Engine, sql: str = GROUPED) -> Plan:
    plan = engine.plan(engine.prepare(sql, "analyst"), SESSION)
    assert isinstance(plan, Plan)
    return plan


def _sens(plan: Plan, kind: str) -> Fraction:
    return next(Fraction(p.sensitivity) for p in plan.measures if p.measure.kind == kind)


@pytest.fixture
def engines(dsn: str) -> Iterator[Callable[..., Engine]]:
    made: list[Engine] = []

    def make(**bounds: Any) -> Engine:
        """An engine whose table has ``bounds`` (private_table's: rows=, groups=, rows_total=)."""
        visits = private_table("uid", COLUMNS, **{"rows": None, "groups": None, **bounds})
        e = Engine(
            build_policy(base=BASE, tables={"public.visits": visits}), dsn, pool_size=1, noise=EXACT
        )
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def test_declared_numbers_with_a_total_have_auto_s_shape(
    engines: Callable[..., Engine],
) -> None:
    declared = {"rows": 6, "groups": 6}
    with_total = _plan(engines(**declared, rows_total=6))
    twin = _plan(engines(**declared))
    assert _sens(with_total, "count_rows") == 6 and _sens(twin, "count_rows") == 30
    assert _sens(with_total, "sum") == 600 and _sens(twin, "sum") == 3000  # 6 x 100 vs 5 x 6 x 100


def test_auto_with_a_total_spends_nothing_choosing(dsn: str) -> None:
    visits = private_table("uid", COLUMNS, rows=None, groups=None, rows_total=6)
    p = build_policy(base=BASE, tables={"public.visits": visits})
    ledger = Ledger.open(dsn, p, schema=f"dpsql_dt{uuid.uuid4().hex[:8]}")
    engine = Engine(p, dsn, ledger, pool_size=1, noise=EXACT)
    try:
        r = engine.execute(engine.prepare(GROUPED, "analyst"), SESSION)
        history = [h.mechanism for h in ledger.history("analyst")]
        assert "auto_bound" not in history, history
        assert r.epsilon_spent == pytest.approx(1.0)
        first = r.notices[0]
        assert "at most 6 rows per uid over all groups" in first, first
        assert "from the policy's max_rows_per_unit_total" in first, first
        assert "chosen from the data" not in first, first
        for n in r.notices:  # never the advice to declare what is declared
            assert "chosen from the data (auto)" not in n, n
            assert "declare max_rows_per_unit" not in n, n
    finally:
        engine.close()
        ledger.close()


@pytest.mark.parametrize(("total", "exact"), [(6, True), (5, False)])
def test_a_true_total_drops_nothing(
    engines: Callable[..., Engine], dsn: str, total: int, exact: bool
) -> None:
    """At N = 6 (true) the zero-noise answer is the truth in every group; N = 5 (below the
    most rows one unit has) drops rows, so the check tells them apart."""
    with psycopg.connect(dsn) as conn:
        truth = conn.execute(GROUPED).fetchall()
    for bounds in ({}, {"rows": 6, "groups": 6}):
        if total < bounds.get("rows", 0):
            continue
        engine = engines(**bounds, rows_total=total)
        got = engine.execute(engine.prepare(GROUPED, "analyst"), SESSION).rows
        same = [(k, int(n), float(s)) for k, n, s in got] == [
            (k, int(n), float(s)) for k, n, s in truth
        ]
        assert same == exact, (bounds, got, truth)


def test_explain_names_the_declared_total(engines: Callable[..., Engine]) -> None:
    engine = engines(rows=6, groups=6, rows_total=6)
    r = engine.execute(engine.prepare(f"EXPLAIN {GROUPED}", "analyst"), SESSION)
    text = "\n".join(str(row[0]) for row in r.rows)
    assert "COUNT 6, SUM 600 (L1 cap, from the policy's max_rows_per_unit_total 6)" in text, text


def test_a_total_below_a_declared_r_is_refused() -> None:
    visits = private_table("uid", COLUMNS, rows=6, groups=None, rows_total=4)
    with pytest.raises(PolicyError, match="is more than max_rows_per_unit_total"):
        build_policy(base=BASE, tables={"public.visits": visits})


@pytest.mark.parametrize("total", [None, 6])
def test_notices_never_ask_for_what_is_declared(
    engines: Callable[..., Engine], total: int | None
) -> None:
    """With R and G declared (and with a total too) no notice asks the data owner to declare
    them: what it says instead names the policy's numbers and what would give the missing end.
    Under ``auto`` the advice names the per-unit total (the shape auto uses)."""
    engine = engines(rows=6, groups=6, rows_total=total)
    r = engine.execute(engine.prepare(GROUPED, "analyst"), SESSION)
    assert not any("declare max_rows_per_unit" in n for n in r.notices), r.notices
    assert not any("declare max_groups_per_unit" in n for n in r.notices), r.notices
    auto = engines()
    r = auto.execute(auto.prepare(GROUPED, "analyst"), SESSION)
    assert any("declare max_rows_per_unit_total" in n for n in r.notices), r.notices

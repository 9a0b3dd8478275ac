"""A table the catalog proves one row per privacy unit (PRIMARY KEY on the unit) spends nothing on
what bounding would drop: the plan reads the proof (dpsql.execute.unique_units), and so does EXPLAIN.

Deterministic properties of the plan and the ledger (no noisy output is asserted on):

* COUNT(*) over the keyed table: no removed-rows estimate, its whole epsilon on the answer (the
  twin without the key spends 1/10 on the estimate); ``auto`` R and G are 1, free (one row per
  unit drops nothing); the ledger records exactly the statement's epsilon.
* SUM of a column clamped narrower than declared (``clamp: auto``): only the clamped mass is
  estimated (one target), not the rows.
* The proof is read again just before the private query: a key dropped after planning refuses
  the statement rather than running a plan that assumed one row per unit.
  And again just after it, before anything is released: a key dropped (and a unit given a
  second row) between the check and the query refuses the statement too.
* EXPLAIN shows what running would do: no removed-rows lines for the keyed table, and says why.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import ObjectNotInPrerequisiteState
from dpsql.execute.prepared import PrivateQuery
from dpsql.policy.model import Policy
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.plan import Plan
from tests.policies import build_policy

COLUMNS = {
    "uid": {"type": "integer", "identifier": True},
    "g": {"type": "text", "keys": ["a", "b"]},
    "v": {"type": "numeric", "bounds": [0, 10000]},  # clamp: auto (the default)
    "w": {"type": "numeric", "bounds": [0, 100], "clamp": "bounds"},
}
POLICY = build_policy(
    base={},
    version=1,
    dataset="ubudget",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={f"public.{t}": {"privacy_unit": "uid", "columns": COLUMNS} for t in ("pk", "plain")},
    analysts={"analyst": {"budget": {"epsilon": 1000, "delta": 0.1}}},
)
UNITS = 2000


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("ubudget")
    rows = [
        (u, "a" if u % 3 else "b", 350 if u % 10 == 0 else 1 + u % 50, u % 90) for u in range(UNITS)
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pk (uid integer PRIMARY KEY, g text, v numeric, w numeric)")
        conn.execute("CREATE TABLE plain (uid integer NOT NULL, g text, v numeric, w numeric)")
        for table in ("pk", "plain"):
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", rows)
    return dsn


@pytest.fixture(scope="module")
def policy() -> Policy:
    return POLICY


@pytest.fixture
def charged(dsn: str, policy: Policy) -> Iterator[tuple[Engine, Ledger]]:
    ledger = Ledger.open(dsn, policy, schema=f"dpsql_ub{uuid.uuid4().hex[:8]}")
    engine = Engine(policy, dsn, ledger, pool_size=2)
    yield engine, ledger
    engine.close()
    ledger.close()


def _plan(engine: Engine, sql: str) -> Plan:
    plan = engine.plan(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    assert isinstance(plan, Plan)
    return plan


def _spent(ledger: Ledger) -> Fraction:
    return sum((Fraction(h.epsilon) for h in ledger.history("analyst")), Fraction(0))


def test_the_keyed_table_spends_nothing_on_dropped_rows(charged: tuple[Engine, Ledger]) -> None:
    engine, _ = charged
    keyed, twin = (
        _plan(engine, "SELECT COUNT(*) FROM pk"),
        _plan(engine, "SELECT COUNT(*) FROM plain"),
    )
    assert keyed.analysis.unique_unit and not twin.analysis.unique_unit
    assert keyed.bias == () and len(twin.bias) == 1
    (mk,), (mt,) = keyed.measures, twin.measures
    assert Fraction(mk.mechanism.epsilon) == 1  # the whole epsilon measures the answer
    assert Fraction(mt.mechanism.epsilon) == Fraction(9, 10)  # 1/10 estimates dropped rows
    assert keyed.cost == twin.cost and keyed.cost.epsilon == 1  # the same charge


@pytest.mark.parametrize("grouped", [False, True])
def test_auto_bounds_are_one_row_one_group_free(
    charged: tuple[Engine, Ledger], grouped: bool
) -> None:
    """Executed with a ledger: nothing is chosen (R = G = 1 by the proof), the ledger records
    exactly the statement's epsilon in one release, and the notice says why."""
    engine, ledger = charged
    sql = "SELECT g, COUNT(*) FROM pk GROUP BY g" if grouped else "SELECT COUNT(*) FROM pk"
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    assert [h.mechanism for h in ledger.history("analyst")].count("auto_bound") == 0
    assert _spent(ledger) == 1 and r.epsilon_spent == pytest.approx(1.0)
    assert "1 row per uid" in r.notices[0] and "one row per uid" in r.notices[0], r.notices
    if grouped:
        assert "1 group per uid" in r.notices[0]
    count = next(n for n in r.notices if n.startswith("COUNT(*)"))
    assert "one row per uid: the bounds remove nothing" in count, count


def test_a_clamped_sum_estimates_the_clamp_only(charged: tuple[Engine, Ledger]) -> None:
    """SUM(v) (clamp: auto) and COUNT(*): one estimate, of v's clamped mass; SUM(w) (clamp:
    bounds): none."""
    from dpsql.sql.apply_bounds import apply_bounds
    from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
    from dpsql.sql.auto_bounds import auto_items

    engine, _ = charged
    sql = "SELECT COUNT(*), SUM(v), SUM(w) FROM pk"
    plan = _plan(engine, sql)
    (item,) = auto_items(plan.analysis)  # v's upper clamp (R and G: one row per unit, free)
    clamp = ChosenBound("value_hi", item.column, Fraction(100), Fraction(1, 5), 1, 10)
    a = apply_bounds(plan.analysis, AutoBounds((clamp,)))
    p = engine.plan(
        engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)), analysis=a
    )
    assert [b.target.measure.kind for b in p.bias] == ["sum"]
    assert p.bias[0].target.measure.arg is not None and p.bias[0].target.measure.hi == 100


def test_a_key_dropped_after_planning_refuses(charged: tuple[Engine, Ledger], dsn: str) -> None:
    engine, _ = charged
    sql = "SELECT COUNT(*) FROM pk"
    p = engine.prepare(sql, "analyst")
    plan = _plan(engine, sql)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pk DROP CONSTRAINT pk_pkey")
        try:
            with pytest.raises(ObjectNotInPrerequisiteState):
                engine.private_sql(p, plan.analysis)
            assert not _plan(engine, sql).analysis.unique_unit  # planned again: bounded
        finally:
            conn.execute("ALTER TABLE pk ADD PRIMARY KEY (uid)")


def test_a_key_dropped_while_the_query_runs_refuses(
    charged: tuple[Engine, Ledger], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof is read again after the private query, before anything is released: the key
    dropped and a duplicate unit loaded right after the check before the query (the window
    between two statements) refuses the statement (55000) instead of releasing a COUNT that
    counts unit 0 twice under a sensitivity of 1 row."""
    engine, _ = charged
    sql = "SELECT COUNT(*) FROM pk"
    checked = engine.checked_sql

    def drop_after_check(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        got = checked(prepared, a)  # reads the proof: the check before the query
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE pk DROP CONSTRAINT pk_pkey")
            conn.execute("INSERT INTO pk VALUES (0, 'a', 1, 1)")
        return got

    monkeypatch.setattr(engine, "checked_sql", drop_after_check)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="while the statement ran"):
            engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    finally:
        monkeypatch.undo()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pk WHERE ctid = (SELECT max(ctid) FROM pk WHERE uid = 0)")
            conn.execute("ALTER TABLE pk ADD PRIMARY KEY (uid)")


def test_explain_reads_the_same_proof(charged: tuple[Engine, Ledger]) -> None:
    engine, ledger = charged

    def explain(table: str) -> str:
        sql = f"EXPLAIN SELECT COUNT(*) FROM {table}"
        r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
        return "\n".join(str(row[0]) for row in r.rows)

    keyed, twin = explain("pk"), explain("plain")
    assert "the catalog proves one row per uid" in keyed, keyed
    assert "removed by bounds" not in keyed and "removed by bounds" in twin, twin
    # the keyed table's answer gets the whole epsilon (nothing to choose, nothing to estimate);
    # the twin's 0.8 (0.2 chooses R when it runs: the cost line is the whole charge, 89d21c4)
    assert "Privacy cost: epsilon=1, delta=0, rho=0\n" in keyed, keyed
    assert "Privacy cost: epsilon=1, delta=0, rho=0 (epsilon 0.8 for the" in twin, twin
    assert _spent(ledger) == 0  # EXPLAIN spends nothing


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_an_auto_clamped_sum_runs_within_its_reservation(
    charged: tuple[Engine, Ledger], mechanism: str
) -> None:
    """The answer's cost is reserved before the clamp is chosen: the plan at the declared range
    already holds the clamped-mass estimate the chosen clamp needs, so the final plan's cost is
    the reserved one (a Gaussian answer beside a Laplace estimate: without it, 'the planned cost
    exceeds the reserved' refused the statement). The ledger records epsilon 1, never more."""
    engine, ledger = charged
    session = SessionContext("analyst", Fraction(1), mechanism=mechanism, delta=Fraction(1, 10**6))
    plan = _plan(engine, "SELECT SUM(v) FROM pk")
    assert [b.target.measure.kind for b in plan.bias] == ["sum"]  # at the declared range
    r = engine.execute(engine.prepare("SELECT SUM(v) FROM pk", "analyst"), session)
    assert r.epsilon_spent == pytest.approx(1.0)
    assert 1 - Fraction(1, 10**9) < _spent(ledger) <= 1  # (a Gaussian's as converted)
    assert any(n.startswith("SUM(v)") and "left out" in n for n in r.notices), r.notices


# Statements of several DP leaves over the keyed table (newcomer22 #1): each leaf reads the
# catalog's proof as a flat statement does. Before, no leaf read it: each chose ``auto`` R and G
# from the data (an auto_bound charge per leaf, or the R = 1 fallback for "too few" units) and
# its notice said rows were left out of a table with one row per unit.
TREES = {
    "union": "SELECT COUNT(*) FROM {t} WHERE g = 'a' UNION ALL SELECT COUNT(*) FROM {t} WHERE g = 'b'",
    "window": "SELECT g, COUNT(*), SUM(COUNT(*)) OVER () AS total FROM {t} WHERE v > 10 GROUP BY g",
    "derived": "SELECT AVG(n) FROM (SELECT g, COUNT(*) AS n FROM {t} WHERE v > 5 GROUP BY g) s",
    "cte_join": (
        "WITH a AS (SELECT g, COUNT(*) AS n FROM {t} GROUP BY g), "
        "b AS (SELECT g, AVG(w) AS m FROM {t} GROUP BY g) "
        "SELECT a.g, a.n, b.m FROM a JOIN b ON a.g = b.g"
    ),
    "intersect": (
        "SELECT COUNT(*) FROM {t} WHERE w > 3 INTERSECT SELECT COUNT(*) FROM {t} WHERE w > 4"
    ),
}


@pytest.mark.parametrize("shape", sorted(TREES))
def test_a_tree_statements_leaves_read_the_proof(
    charged: tuple[Engine, Ledger], shape: str
) -> None:
    """Property (deterministic: the ledger and the notices, no noisy value): every leaf of a
    statement of several over the keyed table plans with one row per unit (no ``auto`` bound
    chosen, nothing charged but the statement's epsilon, the leaf's notice says so); the same
    statement over the unkeyed twin table still chooses its bounds (a charge per leaf), so the
    check tells the two apart."""
    engine, ledger = charged
    session = SessionContext("analyst", Fraction(1))
    r = engine.execute(engine.prepare(TREES[shape].format(t="pk"), "analyst"), session)
    history = [h.mechanism for h in ledger.history("analyst")]
    assert history.count("auto_bound") == 0, history
    assert _spent(ledger) == 1 and r.epsilon_spent == pytest.approx(1.0)
    leaves = [n for n in r.notices if "contribution bounds" in n]
    assert leaves and all("one row per uid" in n for n in leaves), r.notices
    assert not any("left out" in n and "about" in n for n in r.notices), r.notices
    engine.execute(engine.prepare(TREES[shape].format(t="plain"), "analyst"), session)
    history = [h.mechanism for h in ledger.history("analyst")]
    assert history.count("auto_bound") >= 1, history  # the twin: its R (and G) chosen


def test_a_tree_leaf_refuses_when_the_key_goes_while_it_runs(
    charged: tuple[Engine, Ledger], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leaf that took the proof checks it again after its query, as a flat statement does:
    the key dropped and unit 0 given a second row between the check and the query refuses the
    statement (55000), nothing released."""
    engine, _ = charged
    checked = engine.checked_sql

    def drop_after_check(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        got = checked(prepared, a)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE pk DROP CONSTRAINT IF EXISTS pk_pkey")
            conn.execute("INSERT INTO pk VALUES (0, 'a', 1, 1)")
        return got

    monkeypatch.setattr(engine, "checked_sql", drop_after_check)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="while the statement ran"):
            engine.execute(
                engine.prepare(TREES["union"].format(t="pk"), "analyst"),
                SessionContext("analyst", Fraction(1)),
            )
    finally:
        monkeypatch.undo()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM pk WHERE uid = 0 AND ctid <> (SELECT min(ctid) FROM pk WHERE uid = 0)"
            )
            conn.execute("ALTER TABLE pk ADD PRIMARY KEY (uid)")

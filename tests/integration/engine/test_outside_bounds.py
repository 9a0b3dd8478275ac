"""Values outside a column's declared bounds: counted privately, and said (issue 16).

Clamping into the declared ``bounds`` is a premise of every interval (a value beyond them is
unbounded: no interval can hold what its clamp removed). The plan counts, from the bias share
it already has, the units with a kept value outside them (``outside``: dpsql.sql.bias), and
the notice says so when that count is clearly above 0.

Two tables of 20,000 units (1-3 rows each, 4 declared groups, R = 3, G = 2 fixed: a unit's
groups are ranked), v declared [0, 100]: ``o`` where every 10th unit has all its values at 150
(2,000 units), ``c`` where none is outside.

Deterministic (no noise; false failure 0): the bounded SQL's outside columns count exactly
2,000 units on ``o`` (each once, whatever its groups) and 0 on ``c``; the plan's charge is the
statement's epsilon, the removed-mass release keeps its epsilon (3/4 of the target's share) and
the over-cap and outside releases share the rest; the ledger records the statement's epsilon.

Statistical (epsilon 10): the warning's threshold passes with probability at most 1e-6 per
answer when no unit is outside (:meth:`dpsql.execute.bias.Removed.outside_alarm`: one total
over the groups, one noise draw), so the one answer on ``c`` has no warning except with
probability <= 1e-6. On ``o`` each statement's outside release has epsilon 10 / 10 / T / 8 (T
targets: 1 for SUM, 2 for AVG: its centred sum and its rows), Laplace scale <= 16, threshold <=
16 ln(1 / 2e-6) = 210 on a total of 2,000 (>= 1,800 for the filtered SUM by g): missed only if
its noise is below -1,590, probability < 0.5 exp(-99), for each of the five.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.bias import outside_plans
from dpsql.session import SessionContext
from dpsql.sql.bias import BIAS_SHARE, DROPPED_SHARE
from dpsql.sql.plan import Plan
from tests.helpers import ledgered_engine
from tests.policies import build_policy, private_table

UNITS = 20_000
EPS = Fraction(10)


TABLE = private_table(
    "uid",
    {
        "g": {"type": "text", "keys": ["a", "b", "c", "d"]},
        "v": {"type": "numeric", "bounds": [0, 100], "clamp": "bounds"},
    },
    rows=3,
    groups=2,
)
BASE = {
    "version": 1,
    "dataset": "outside",
    "defaults": {"epsilon": 1.0, "max_epsilon": 1000.0, "delta": 1e-6},
    "analysts": {"analyst": {"budget": {"epsilon": 10000, "delta": 0.1}}},
}
POLICY = build_policy(base=BASE, tables={"public.o": TABLE, "public.c": TABLE})
SQLS = [
    "SELECT SUM(v) FROM {t}",
    "SELECT g, SUM(v) FROM {t} GROUP BY g",
    "SELECT AVG(v) FROM {t}",
    "SELECT g, AVG(v) FROM {t} GROUP BY g",
]
WARNING = "have values of v outside its declared range 0 to 100 (counted as 100 or 0)"


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("outside")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t, outside in (("o", "150"), ("c", "100")):
            conn.execute(f"CREATE TABLE {t} (uid integer NOT NULL, g text NOT NULL, v numeric)")
            conn.execute(
                f"INSERT INTO {t} SELECT u, (ARRAY['a','b','c','d'])[1 + (u + r) % 4], "
                f"CASE WHEN u % 10 = 0 THEN {outside} ELSE u % 90 END "
                f"FROM generate_series(0, {UNITS - 1}) u, generate_series(0, u % 3) r"
            )
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    with ledgered_engine(POLICY, dsn, "dpsql_out") as e:
        yield e


def _plan(engine: Engine, sql: str) -> Plan:
    plan = engine.plan(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    assert isinstance(plan, Plan)
    return plan


def _outside_columns(engine: Engine, sql: str) -> list[int]:
    """The bounded SQL's outside counts summed over its groups, one per target measuring them."""
    plan = _plan(engine, sql)
    a = plan.analysis
    rows = engine.backend.run(
        engine.private_sql(engine.prepare(sql, "analyst"), a), private=True
    ).rows
    x0 = len(a.group_keys) + len(a.measures) + (1 if a.needs_selection else 0)
    n = len(outside_plans(plan))
    assert n >= 1
    return [sum(int(r[x0 + j]) for r in rows) for j in range(n)]


@pytest.mark.parametrize("sql", SQLS)
def test_the_sql_counts_each_unit_outside_once(engine: Engine, sql: str) -> None:
    assert _outside_columns(engine, sql.format(t="o")) == [UNITS // 10] * len(
        outside_plans(_plan(engine, sql.format(t="o")))
    )
    assert not any(_outside_columns(engine, sql.format(t="c")))


@pytest.mark.parametrize("sql", SQLS)
def test_the_charge_is_unchanged(engine: Engine, sql: str) -> None:
    """The outside count takes half of the over-cap count's part of the target's share: the
    removed-mass estimate (the interval's term) keeps its epsilon, the total is the statement's."""
    plan = _plan(engine, sql.format(t="o"))
    assert plan.cost.epsilon == EPS
    each = EPS * BIAS_SHARE / len(plan.bias)
    for b in plan.bias:
        assert b.dropped.epsilon == each * DROPPED_SHARE
        extra = b.outside.epsilon if b.outside is not None else 0
        assert b.over_cap.epsilon + extra == each * (1 - DROPPED_SHARE)
        assert (b.outside is not None) == (b.target.measure.kind != "count_values")


def test_the_ledger_records_the_statement_epsilon(engine: Engine) -> None:
    # a statement of its own (the module's engine and ledger are shared: after SQLS' own
    # "SELECT g, AVG(v) FROM o GROUP BY g" at EPS this one was a free repeat, charged 0, when
    # the tests ran in another order); WHERE v >= -1 keeps every row
    sql = "SELECT g, AVG(v) FROM o WHERE v >= -1 GROUP BY g"
    before = _spent(engine)
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    assert _spent(engine) - before == EPS and r.epsilon_spent == pytest.approx(float(EPS))


def _spent(engine: Engine) -> Fraction:
    assert engine.ledger is not None
    return sum((Fraction(h.epsilon) for h in engine.ledger.history("analyst")), Fraction(0))


@pytest.mark.parametrize("sql", SQLS)
def test_the_notice_warns_when_many_units_are_outside(engine: Engine, sql: str) -> None:
    r = engine.execute(engine.prepare(sql.format(t="o"), "analyst"), SessionContext("analyst", EPS))
    lines = [n for n in r.notices if n.startswith(("SUM(v): ", "AVG(v): "))]
    assert lines and all(WARNING in n and "does NOT cover" in n for n in lines), r.notices
    assert all("dpsql check POLICY --upstream" in n and "assumes every v" not in n for n in lines)


def test_no_warning_when_no_unit_is_outside(engine: Engine) -> None:
    sql = "SELECT g, AVG(v) FROM c GROUP BY g"
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    (line,) = [n for n in r.notices if n.startswith("AVG(v): ")]
    assert WARNING not in line and "assumes every v lies in its declared range" in line, line


def test_a_declared_group_without_rows_gets_zero_counts(engine: Engine) -> None:
    """A declared key with no row is released from zeros: its outside count among them (the
    row layout: measures, outside counts, removed-mass pairs)."""
    sql = "SELECT g, SUM(v) FROM o WHERE g <> 'a' OR v < 0 GROUP BY g"
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    assert sorted(str(row[0]) for row in r.rows) == ["a", "b", "c", "d"], r.rows
    (line,) = [n for n in r.notices if n.startswith("SUM(v): ")]
    assert WARNING in line, line

"""Values outside a column's declared bounds under VARIANCE and STDDEV: counted privately, and
said (issue 16), as for SUM and AVG (tests/integration/engine/test_outside_bounds.py).

A VARIANCE's or STDDEV's interval covers its noise only (its bias is not estimated), so it has
no bias share to take the count from: the plan takes ``ALARM_SHARE`` (1/80, what a SUM's
outside count gets) of the statement's epsilon from the answer, one total over the groups (one
noise draw; each unit once, in its first kept group holding such a value: L1 sensitivity 1;
``dpsql.sql.alarms.AlarmPlan``). The charge is the statement's epsilon, unchanged.

The same two tables as test_outside_bounds (20,000 units, 1-3 rows each, 4 declared groups,
R = 3, G = 2: ranked), v declared [0, 100]: ``o`` with every 10th unit at 150 (2,000 units,
10%), ``c`` with none outside.

Deterministic (no noise): the bounded SQL's alarm column counts exactly 2,000 units on ``o``
and 0 on ``c``; the plan's charge is the statement's epsilon, the alarm's epsilon is 1/80 of
it, the answer's the rest.

Statistical, at epsilon 2 (the alarm at 1/40: Laplace scale 40): the warning's threshold
40 ln(1 / 2e-6) = 525 is passed with probability <= 1e-6 when no unit is outside (the one answer
on ``c``: false warning <= 1e-6 each, two statements); on ``o`` the total is 2,000, missed only
if the noise is below -1,475: probability 0.5 exp(-36.9) < 1e-16 per answer (the power). At
epsilon 1 (scale 80, threshold 1,050) the same 2,000 are missed with probability 3e-6
(docs/accuracy.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from dpsql.sql.alarms import ALARM_SHARE
from dpsql.sql.plan import Plan
from tests.helpers import ledgered_engine
from tests.integration.engine.test_outside_bounds import POLICY, UNITS, WARNING
from tests.integration.engine.test_outside_bounds import dsn as dsn  # the same tables

EPS = Fraction(2)
SQLS = [
    "SELECT VARIANCE(v) FROM {t}",
    "SELECT g, STDDEV(v) FROM {t} GROUP BY g",
]


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    with ledgered_engine(POLICY, dsn, "dpsql_spread") as e:
        yield e


def _plan(engine: Engine, sql: str) -> Plan:
    plan = engine.plan(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    assert isinstance(plan, Plan)
    return plan


def _alarm_total(engine: Engine, sql: str) -> int:
    """The bounded SQL's alarm column (after the measures: no bias target here) over its groups."""
    plan = _plan(engine, sql)
    a = plan.analysis
    assert not plan.bias and len(plan.alarms) == 1, plan
    rows = engine.backend.run(
        engine.private_sql(engine.prepare(sql, "analyst"), a), private=True
    ).rows
    x0 = len(a.group_keys) + len(a.measures) + (1 if a.needs_selection else 0)
    assert all(len(r) == x0 + 1 for r in rows)
    return sum(int(r[x0]) for r in rows)


@pytest.mark.parametrize("sql", SQLS)
def test_the_sql_counts_each_unit_outside_once(engine: Engine, sql: str) -> None:
    assert _alarm_total(engine, sql.format(t="o")) == UNITS // 10
    assert _alarm_total(engine, sql.format(t="c")) == 0


@pytest.mark.parametrize("sql", SQLS)
def test_the_charge_is_unchanged(engine: Engine, sql: str) -> None:
    plan = _plan(engine, sql.format(t="o"))
    (x,) = plan.alarms
    assert plan.cost.epsilon == EPS and x.outside.epsilon == EPS * ALARM_SHARE
    assert x.outside.sensitivity == 1  # ranked groups: each unit once
    answer = sum((c.epsilon for mp in plan.measures for c in mp.costs), Fraction(0))
    assert answer == EPS * (1 - ALARM_SHARE)


def test_the_ledger_records_the_statement_epsilon(engine: Engine) -> None:
    assert engine.ledger is not None
    before = len(engine.ledger.history("analyst"))
    # a statement of its own (the module's engine and ledger are shared: after the notice
    # test's SQLS[1] at EPS this one was a free repeat, charged 0, in another order); every
    # row has v >= -1
    sql = "SELECT g, STDDEV(v) FROM o WHERE v >= -1 GROUP BY g"
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    (h,) = engine.ledger.history("analyst")[before:]
    assert Fraction(h.epsilon) == EPS and r.epsilon_spent == pytest.approx(float(EPS))


@pytest.mark.parametrize("sql", SQLS)
def test_the_notice_warns_when_many_units_are_outside(engine: Engine, sql: str) -> None:
    r = engine.execute(engine.prepare(sql.format(t="o"), "analyst"), SessionContext("analyst", EPS))
    lines = [n for n in r.notices if n.startswith(("VARIANCE(v): ", "STDDEV(v): "))]
    assert lines and all(WARNING in n and "does NOT cover" in n for n in lines), r.notices


@pytest.mark.parametrize("sql", SQLS)
def test_no_warning_when_no_unit_is_outside(engine: Engine, sql: str) -> None:
    """The clean twin: the same statement on ``c`` (false warning <= 1e-6)."""
    r = engine.execute(engine.prepare(sql.format(t="c"), "analyst"), SessionContext("analyst", EPS))
    lines = [n for n in r.notices if n.startswith(("VARIANCE(v): ", "STDDEV(v): "))]
    assert lines and all(WARNING not in n for n in lines), r.notices
    assert all("assumes every v lies in its declared range" in n for n in lines), lines


def test_explain_lists_the_count_and_its_epsilon(engine: Engine) -> None:
    """EXPLAIN shows the count among the statement's releases, at its 1/80 (nothing spent)."""
    sql = "EXPLAIN " + SQLS[0].format(t="o")
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    text = "\n".join(str(row[0]) for row in r.rows)
    line = next((ln for ln in text.splitlines() if "outside declared range of" in ln), "")
    assert f"eps={float(EPS * ALARM_SHARE):g}" in line, text

"""Values outside a column's declared bounds under MEDIAN, percentiles, MIN and MAX: counted
privately, and said (issue 16), as for SUM, AVG, VARIANCE and STDDEV
(tests/integration/engine/test_outside_bounds.py, test_outside_spread.py).

A quantile's value is clamped into the declared range before it is bucketed, so its answer and
interval hold the quantile of the values so counted: right when the true quantile lies inside
the range (the clamp keeps the order), not when it lies among the values beyond it. The rows of
a quantile statement carry their bucket through the ranking, coded -1 / B for a value below /
above the range (``dpsql.sql.rewrite.buckets.pre_bucket``), and the plan releases, at
``ALARM_SHARE`` (1/80) of the statement's epsilon taken from the answer (the charge is
unchanged), the count of units whose first kept row (in their first kept group) has such a
code: each unit once (L1 sensitivity 1, ``dpsql.sql.bias.quantile_alarms``).

The same two tables as test_outside_bounds (20,000 units, 1-3 rows each, 4 declared groups,
R = 3, G = 2: ranked), v declared [0, 100]: ``o`` with every 10th unit's values all at 150
(2,000 units, 10%), ``c`` with none outside.

Deterministic (no noise): the bounded SQL's count is exactly 2,000 on ``o`` (each outside unit's
first kept row is outside: all its rows are) and 0 on ``c``; the charge is the statement's
epsilon, the count's 1/80 of it. The broken twin (a count that tests only the code of values
below the range) counts 0 on ``o`` and does not warn: both tests catch it.

Statistical, at epsilon 2 (the count at 1/40: Laplace scale 40): the warning's threshold
40 ln(1 / 2e-6) = 525 is passed with probability <= 1e-6 when no unit is outside (one answer
per statement on ``c``: false warning <= 1e-6 each); on ``o`` the total is 2,000, missed only
if the noise is below -1,475: probability 0.5 exp(-36.9) < 1e-16 per answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from fractions import Fraction

import pytest
from sqlglot import exp

from dpsql.engine import Engine
from dpsql.policy.model import Policy
from dpsql.session import SessionContext
from dpsql.sql.bias import ALARM_SHARE
from dpsql.sql.plan import Plan
from dpsql.sql.rewrite import buckets
from tests.helpers import ledgered_engine
from tests.integration.engine.test_outside_bounds import POLICY, UNITS, WARNING
from tests.integration.engine.test_outside_bounds import dsn as dsn  # the same tables

EPS = Fraction(2)
SQLS = [
    "SELECT MEDIAN(v) FROM {t}",
    "SELECT g, MAX(v) FROM {t} GROUP BY g",
    "SELECT g, MIN(v), PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY v) FROM {t} GROUP BY g",
    # beside other measures (rows ranked by their text, no bucket codes): the count tests the
    # unclamped value, and speaks for the AVG of the same values too
    "SELECT MIN(v), MAX(v), AVG(v) FROM {t}",
    "SELECT g, MEDIAN(v), COUNT(DISTINCT v) FROM {t} GROUP BY g",
]
QUANTILES = (
    "MEDIAN(v): ",
    "MAX(v): ",
    "MIN(v): ",
    "PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY v): ",
)
HEADS = (*QUANTILES, "AVG(v): ")


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    with ledgered_engine(Policy.model_validate(POLICY), dsn, "dpsql_outq") as e:
        yield e


def _plan(engine: Engine, sql: str) -> Plan:
    plan = engine.plan(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    assert isinstance(plan, Plan)
    return plan


def _alarm_total(engine: Engine, sql: str) -> int:
    """The bounded SQL's count column (after the measures) over its groups' rows (the rows of
    the grouping set of the groups alone: the others are bucket cells)."""
    plan = _plan(engine, sql)
    a = plan.analysis
    assert not plan.bias and len(plan.alarms) == 1, plan
    rows = engine.backend.run(
        engine.private_sql(engine.prepare(sql, "analyst"), a), private=True
    ).rows
    x0 = len(a.group_keys) + len(a.measures) + (1 if a.needs_selection else 0)
    full = max(int(r[-1]) for r in rows)  # GROUPING(buckets) of the groups' own rows
    return sum(int(r[x0]) for r in rows if int(r[-1]) == full)


@pytest.mark.parametrize("sql", SQLS)
def test_the_sql_counts_each_unit_outside_once(engine: Engine, sql: str) -> None:
    assert _alarm_total(engine, sql.format(t="o")) == UNITS // 10
    assert _alarm_total(engine, sql.format(t="c")) == 0


@pytest.mark.parametrize("sql", SQLS)
def test_the_charge_is_unchanged(engine: Engine, sql: str) -> None:
    plan = _plan(engine, sql.format(t="o"))
    (x,) = plan.alarms  # one for MIN(v) and PERCENTILE_CONT(v): one bucketing
    assert plan.cost.epsilon == EPS and x.outside.epsilon == EPS * ALARM_SHARE
    assert x.outside.sensitivity == 1  # ungrouped, or ranked groups: each unit once
    quantiles = {m.key for m in plan.analysis.measures if m.kind == "quantile"}
    assert quantiles <= set(x.keys)
    answer = sum((c.epsilon for mp in plan.measures for c in mp.costs), Fraction(0))
    assert answer == EPS * (1 - ALARM_SHARE)


def _lines(engine: Engine, sql: str) -> list[str]:
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    return [n for n in r.notices if n.startswith(HEADS)]


@pytest.mark.parametrize("sql", SQLS)
def test_the_notice_warns_when_many_units_are_outside(engine: Engine, sql: str) -> None:
    lines = _lines(engine, sql.format(t="o"))
    warned = [n for n in lines if WARNING in n]
    stats = sum(1 for h in HEADS if h.split(":")[0] in sql)
    assert len(warned) == stats, lines  # one warning line per statistic
    assert all("NOT cover" in n for n in warned), warned
    assert all(n.count(WARNING) == 1 for n in warned), warned  # said once
    # a quantile's interval line says what it holds, no longer the premise the data breaks
    rest = [n for n in lines if WARNING not in n]
    assert len(rest) == sum(1 for h in QUANTILES if h.split(":")[0] in sql), rest
    assert not any("assumes every v" in n for n in rest), rest


@pytest.mark.parametrize("sql", SQLS)
def test_no_warning_when_no_unit_is_outside(engine: Engine, sql: str) -> None:
    """The clean twin: the same statement on ``c`` (false warning <= 1e-6)."""
    lines = _lines(engine, sql.format(t="c"))
    assert lines and all(WARNING not in n for n in lines), lines
    assert all("assumes every v lies in its declared range" in n for n in lines), lines


def test_a_free_repeat_says_the_same(engine: Engine) -> None:
    sql = SQLS[0].format(t="o")
    first = _lines(engine, sql)
    assert first == _lines(engine, sql)


def test_explain_lists_the_count_and_its_epsilon(engine: Engine) -> None:
    """EXPLAIN shows the count among the statement's releases, at its 1/80 (nothing spent)."""
    sql = "EXPLAIN " + SQLS[1].format(t="o")
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    text = "\n".join(str(row[0]) for row in r.rows)
    line = next((ln for ln in text.splitlines() if "outside declared range of" in ln), "")
    assert f"eps={float(EPS * ALARM_SHARE):g}" in line and "L1=1" in line, text


def _below_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken twin: the count tests only for a value below the range (its code, or its
    unclamped value)."""
    real = buckets.outside_counts

    def below_only(*args: object, **kwargs: object) -> list[exp.Expr]:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        for e in out:
            for o in list(e.find_all(exp.Or)):
                o.replace(o.this.copy())
        return out

    monkeypatch.setattr(buckets, "outside_counts", below_only)
    # the module (the package exports its function of the same name)
    module = sys.modules["dpsql.sql.rewrite.bound_contributions"]
    monkeypatch.setattr(module, "outside_counts", below_only)


@pytest.mark.parametrize("sql", [SQLS[1], SQLS[3]], ids=["pre-bucketed", "row path"])
def test_the_below_only_twin_is_caught(dsn: str, monkeypatch: pytest.MonkeyPatch, sql: str) -> None:
    _below_only(monkeypatch)
    with ledgered_engine(Policy.model_validate(POLICY), dsn, "dpsql_outq_twin") as e:
        sql = sql.format(t="o")
        assert _alarm_total(e, sql) == 0  # != 2,000: the SQL count test fails
        lines = _lines(e, sql)
        assert lines and not any(WARNING in n for n in lines)  # the warning test fails

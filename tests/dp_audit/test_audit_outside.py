"""Privacy audit of the count of units with a value outside its declared bounds (issue 16).

The bounded SQL counts, per group, the units with a kept value outside a SUM's (or AVG's)
declared column bounds, each unit once: in the first of its kept groups (in its group order)
that holds one (``_dp_x<i>``: dpsql.sql.rewrite.measure_dropped); without a group order (the
declared keys leave K <= G groups) in each such group, at most K. The plan releases it with
Laplace noise of L1 sensitivity 1 (K) at its epsilon (dpsql.sql.bias.bias_plans). Two checks:

* **Sensitivity, exactly** (no noise: false failure 0). D: 30 units over 4 declared groups with
  G = 2 (ranked) or G = 4 (K = 4 <= G: unranked), 1-4 rows each in as many groups; units 0, 7, 14, 21 have values
  outside [0, 100] in all their groups, unit 3 in one. For every unit, the SQL runs on D and on
  D without it (a DELETE rolled back); the L1 change of the outside columns must stay within
  the plan's sensitivity, and reach it. The twin that counts a unit in every kept group holding
  such a value (the "first group" test dropped) moves the ranked count by 2 and is caught.
* **Epsilon, statistically.** D has 60 units within bounds, D' one more with a value of 5,000
  (declared [0, 100]): D''s count is 1 higher, the extreme shift. The released count reaching
  D''s exact value, 30,000 draws each of the mechanism the engine's
  :func:`dpsql.execute.bias.release_removed` adds to the groups' total: the Clopper-Pearson lower bound on the realized
  epsilon (level 1 - 1e-6 over both directions) must not exceed the epsilon the plan charges
  for it; a twin released with a quarter of its sensitivity (4x the realized epsilon: 0.5 x 4 =
  2 against 0.5) must be flagged (its bound reads about 1.9).

Both also for a VARIANCE's or STDDEV's alarm (dpsql.sql.alarms.AlarmPlan: the same count with an
epsilon of its own, 1/80 of the statement's): the last two SQLS, and the epsilon check on
VARIANCE(v) at 40, whose alarm gets 0.5 as the SUM's count does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlglot import exp

from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute.bias import outside_plans, release_removed
from dpsql.execute.private_sql import salted
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from dpsql.sql.rewrite import measure_dropped
from tests.dp_audit.auditing import epsilon_lower_bound, neighbouring_engines
from tests.policies import build_policy, private_table

BASE = {
    "version": 1,
    "dataset": "audit_outside",
    "defaults": {"epsilon": 1.0, "max_epsilon": 100.0, "delta": 1e-6},
}
COLUMNS = {
    "g": {"type": "text", "keys": ["a", "b", "c", "d"]},
    "v": {"type": "numeric", "bounds": [0, 100], "clamp": "bounds"},
}
POLICY = build_policy(
    base=BASE, tables={"public.t": private_table("uid", COLUMNS, rows=2, groups=2)}
)


UNITS = 30
OUTSIDE = (0, 7, 14, 21)


def _rows() -> list[tuple[int, str, int]]:
    out = []
    for u in range(UNITS):
        for r in range(1 + u % 4):
            v = 500 if u in OUTSIDE or (u == 3 and r == 0) else 10 + u
            out.append((u, "abcd"[(u + r) % 4], v))
    return out


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("audit_outside")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text NOT NULL, v numeric)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", _rows())
    return dsn


@pytest.fixture(scope="module", params=[2, 4], ids=["ranked", "split"])
def engine(request: pytest.FixtureRequest, dsn: str) -> Iterator[Engine]:
    e = Engine(
        build_policy(
            base=BASE,
            tables={"public.t": private_table("uid", COLUMNS, rows=2, groups=request.param)},
        ),
        dsn,
        pool_size=1,
    )
    yield e
    e.close()


def _plan(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> Plan:
    plan = engine.plan(engine.prepare(sql), SessionContext(analyst="auditor", epsilon=epsilon))
    assert isinstance(plan, Plan)
    return plan


def _largest_move(engine: Engine, dsn: str, sql: str) -> tuple[int, int]:
    """The largest L1 change of the outside columns when one unit is removed, and the plan's
    sensitivity of their release."""
    plan = _plan(engine, sql)
    a = plan.analysis
    mechs = [b.outside for b in outside_plans(plan)] + [x.outside for x in plan.alarms]
    (mech,) = mechs  # a SUM's or AVG's bias target's, or a VARIANCE's alarm's
    assert mech is not None
    text = salted(engine.private_sql(engine.prepare(sql), a))
    keys, x0 = len(a.group_keys), len(a.group_keys) + len(a.measures)

    def columns(conn: psycopg.Connection[Any]) -> dict[Any, int]:
        return {tuple(r[:keys]): int(r[x0]) for r in conn.execute(text).fetchall()}

    worst = 0
    with psycopg.connect(dsn) as conn:
        full = columns(conn)
        assert sum(full.values()) > 0
        for u in range(UNITS):
            with conn.transaction(force_rollback=True):
                conn.execute("DELETE FROM t WHERE uid = %s", (u,))
                less = columns(conn)
            moved = sum(abs(full.get(g, 0) - less.get(g, 0)) for g in set(full) | set(less))
            worst = max(worst, moved)
    return worst, int(mech.sensitivity)


SQLS = ["SELECT SUM(v) FROM t", "SELECT g, SUM(v) FROM t GROUP BY g", "SELECT g, AVG(v) FROM t GROUP BY g",
        "SELECT VARIANCE(v) FROM t", "SELECT g, STDDEV(v) FROM t GROUP BY g"]  # fmt: skip


@pytest.mark.parametrize("sql", SQLS)
def test_one_unit_moves_the_outside_count_by_at_most_its_sensitivity(
    engine: Engine, dsn: str, sql: str
) -> None:
    moved, sensitivity = _largest_move(engine, dsn, sql)
    assert moved <= sensitivity, (moved, sensitivity)
    assert moved == sensitivity, "a unit outside in all its groups reaches it"


def test_the_every_group_twin_is_caught(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = measure_dropped.outside_count

    def every_group(flag: exp.Expr) -> exp.Expr:
        return real(flag.this if isinstance(flag, exp.And) else flag)  # no "first group" test

    monkeypatch.setattr(measure_dropped, "outside_count", every_group)
    e = Engine(POLICY, dsn, pool_size=1)
    try:
        moved, sensitivity = _largest_move(e, dsn, SQLS[1])
    finally:
        e.close()
    assert moved > sensitivity, (moved, sensitivity)


# -- epsilon, statistically --------------------------------------------------------------------
SQL = "SELECT SUM(v) FROM t"
EPS = Fraction(40)  # the outside release gets 40 / 10 / 4 / 2 = 0.5
DRAWS = 30_000


def _load(dsn: str, with_extreme: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text NOT NULL, v numeric)")
        rows = [(u, "ab"[u % 2], 10 + u) for u in range(60) for _ in range(2)]
        if with_extreme:
            rows += [(999, "a", 5000)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)


@pytest.fixture(scope="module")
def engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load, "audit_outside")


def _columns(engine: Engine, plan: Plan) -> tuple[int, int, int]:
    """The bounded SQL's (outside count, removed steps, over-cap count) of the only row."""
    text = engine.private_sql(engine.prepare(SQL), plan.analysis)
    (row,) = engine.backend.run(text, private=True).rows
    return int(row[-3]), int(row[-2]), int(row[-1])


def _audit(engines: tuple[Engine, Engine], broken: bool) -> tuple[float, float]:
    """(epsilon lower bound, epsilon charged) of the outside release."""
    plans = [_plan(e, SQL, EPS) for e in engines]
    cols = [_columns(e, p) for e, p in zip(engines, plans, strict=True)]
    assert (cols[0][0], cols[1][0]) == (0, 1), cols  # the extreme shift
    hits = []
    for plan, (x, _, _) in zip(plans, cols, strict=True):
        b = plan.bias[0]
        assert b.outside is not None
        if broken:
            weak = dataclasses.replace(b.outside, sensitivity=b.outside.sensitivity / 4)
            plan = dataclasses.replace(plan, bias=(dataclasses.replace(b, outside=weak),))
        # release_removed adds b.outside's noise to the groups' total (one here): drawn DRAWS
        # times at once from the same mechanism (test_the_release_is_one_total_over_the_groups)
        b = plan.bias[0]
        assert b.outside is not None
        out = CSPRNG.add(b.outside, np.full(DRAWS, float(x)))
        hits.append(int((np.asarray(out) >= cols[1][0]).sum()))
    b = plans[0].bias[0]
    assert b.outside is not None
    bound = max(
        epsilon_lower_bound(hits[0], DRAWS, hits[1], DRAWS, alpha=5e-7),
        epsilon_lower_bound(hits[1], DRAWS, hits[0], DRAWS, alpha=5e-7),
    )
    return bound, float(b.outside.epsilon)


def test_the_outside_release_is_dp_at_its_charge(engines: tuple[Engine, Engine]) -> None:
    bound, charged = _audit(engines, broken=False)
    assert charged == 0.5 and bound <= charged, (bound, charged)


VAR_SQL = "SELECT VARIANCE(v) FROM t"  # its alarm: 40 / 80 = 0.5, as the SUM's outside count


def _alarm_audit(engines: tuple[Engine, Engine], broken: bool) -> tuple[float, float]:
    """(epsilon lower bound, epsilon charged) of a VARIANCE's alarm (dpsql.sql.alarms.AlarmPlan):
    its column is the bounded SQL's last (no bias target), released as
    :func:`dpsql.execute.bias.release_alarms` does (one total, the alarm's mechanism)."""
    plans = [_plan(e, VAR_SQL, EPS) for e in engines]
    xs = []
    for e, p in zip(engines, plans, strict=True):
        (row,) = e.backend.run(e.private_sql(e.prepare(VAR_SQL), p.analysis), private=True).rows
        xs.append(int(row[-1]))
    assert xs == [0, 1], xs  # the extreme shift
    hits = []
    for plan, x in zip(plans, xs, strict=True):
        (alarm,) = plan.alarms
        mech = alarm.outside
        if broken:
            mech = dataclasses.replace(mech, sensitivity=mech.sensitivity / 4)
        out = CSPRNG.add(mech, np.full(DRAWS, float(x)))
        hits.append(int((np.asarray(out) >= xs[1]).sum()))
    bound = max(
        epsilon_lower_bound(hits[0], DRAWS, hits[1], DRAWS, alpha=5e-7),
        epsilon_lower_bound(hits[1], DRAWS, hits[0], DRAWS, alpha=5e-7),
    )
    return bound, float(plans[0].alarms[0].outside.epsilon)


def test_a_variance_alarm_is_dp_at_its_charge(engines: tuple[Engine, Engine]) -> None:
    bound, charged = _alarm_audit(engines, broken=False)
    assert charged == 0.5 and bound <= charged, (bound, charged)


def test_the_audit_flags_a_variance_alarm_with_a_quarter_of_the_noise(
    engines: tuple[Engine, Engine],
) -> None:
    bound, charged = _alarm_audit(engines, broken=True)
    assert bound > charged, (bound, charged)


def test_the_audit_flags_a_quarter_of_the_noise(engines: tuple[Engine, Engine]) -> None:
    bound, charged = _audit(engines, broken=True)
    assert bound > charged, (bound, charged)


def test_the_release_is_one_total_over_the_groups(engine: Engine, dsn: str) -> None:
    """release_removed releases the outside counts' total over the groups (no noise here:
    tests.helpers.EXACT), whose sensitivity is the groups' L1 one (checked above)."""
    from tests.helpers import EXACT

    sql = SQLS[1]
    plan = _plan(engine, sql)
    a = plan.analysis
    text = salted(engine.private_sql(engine.prepare(sql), a))
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(text).fetchall()
    keys, x0 = len(a.group_keys), len(a.group_keys) + len(a.measures)
    b0 = x0 + len(outside_plans(plan))
    pairs = [([r[b0 + 2 * i] for r in rows], [r[b0 + 2 * i + 1] for r in rows])
             for i in range(len(plan.bias))]  # fmt: skip
    got = release_removed(plan, pairs, EXACT, [[r[x0] for r in rows]])
    (b,) = outside_plans(plan)
    out = got[b.target.key].outside
    assert out is not None and list(out) == [sum(int(r[x0]) for r in rows)] and len(rows) == 4
    assert keys == 1

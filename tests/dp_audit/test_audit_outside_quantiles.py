"""Privacy audit of a quantile's count of units with a value outside its declared bounds
(issue 16; dpsql.sql.alarms.quantile_alarms).

The bounded SQL of a MEDIAN, percentile, MIN or MAX codes each row's bucket -1 / B when its
value lies below / above the declared range (dpsql.sql.rewrite.buckets.pre_bucket) and counts,
per group, the rows numbered 1 in their unit's group (in the keyed-hash order of its rows) of
the unit's first-ranked group (``_dp_gr = 1``) with such a code (``_dp_x<i>``:
dpsql.sql.rewrite.buckets.outside_counts): each unit once; without a group order (the declared
keys leave K <= G groups) once in each group, at most K. The plan releases the total over the
groups with Laplace noise of L1 sensitivity 1 (K) at ALARM_SHARE of the statement's epsilon.
The checks of tests/dp_audit/test_audit_outside.py (its neighbouring tables for the epsilon):

* **Sensitivity, exactly** (no noise: false failure 0). D: 40 units over 4 declared groups
  with R = 2 and G = 2 (ranked) or G = 4 (K = 4 <= G: unranked), 1-8 rows each, two by two in
  up to 4 groups; units 0, 7, 15, 23, 31 have all their values outside [0, 100] (7, 15, 23
  and 31: two rows in each of 4 groups), unit 3 its first row only. For every unit, the SQL
  runs on D and on D without it (a DELETE rolled back); the L1 change of the count over the
  groups must stay within the plan's sensitivity, and reach it. Two broken twins are caught:
  the count without the group rank's test (a unit in each of its kept groups: moves the ranked
  count by 2 > 1) and without the row number's (each kept row: the split count by 8 > 4).
* **Epsilon, statistically.** D has 60 units within bounds, D' one more with a value of 5,000
  (declared [0, 100]): D''s count is 1 higher, the extreme shift. At epsilon 40 the count gets
  40 / 80 = 0.5; its release (:func:`dpsql.execute.bias.release_alarms`: the alarm's mechanism
  on the groups' total) reaching D''s value, 30,000 draws a side: the Clopper-Pearson lower
  bound on the realized epsilon (level 1 - 1e-6 over both directions) must not exceed 0.5; a
  twin with a quarter of its sensitivity (realizing 2) must be flagged (about 1.9).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlglot import exp

from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute.grouping_sets import private_sqls
from dpsql.execute.private_sql import salted
from dpsql.session import SessionContext
from dpsql.sql.alarms import ALARM_SHARE, alarm_plans
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan
from dpsql.sql.rewrite import buckets
from dpsql.sql.rewrite.bound_contributions import bound_contributions
from tests.dp_audit.auditing import epsilon_lower_bound
from tests.dp_audit.test_audit_outside import BASE, COLUMNS, DRAWS
from tests.dp_audit.test_audit_outside import engines as engines  # D and D'
from tests.policies import build_policy, private_table

UNITS = 40
OUTSIDE = (0, 7, 15, 23, 31)  # all their values; unit 3: its first row only


def _rows() -> list[tuple[int, str, int]]:
    """Unit u: 1 + u % 8 rows, two by two in the groups from (u mod 4) on (up to 2 rows in
    each of 4 groups: R = 2 keeps them all)."""
    out = []
    for u in range(UNITS):
        for r in range(1 + u % 8):
            v = 500 if u in OUTSIDE or (u == 3 and r == 0) else 10 + u
            out.append((u, "abcd"[(u + r // 2) % 4], v))
    return out


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("audit_outside_q")
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


def _counts(rows: list[tuple[Any, ...]], keys: int, x0: int) -> dict[Any, int]:
    """The count column of the groups' own rows (the grouping set without the buckets: the
    largest GROUPING value), by group."""
    full = max(int(r[-1]) for r in rows)
    return {tuple(r[:keys]): int(r[x0]) for r in rows if int(r[-1]) == full}


def _largest_move(engine: Engine, dsn: str, sql: str) -> tuple[int, int]:
    """The largest L1 change of the count over the groups when one unit is removed, and the
    plan's sensitivity of its release."""
    plan = _plan(engine, sql)
    a = plan.analysis
    (alarm,) = plan.alarms
    text = salted(engine.private_sql(engine.prepare(sql), a))
    keys = len(a.group_keys)

    def columns(conn: psycopg.Connection[Any]) -> dict[Any, int]:
        # The count by its name (_dp_x<i>): an all-rows quantile's left-out counts (22f898c,
        # plan.bias) may sit among the columns after the measures.
        cur = conn.execute(text)
        names = [d.name for d in cur.description or ()]
        (x0,) = [i for i, n in enumerate(names) if n.startswith("_dp_x")]
        return _counts(list(cur.fetchall()), keys, x0)

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
    return worst, int(alarm.outside.sensitivity)


SQLS = [
    "SELECT MEDIAN(v) FROM t",
    "SELECT g, MAX(v) FROM t GROUP BY g",
    "SELECT g, MIN(v), PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY v) FROM t GROUP BY g",
    # beside other measures: rows ranked by their text, the count tests the unclamped value
    "SELECT MIN(v), AVG(v) FROM t",
    "SELECT g, MAX(v), COUNT(DISTINCT v) FROM t GROUP BY g",
]


@pytest.mark.parametrize("sql", SQLS)
def test_one_unit_moves_the_count_by_at_most_its_sensitivity(
    engine: Engine, dsn: str, sql: str
) -> None:
    moved, sensitivity = _largest_move(engine, dsn, sql)
    assert moved <= sensitivity, (moved, sensitivity)
    assert moved == sensitivity, "a unit outside in all its groups reaches it"


def _twin(monkeypatch: pytest.MonkeyPatch, drop: str) -> None:
    """The count with its test of ``drop`` (``_dp_gr`` or ``_dp_rn``) left out."""
    real = buckets.outside_counts

    def broken(*args: object, **kwargs: object) -> list[exp.Expr]:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        for e in out:
            for eq in list(e.find_all(exp.EQ)):
                if isinstance(eq.this, exp.Column) and eq.this.name == drop:
                    eq.replace(exp.true())
        return out

    monkeypatch.setattr(buckets, "outside_counts", broken)
    # the module (the package exports its function of the same name)
    module = sys.modules["dpsql.sql.rewrite.bound_contributions"]
    monkeypatch.setattr(module, "outside_counts", broken)


@pytest.mark.parametrize("sql", [SQLS[1], SQLS[4]], ids=["pre-bucketed", "row path"])
@pytest.mark.parametrize(("groups", "drop"), [(2, "_dp_gr"), (4, "_dp_rn")])
def test_the_broken_twins_are_caught(
    dsn: str, monkeypatch: pytest.MonkeyPatch, groups: int, drop: str, sql: str
) -> None:
    _twin(monkeypatch, drop)
    e = Engine(
        build_policy(
            base=BASE, tables={"public.t": private_table("uid", COLUMNS, rows=2, groups=groups)}
        ),
        dsn,
        pool_size=1,
    )
    try:
        moved, sensitivity = _largest_move(e, dsn, sql)
    finally:
        e.close()
    assert moved > sensitivity, (moved, sensitivity)


# -- epsilon, statistically --------------------------------------------------------------------
SQL = "SELECT MAX(v) FROM t"
EPS = Fraction(40)  # the count gets 40 / 80 = 0.5


def _audit(engines: tuple[Engine, Engine], broken: bool) -> tuple[float, float]:
    """(epsilon lower bound, epsilon charged) of the count's release, drawn as
    :func:`dpsql.execute.bias.release_alarms` draws it (one total, the alarm's mechanism)."""
    plans = [_plan(e, SQL, EPS) for e in engines]
    xs = []
    for e, p in zip(engines, plans, strict=True):
        rows = list(e.backend.run(e.private_sql(e.prepare(SQL), p.analysis), private=True).rows)
        xs.append(sum(_counts(rows, 0, len(p.analysis.measures)).values()))
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


def test_the_count_is_dp_at_its_charge(engines: tuple[Engine, Engine]) -> None:
    bound, charged = _audit(engines, broken=False)
    assert charged == float(EPS * ALARM_SHARE) == 0.5 and bound <= charged, (bound, charged)


def test_the_audit_flags_a_quarter_of_the_noise(engines: tuple[Engine, Engine]) -> None:
    bound, charged = _audit(engines, broken=True)
    assert bound > charged, (bound, charged)


# -- the other shapes ---------------------------------------------------------------------------
# One row per unit (``tu``: uid a primary key, each unit's first row of t), ``privacy_unit: row``
# (``tr``: a copy of t, each row its own unit), a ROLLUP (each grouping set's own count), a join
# of t with ``t2`` (a copy of t) on the unit, and t with the public ``names``: for each, the
# count's L1 change over the groups when one unit is removed (from every table: a unit of tr is
# a row, removed by its ctid) must stay within each measurement's sensitivity and reach it
# (exactly: no noise). Twins caught: the join's count without the row-number test (every kept
# joined row of a unit outside) and the ROLLUP's without the group-rank test.
SHAPE_POLICY = build_policy(
    base=BASE,
    tables={
        **{
            f"public.{t}": private_table("uid", COLUMNS, rows=2, groups=2)
            for t in ("t", "tu", "t2")
        },
        "public.tr": private_table("row", COLUMNS, rows=None, groups=None),
    },
    public_tables=["public.names"],
)


@pytest.fixture(scope="module")
def shapes(dsn: str) -> Iterator[Engine]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE tu (uid integer PRIMARY KEY, g text NOT NULL, v numeric)")
        conn.execute("INSERT INTO tu SELECT DISTINCT ON (uid) * FROM t ORDER BY uid, ctid")
        conn.execute("CREATE TABLE t2 AS SELECT * FROM t")
        conn.execute("CREATE TABLE tr AS SELECT * FROM t")
        conn.execute("CREATE TABLE names (g text, name text)")
        conn.execute("INSERT INTO names VALUES ('a', 'A'), ('b', 'B'), ('c', 'C'), ('d', 'D')")
    e = Engine(SHAPE_POLICY, dsn, pool_size=1)
    yield e
    e.close()


SHAPES = {  # statement, the tables a unit's rows are removed from (tr: by row)
    "unique unit": ("SELECT g, MAX(v) FROM tu GROUP BY g", ("tu",)),
    "row privacy": ("SELECT g, MEDIAN(v), AVG(v) FROM tr GROUP BY g", ("tr",)),
    "rollup": ("SELECT g, MIN(v) FROM t GROUP BY ROLLUP (g)", ("t",)),
    "private join": ("SELECT x.g, MEDIAN(x.v) FROM t AS x JOIN t2 AS y ON x.uid = y.uid GROUP BY x.g", ("t", "t2")),
    "public join": ("SELECT n.name, MAX(x.v) FROM t AS x JOIN names AS n ON x.g = n.g GROUP BY n.name", ("t",)),
    # SUM / AVG / VARIANCE where no bias target counts (dpsql.sql.alarms.alarm_measures)
    "unique unit SUM": ("SELECT g, SUM(v), VARIANCE(v) FROM tu GROUP BY g", ("tu",)),
    "row privacy SUM": ("SELECT g, SUM(v) FROM tr GROUP BY g", ("tr",)),
    "private join SUM": ("SELECT x.g, SUM(x.v) FROM t AS x JOIN t2 AS y ON x.uid = y.uid GROUP BY x.g", ("t", "t2")),
}  # fmt: skip


def _shape_moves(
    engine: Engine, dsn: str, shape: str, unproven: bool = False
) -> list[tuple[int, int]]:
    """Per count (each grouping set's; one without; each alarm's), the largest L1 change of
    its count over the groups when one unit is removed, and its release's sensitivity.
    ``unproven``: the broken twin that takes one row per unit as proven on ``t`` (1-3 rows a
    unit) and counts every row outside."""
    sql, tables = SHAPES[shape]
    if unproven:
        sql, tables = sql.replace("FROM tu", "FROM t"), ("t",)
    p = engine.prepare(sql)
    plan = engine.plan(p, SessionContext(analyst="auditor", epsilon=Fraction(1)))
    subs = [s.plan for s in plan.sets] if isinstance(plan, SetsPlan) else [plan]
    a = plan.analysis
    if unproven:
        a = dataclasses.replace(a, unique_unit=True)
        subs = [dataclasses.replace(plan, analysis=a, alarms=alarm_plans(a, Fraction(1)))]
    # the unranked path: the catalog's proof of one row per unit; each row its own unit
    assert a.unique_unit is shape.startswith("unique unit"), shape
    assert a.private.row_privacy is shape.startswith("row privacy"), shape
    if unproven:  # the rewrite itself: the engine refuses to run without the catalog's proof
        texts = [bound_contributions(a, "s").sql("postgres")]
    else:
        texts = [salted(t) for t in private_sqls(engine, p, a)]
    out = []
    with psycopg.connect(dsn) as conn:
        if tables == ("tr",):
            units = [
                (f"DELETE FROM tr WHERE ctid = '{c}'",)
                for (c,) in conn.execute("SELECT ctid FROM tr")
            ]
        else:
            units = [
                tuple(f"DELETE FROM {t} WHERE uid = {u}" for t in tables) for u in range(UNITS)
            ]
        for sub, text in zip(subs, texts, strict=True):
            a = sub.analysis if not unproven else a
            keys, x0 = len(a.group_keys), len(a.group_keys) + len(a.measures)
            x0 += 1 if a.needs_selection else 0
            quantile = any(m.kind == "quantile" for m in a.measures)
            n = len(sub.alarms)

            def counts(
                x0: int = x0,
                keys: int = keys,
                text: str = text,
                n: int = n,
                quantile: bool = quantile,
            ) -> list[dict[Any, int]]:
                rows = list(conn.execute(text).fetchall())  # type: ignore[call-overload]
                if quantile:
                    return [_counts(rows, keys, x0 + j) for j in range(n)]
                return [{tuple(r[:keys]): int(r[x0 + j]) for r in rows} for j in range(n)]

            full, worst = counts(), [0] * n
            assert all(sum(f.values()) > 0 for f in full)
            for deletes in units:
                with conn.transaction(force_rollback=True):
                    for d in deletes:
                        conn.execute(d)  # type: ignore[arg-type]
                    less = counts()
                for j in range(n):
                    f, m = full[j], less[j]
                    moved = sum(abs(f.get(g, 0) - m.get(g, 0)) for g in set(f) | set(m))
                    worst[j] = max(worst[j], moved)
            out += [(w, int(x.outside.sensitivity)) for w, x in zip(worst, sub.alarms, strict=True)]
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_moves_by_its_sensitivity(shapes: Engine, dsn: str, shape: str) -> None:
    moves = _shape_moves(shapes, dsn, shape)
    assert len(moves) == (2 if shape in ("rollup", "row privacy") else 1), moves
    assert all(m == s == 1 for m, s in moves), moves  # within it, and reached


@pytest.mark.parametrize(("shape", "drop"), [("private join", "_dp_rn"), ("rollup", "_dp_gr")])
def test_the_shapes_twins_are_caught(
    shapes: Engine, dsn: str, monkeypatch: pytest.MonkeyPatch, shape: str, drop: str
) -> None:
    _twin(monkeypatch, drop)
    e = Engine(SHAPE_POLICY, dsn, pool_size=1)  # SQL written anew
    try:
        moves = _shape_moves(e, dsn, shape)
    finally:
        e.close()
    assert any(m > s for m, s in moves), moves


def test_the_unique_units_twin_is_caught(shapes: Engine, dsn: str) -> None:
    """SUM's count over every row outside holds only where a unit has one row: taken as proven
    on t (1-3 rows a unit), removing one unit moves it by more than the sensitivity 1."""
    moves = _shape_moves(shapes, dsn, "unique unit SUM", unproven=True)
    assert any(m > s for m, s in moves), moves

"""Privacy audit of the fixed-default fallback's estimate, which its column now adds (issue 16).

Where the guard keeps R = G = 1 (too few units at the statement's epsilon), a COUNT's or SUM's
column is the kept answer plus the noisy estimate of what the bounds left out
(dpsql.execute.bias.corrected): post-processing of two releases, each Laplace at its own
epsilon (the answer half, the estimate's part of the other half: dpsql.sql.plan.make_plan), so
the column is DP at their sum when each release moves by at most its plan's sensitivity.

**Sensitivity, exactly** (no noise: false failure 0). D: 40 units over 4 declared groups, 1-4
rows each (a unit's rows over as many groups), and units 40 and 41 with 20 rows each over all 4
groups, v = 100 (declared 0..100): they lose 19 rows, more than the cap C = 4 R rows (400 of
v) the estimate counts a unit up to. For every unit, the fallback plan's SQL runs on D and on D
without it (a DELETE rolled back); the L1 change over the groups of each measure column
(``_dp_m<i>``) and each estimate column (``_dp_b<i>``, grid steps) must stay within the plan's
sensitivity of its release, and the estimate's reach it (the heavy units). The broken twin: a
plan whose estimate claims half its cap as sensitivity is caught (a heavy unit moves it by 4 >
2). The charge: the plan's cost is the statement's epsilon less the bounds' slice, as the plan
without the fallback (the reservation made before the bounds are chosen holds it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.planning import plan as make_plan
from dpsql.execute.private_sql import salted
from dpsql.sql.plan import Plan
from tests.integration.engine.test_fallback_column import POLICY, SESSION, fallback_plan

UNITS = 42


def _rows() -> list[tuple[int, int, str]]:
    out = []
    for u in range(UNITS):
        n = 20 if u >= 40 else 1 + u % 4
        for r in range(n):
            out.append((u, 100 if u >= 40 else 10 + u, "abcd"[(u + r) % 4]))
    return out


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("audit_fallback")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, v integer NOT NULL, g text NOT NULL)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", _rows())
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    e = Engine(POLICY, dsn, pool_size=1)
    yield e
    e.close()


def _moves(engine: Engine, dsn: str, plan: Plan, sql: str) -> dict[str, float]:
    """The largest L1 change over the groups of each measure and estimate column (in the
    measure's units) when one unit is removed."""
    a = plan.analysis
    text = salted(engine.private_sql(engine.prepare(sql, "a"), a))
    nk = len(a.group_keys)
    grids = {f"_dp_b{i}": float(b.target.grid) for i, b in enumerate(plan.bias)}

    def columns(conn: psycopg.Connection[Any]) -> dict[str, dict[Any, float]]:
        cur = conn.execute(text)
        names = [d.name for d in cur.description or ()]
        out: dict[str, dict[Any, float]] = {}
        for row in cur.fetchall():
            for j, name in enumerate(names):
                if name.startswith(("_dp_m", "_dp_b")):
                    g = grids.get(name, 1.0)
                    out.setdefault(name, {})[tuple(row[:nk])] = float(row[j] or 0) * g
        return out

    worst: dict[str, float] = {}
    with psycopg.connect(dsn) as conn:
        full = columns(conn)
        for u in range(UNITS):
            with conn.transaction(force_rollback=True):
                conn.execute("DELETE FROM t WHERE uid = %s", (u,))
                less = columns(conn)
            for name, col in full.items():
                other = less.get(name, {})
                moved = sum(abs(col.get(k, 0.0) - other.get(k, 0.0)) for k in set(col) | set(other))
                worst[name] = max(worst.get(name, 0.0), moved)
    return worst


SQLS = ["SELECT COUNT(*), SUM(v) FROM t", "SELECT g, COUNT(*), SUM(v) FROM t GROUP BY g"]


def _check(engine: Engine, dsn: str, sql: str, plan: Plan) -> None:
    moved = _moves(engine, dsn, plan, sql)
    for i, mp in enumerate(plan.measures):
        assert moved[f"_dp_m{i}"] <= mp.sensitivity, (mp.key, moved)
    for i, b in enumerate(plan.bias):
        assert b.adds
        assert moved[f"_dp_b{i}"] <= b.dropped.sensitivity, (b.key, moved)
        assert moved[f"_dp_b{i}"] == b.dropped.sensitivity, "a heavy unit reaches the cap"


@pytest.mark.parametrize("sql", SQLS)
def test_each_release_moves_by_at_most_its_sensitivity(engine: Engine, dsn: str, sql: str) -> None:
    _, plan = fallback_plan(engine, sql)
    _check(engine, dsn, sql, plan)
    # the same charge as the plan without the fallback at the epsilon left after the bounds'
    # slice: what was reserved for the answer before the bounds were chosen
    prepared = engine.prepare(sql, "a")
    unresolved = make_plan(engine, prepared, SESSION).analysis
    usual = make_plan(engine, prepared, SESSION, analysis=unresolved, spent=Fraction(1, 5))
    assert isinstance(usual, Plan) and not any(b.adds for b in usual.bias)
    assert plan.cost == usual.cost, (plan.cost, usual.cost)
    assert (plan.cost.delta, plan.cost.rho) == (0, 0)


def test_a_plan_claiming_half_the_cap_is_caught(engine: Engine, dsn: str) -> None:
    _, plan = fallback_plan(engine, SQLS[0])
    b = plan.bias[0]
    half = dataclasses.replace(b.dropped, sensitivity=b.dropped.sensitivity / 2)
    broken = dataclasses.replace(plan, bias=(dataclasses.replace(b, dropped=half), *plan.bias[1:]))
    with pytest.raises(AssertionError):
        _check(engine, dsn, SQLS[0], broken)

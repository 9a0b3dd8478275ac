"""The removed-mass count of a GROUP BY over declared keys, its cap split over K groups: one unit
moves it by K times the per-group cap where that is more than C (the per-group cap is C/K
rounded up to one step), and its Laplace release's sensitivity says so (session 26).

Before: COUNT(*) by 5 declared keys at R = 1, G = 5 has C = 4 rows, 1 row per group (C/K = 0.8
rounded up), so one unit with 2 or more rows in each group moves the 5 groups' counts by 5 in
all, while the release was planned at sensitivity 4 (its epsilon a quarter more than charged).
Audited on the data, not by the mechanism's claim: the bounded SQL's counts with and without one
such unit. The twin (sensitivity C = 4) falls short of what the data shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.bias import outside_plans
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from tests.policies import build_policy, private_table

POLICY = build_policy(
    base={},
    version=1,
    dataset="split_cap",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.t": private_table(
            "uid",
            {
                "g": {"type": "integer", "keys": [1, 2, 3, 4, 5]},
                "v": {"type": "integer", "bounds": [0, 100]},
            },
            groups=5,
        )
    },
)
SQLS = ("SELECT g, COUNT(*) FROM t GROUP BY g", "SELECT g, MEDIAN(v) FROM t GROUP BY g")


@pytest.fixture(scope="module")
def engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("splitcap")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g integer, v integer)")
        conn.execute(
            "INSERT INTO t SELECT u, g, (u * g) % 100 FROM generate_series(1, 200) u, "
            "generate_series(1, 5) g"
        )
    e = Engine(POLICY, dsn, pool_size=1)
    yield e
    e.close()


def _dropped(engine: Engine, sql: str) -> tuple[Plan, int]:
    """The plan, and the bounded SQL's removed-mass count summed over the groups (no noise)."""
    prepared = engine.prepare(sql)
    plan = engine.plan(prepared, SessionContext(analyst="a", epsilon=Fraction(1)))
    assert isinstance(plan, Plan) and len(plan.bias) == 1
    rows = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows
    a = plan.analysis
    nk, nm = len(a.group_keys), len(a.measures)
    b0 = nk + nm + (1 if a.needs_selection else 0) + len(outside_plans(plan)) + len(plan.alarms)
    bucketed = any(
        m.kind == "quantile" for m in a.measures
    )  # (GROUPING(_dp_b0) = 1: a group's row)
    main: list[Any] = [r for r in rows if r[-1] == 1] if bucketed else list(rows)
    return plan, sum(int(r[b0]) for r in main)


@pytest.mark.parametrize("sql", SQLS)
def test_one_unit_moves_the_count_by_at_most_its_sensitivity(engine: Engine, sql: str) -> None:
    plan, before = _dropped(engine, sql)
    t = plan.bias[0].target
    assert t.split == 5
    with psycopg.connect(engine.backend.dsn, autocommit=True) as conn:
        # one unit with 40 rows in each group: past every per-group cap
        conn.execute(
            "INSERT INTO t SELECT 9001, g, 50 FROM generate_series(1, 5) g, generate_series(1, 40)"
        )
        try:
            _, after = _dropped(engine, sql)
        finally:
            conn.execute("DELETE FROM t WHERE uid = 9001")
    moved = after - before
    assert moved == t.group_cap_steps * 5, (moved, t)
    assert plan.bias[0].dropped.sensitivity >= moved * t.grid, (plan.bias[0].dropped, moved)
    if sql.startswith("SELECT g, COUNT"):  # C = 4 rows, 1 in each of 5 groups: the twin
        assert t.cap < moved, "the twin (sensitivity C) must fall short here"

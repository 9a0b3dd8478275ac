"""End-to-end privacy audit of a quantile query (MAX by the exponential mechanism) through the engine.

D has 60 units with 2 rows each, x = u mod 3 in {0, 1, 2} (declared bounds [0, 3], integer: four
buckets of width 1); D' adds one unit with 3 rows (the declared max_rows_per_unit) at the upper
bound 3 in group 'a'. The query is ``SELECT g, MAX(x) FROM t GROUP BY g`` at epsilon 1. The event
fixed in advance is "the released MAX of group 'a' is <= 2" (D's true maximum): exactly computed,
the answer spends half the query's epsilon (the other half buys its interval's two ends; 1/80
of the whole counts the units outside x's declared range first: 0.49375), so its
realized epsilon is well below 0.5 (the exponential mechanism rarely meets its bound for a
monotone utility: at epsilon 1 it realized about 0.63). The Clopper-Pearson lower bound (level 1 - 1e-6) must stay below the epsilon charged for
the answer (the execute-level audit: below the statement's); a deliberately broken plan (the
mechanism's epsilon doubled behind the same claim, as a sensitivity bug would do) realizes about
0.63 and must be flagged.

Depths as in test_audit_engine: ``Engine.execute`` repeated (100 runs a side; 1,500 with
``--run-slow``), and the engine's own plan and release on the real upstream rows (bucket counts
from PostgreSQL) repeated 3e4 times (2e5 with ``--run-slow``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.dp.quantiles import Quantile
from dpsql.engine import Engine
from dpsql.execute.noise import release
from dpsql.session import SessionContext
from dpsql.sql import plan as plan_module
from dpsql.sql.alarms import ALARM_SHARE
from tests.dp_audit.auditing import (
    Verdict,
    broken_twins,
    curtailed_audit,
    epsilon_lower_bound,
    neighbouring_engines,
)
from tests.policies import build_policy, private_table

POLICY = build_policy(
    base={},
    version=1,
    dataset="audit_q",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.t": private_table(
            "uid",
            {"g": {"type": "text", "keys": ["a", "b"]}, "x": {"type": "integer", "bounds": [0, 3]}},
            rows=3,
        )
    },
)
SQL = "SELECT g, MAX(x) FROM t GROUP BY g"
EVENT_MAX = 2  # the event: released MAX of group 'a' <= D's true maximum
SESSION = SessionContext(analyst="auditor", epsilon=Fraction(1))


def _load(dsn: str, with_extreme: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text NOT NULL, x integer)")
        rows = [(u, "ab"[u % 2], u % 3) for u in range(60) for _ in range(2)]
        if with_extreme:
            rows += [(999, "a", 3)] * 3
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)


@pytest.fixture(scope="module")
def engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load, "auditq")


def double_epsilon(*args: Any) -> plan_module.Plan:
    """The deliberately broken planner: each quantile spends twice the epsilon it is charged."""
    p = plan_module.make_plan(*args)
    measures = tuple(
        dataclasses.replace(
            mp, mechanism=dataclasses.replace(mp.mechanism, epsilon=2 * mp.mechanism.epsilon)
        )
        if isinstance(mp.mechanism, Quantile)
        else mp
        for mp in p.measures
    )
    return dataclasses.replace(p, measures=measures)


def _bound(hits: list[int], n: int) -> float:
    return max(
        epsilon_lower_bound(hits[0], n, hits[1], n, alpha=5e-7),
        epsilon_lower_bound(hits[1], n, hits[0], n, alpha=5e-7),
    )


def _execute_audit(engines: tuple[Engine, Engine], runs: int) -> Verdict:
    """Up to ``runs`` executions a side, curtailed (:func:`auditing.curtailed_audit`: the
    verdict of all ``runs``), each charged exactly the session's epsilon 1."""
    prepared = [engine.prepare(SQL) for engine in engines]

    def event(i: int) -> bool:
        r = engines[i].execute(prepared[i], SESSION)
        assert r.epsilon_spent == pytest.approx(1.0)
        return bool(next(row[1] for row in r.rows if row[0] == "a") <= EVENT_MAX)

    return curtailed_audit(event, runs, 1.0, alpha=5e-7)


def test_quantile_execute_audit(
    engines: tuple[Engine, Engine], request: pytest.FixtureRequest
) -> None:
    runs = 1500 if request.config.getoption("--run-slow") else 100
    verdict = _execute_audit(engines, runs)
    assert not verdict.exceeds, verdict


def _released(engine: Engine, n: int) -> np.ndarray:
    """The engine's plan and release on the real upstream rows (group 'a''s per-group row and its
    per-bucket rows), as n groups of one release with independent draws."""
    prepared = engine.prepare(SQL)
    plan = engine.plan(prepared, SESSION)
    assert plan.epsilon == 1 and isinstance(plan.measures[0].mechanism, Quantile)
    assert plan.measures[0].bounds is not None  # the interval's ends, charged in plan.cost
    a = plan.analysis
    rows = engine.backend.run(engine.private_sql(prepared, a), private=True).rows
    mine = [r for r in rows if r[0] == "a"]
    assert len(mine) >= 2  # the group's row and its bucket rows
    keyed = [(str(i), *r[1:]) for i in range(n) for r in mine]
    rel = release(plan, keyed, engine.group_types(prepared, a), None, 0.95, engine.noise)
    return np.array([s[0] for s in rel.stats], dtype=float)


def _release_audit(engines: tuple[Engine, Engine], n: int) -> float:
    hits = [int((_released(e, n) <= EVENT_MAX).sum()) for e in engines]
    return _bound(hits, n)


@pytest.fixture
def draws(request: pytest.FixtureRequest) -> int:
    return 200_000 if request.config.getoption("--run-slow") else 30_000


def _point_epsilon(engine: Engine) -> float:
    """The answer's own charge: half the quantile's share (the other half buys its interval's
    two ends, released separately: dpsql.sql.plan._selection_plan; the count of units outside
    the declared range takes ALARM_SHARE of the statement's epsilon first)."""
    plan = engine.plan(engine.prepare(SQL), SESSION)
    mech = plan.measures[0].mechanism
    assert isinstance(mech, Quantile) and plan.cost.epsilon == 1
    return float(mech.epsilon)


def test_quantile_release_audit(engines: tuple[Engine, Engine], draws: int) -> None:
    # half of what the count of units outside x's declared range (ALARM_SHARE) leaves
    assert _point_epsilon(engines[0]) == float((1 - ALARM_SHARE) / 2)
    assert _release_audit(engines, draws) <= _point_epsilon(engines[0])


def test_quantile_release_audit_flags_double_epsilon(engines: tuple[Engine, Engine]) -> None:
    # the answer's claim is 0.5; doubled to 1, it realizes about 0.63
    with broken_twins(engines, double_epsilon) as broken:
        assert _release_audit(broken, 60_000) > _point_epsilon(engines[0])


def test_neighbours_move_bucket_counts_by_at_most_r(engines: tuple[Engine, Engine]) -> None:
    """The sensitivity argument on the real upstream rows: D and D' differ, per group, by at most
    R = 3 rows in the bucket counts the mechanism sees (L1), and only in group 'a'."""
    from dpsql.execute.selected_measures import bucket_matrix, split_bucket_rows

    hists = []
    for engine in engines:
        prepared = engine.prepare(SQL)
        plan = engine.plan(prepared, SESSION)
        rows = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows
        _, hist = split_bucket_rows(plan, list(rows))
        hists.append(hist)
        mech = plan.measures[0].mechanism
        assert isinstance(mech, Quantile)
    for key in ("a", "b"):
        h0, h1 = (bucket_matrix([h.get((0, (key,)))], mech.buckets)[0] for h in hists)
        diff = int(np.abs(h0 - h1).sum())
        assert diff == (3 if key == "a" else 0)

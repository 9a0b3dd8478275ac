"""Privacy audit of statements of several DP leaves (#15, dpsql/sql/tree.py) on neighbouring
databases: D has 60 units with 2 rows each; D' adds one unit with the extreme values (3 rows =
max_rows_per_unit, each at the upper bound 100, in group 'a'), as in test_audit_engine.py.

Property: the epsilon the statement is charged (the sum of its leaves' shares) bounds the
privacy loss of its whole output. For an event fixed in advance (every audited output of group
'a' reaching D''s exact bounded answer: the likelihood-ratio extreme for Laplace noise), the
Clopper-Pearson lower bound on the realized epsilon (level 1 - 1e-6) must not exceed it.

* Release level, 1e4 draws a side: the two leaves of a UNION ALL (COUNT and SUM, epsilon 1/2
  each, split by the engine's own tree planner), released by the engine's own release on the
  real upstream rows; the joint event's realized epsilon is at most 1. A broken twin whose
  leaves are noised for twice their share (each leaf's sensitivity halved in the plan: a leaf
  charged at half its cost) realizes about 1.8 and must be flagged: at 1e4 draws its bound read
  1.45-1.50 over 3 runs (standard deviation about 0.04: over 10 of them above the charged 1),
  while the honest tree's stays at most 1 with probability >= 1 - 1e-6 at any count
  (Clopper-Pearson). Each draw is one group of the engine's whole release (post-processing,
  intervals, notes), so 1e4 (3e4 before) costs a third.
* Execute level, a hundred runs a side: each new shape end to end (split, charge, bounded
  SQL, noise, post-processing in PostgreSQL): the charge is exactly the statement's epsilon and
  the realized epsilon of its output stays below it. The runs are drawn in pairs and stop once
  the rest cannot change the verdict (``auditing.curtailed_audit``: the verdict of all 100, in
  about a third of the runs for a correct statement).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpsql.dp.noise_source import CSPRNG, NoiseSource
from dpsql.engine import Engine
from dpsql.execute.noise import release
from dpsql.execute.private import measure
from dpsql.execute.tree_prepare import leaf_plans
from dpsql.session import SessionContext
from tests.dp_audit.auditing import (
    Verdict,
    broken_twins,
    curtailed_audit,
    epsilon_lower_bound,
    neighbouring_engines,
)
from tests.dp_audit.test_audit_engine import BASE, COLUMNS, POLICY, _load, half_noise
from tests.helpers import EXACT
from tests.policies import build_policy, private_table

SESSION = SessionContext(analyst="auditor", epsilon=Fraction(1), mechanism="laplace")

UNION = (
    "SELECT 'n' AS m, g, COUNT(*) AS x FROM t GROUP BY g "
    "UNION ALL SELECT 's', g, SUM(v) FROM t GROUP BY g"
)
# (statement, which output cells of group 'a' the event reads: (row filter, column)); the event
# needs every cell present (a series limit releases group 'a' only when it is in the top-1)
SHAPES: dict[str, tuple[str, Callable[[tuple[Any, ...]], bool], int]] = {
    "union_all": (UNION, lambda r: r[1] == "a", 2),
    "cte_join": (
        "WITH c AS (SELECT g, COUNT(*) AS n FROM t GROUP BY g), "
        "s AS (SELECT g, SUM(v) AS total FROM t GROUP BY g) "
        "SELECT c.g, c.n, s.total FROM c JOIN s ON s.g = c.g",
        lambda r: r[0] == "a",
        1,
    ),
    "reaggregate": (
        "SELECT MAX(x) AS top FROM (SELECT g, COUNT(*) AS x FROM t GROUP BY g) q",
        lambda r: True,
        0,
    ),
    "series_limit": (
        "SELECT g, SUM(v) AS s FROM t JOIN (SELECT g AS k, COUNT(*) AS c FROM t GROUP BY 1 "
        "ORDER BY c DESC LIMIT 1) AS series_limit ON g = k GROUP BY 1",
        lambda r: r[0] == "a",
        1,
    ),
    "per_unit_histogram": (
        "SELECT n, COUNT(*) AS units FROM (SELECT uid, COUNT(*) AS n FROM t GROUP BY uid) q "
        "GROUP BY n",
        lambda r: r[0] == 3,
        1,
    ),
    "window": (
        "SELECT g, COUNT(*) AS n, COUNT(*) * 1.0 / SUM(COUNT(*)) OVER () AS share "
        "FROM t GROUP BY g",
        lambda r: r[0] == "a",
        1,
    ),
    "agg_of_aggs": (
        "SELECT AVG(x) AS mean FROM (SELECT g, COUNT(*) AS x FROM t GROUP BY g) q",
        lambda r: True,
        0,
    ),
    "per_unit_stats": (
        "SELECT AVG(n) AS mean FROM (SELECT uid, COUNT(*) AS n FROM t GROUP BY uid) q",
        lambda r: True,
        0,
    ),
    # the released rows' count: the declared keys, the same on both databases (a public output)
    "pagination": (
        "SELECT COUNT(*) AS c FROM (SELECT g, COUNT(*) AS n FROM t GROUP BY g LIMIT 50000) q",
        lambda r: True,
        0,
    ),
    "case_band": (
        "SELECT band, COUNT(*) AS n FROM (SELECT CASE WHEN v < 50 THEN 'low' ELSE 'high' END "
        "AS band, v FROM t) q GROUP BY band",
        lambda r: r[0] == "high",
        1,
    ),
    "in_filter": (
        "SELECT g, COUNT(*) AS n FROM t WHERE g IN ('a') GROUP BY g",
        lambda r: r[0] == "a",
        1,
    ),
}


@pytest.fixture(scope="module")
def engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load, "atree")


def _bound(hits_d: int, hits_d2: int, n: int) -> float:
    return max(
        epsilon_lower_bound(hits_d, n, hits_d2, n, alpha=5e-7),
        epsilon_lower_bound(hits_d2, n, hits_d, n, alpha=5e-7),
    )


def _leaf_draws(
    engine: Engine, n: int, noise: NoiseSource = CSPRNG
) -> tuple[list[np.ndarray], float]:
    """Each leaf of UNION, released n times on group 'a''s real upstream row (n groups of one
    release: independent draws from ``noise``); and the epsilon the statement is charged."""
    prepared = engine.prepare(UNION)
    plans = leaf_plans(engine, prepared.leaves, SESSION)
    out = []
    for leaf, plan in zip(prepared.leaves, plans, strict=True):
        row = next(r for r in measure(engine, leaf, plan, None).rows if r[0] == "a")
        keyed = [(str(i), *row[1:]) for i in range(n)]
        types = engine.group_types(leaf, plan.analysis)
        rel = release(plan, keyed, types, None, 0.95, noise)
        out.append(np.array([s[0] for s in rel.stats], dtype=float))
    return out, float(sum((p.cost.epsilon for p in plans), Fraction(0)))


def _release_audit(engines: tuple[Engine, Engine], n: int) -> tuple[float, float]:
    thresholds = [v[0] for v in _leaf_draws(engines[1], 1, EXACT)[0]]
    hits, charged = [], 0.0
    for engine in engines:
        draws, charged = _leaf_draws(engine, n)
        event = np.ones(n, dtype=bool)
        for values, t in zip(draws, thresholds, strict=True):
            event &= values >= t
        hits.append(int(event.sum()))
    return _bound(hits[0], hits[1], n), charged


RELEASE_DRAWS = 10_000  # a side (the module docstring: the twin still read 1.45-1.50)


def test_tree_release_audit(engines: tuple[Engine, Engine]) -> None:
    eps_lb, charged = _release_audit(engines, RELEASE_DRAWS)
    assert charged == pytest.approx(1.0)
    assert eps_lb <= charged


def test_tree_release_audit_flags_a_leaf_charged_at_half_its_cost(
    engines: tuple[Engine, Engine],
) -> None:
    # realized about 1.8 (0.9 per leaf: a tenth of each leaf's share measures the bias)
    with broken_twins(engines, half_noise) as broken:
        eps_lb, charged = _release_audit(broken, RELEASE_DRAWS)
    assert charged == pytest.approx(1.0)
    assert eps_lb > charged


def _outputs(engine: Engine, name: str) -> tuple[list[float], float]:
    sql, which, col = SHAPES[name]
    r = engine.execute(engine.prepare(sql), SESSION)
    cells = [float(row[col]) for row in r.rows if which(row)]
    return cells, r.epsilon_spent


def _execute_audit(engines: tuple[Engine, Engine], name: str, runs: int) -> Verdict:
    """Up to ``runs`` executions a side (curtailed: stopped once the rest cannot change the
    verdict, :func:`auditing.curtailed_audit`), each charged exactly the statement's epsilon 1."""
    d, d2 = engines
    exact = Engine(d2.policy, d2.backend.dsn, pool_size=1, noise=EXACT)
    try:
        thresholds, _ = _outputs(exact, name)
    finally:
        exact.close()

    def event(i: int) -> bool:
        cells, spent = _outputs(engines[i], name)
        assert spent == pytest.approx(1.0)  # the whole tree: one charge of the statement's epsilon
        return len(cells) == len(thresholds) and all(
            c >= t for c, t in zip(cells, thresholds, strict=True)
        )

    return curtailed_audit(event, runs, 1.0, alpha=5e-7)


@pytest.mark.parametrize("name", list(SHAPES))
def test_tree_execute_audit(
    engines: tuple[Engine, Engine], name: str, request: pytest.FixtureRequest
) -> None:
    runs = 1500 if request.config.getoption("--run-slow") else 100
    verdict = _execute_audit(engines, name, runs)
    assert not verdict.exceeds, verdict


def quarter_noise(*args: Any) -> Any:
    """A more broken planner than ``half_noise``: each leaf noised for four times its share."""
    return _scaled(args, 4)


def _scaled(args: Any, k: int) -> Any:
    import dataclasses

    from dpsql.sql import plan as plan_module

    p = plan_module.make_plan(*args)
    measures = tuple(
        dataclasses.replace(
            mp,
            mechanism=dataclasses.replace(mp.mechanism, sensitivity=mp.mechanism.sensitivity / k),
        )
        for mp in p.measures
    )
    return dataclasses.replace(p, measures=measures)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tree_execute_audit_flags_a_broken_leaf(engines: tuple[Engine, Engine]) -> None:
    """End to end, 800 runs a side: leaves noised for four times their share realize about 3.6
    on the UNION ALL's joint event; the bound reads well above the charged 1.0 (the release-level
    audit above catches the half-noise twin with 1e4 draws)."""
    with broken_twins(engines, quarter_noise) as broken:
        verdict = _execute_audit(broken, "union_all", 800)
    assert verdict.exceeds, verdict


# ``auto`` bounds in a tree's leaf (dpsql/execute/tree_budget.py): enough units (3,000) that the
# leaf really chooses R and the clamp from the data, then answers with the rest of its share:
# the audited output is the whole mechanism (bound choices, answer, post-processing), charged
# the statement's epsilon once. (The guard keeps a bound's default when 3,000 + DLap(1 / 0.01)
# falls below its limit of ~1,070: probability <= e^-19 each, so the notice check below fails
# falsely with probability < 1e-8.)
AUTO_POLICY = build_policy(
    base=BASE, tables={"public.t": private_table("uid", COLUMNS, rows="auto", groups="auto")}
)
AUTO_SHAPES = {
    "reaggregate_auto": (
        "SELECT MAX(x) AS top FROM (SELECT g, SUM(v) AS x FROM t GROUP BY g) q",
        lambda r: True,
        0,
    ),
}


def _load_many(dsn: str, with_extreme: bool) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT u AS uid, (ARRAY['a', 'b'])[1 + u % 2] AS g, "
            "((u * 37) % 90)::numeric AS v FROM generate_series(0, 2999) u, generate_series(1, 2)"
        )
        if with_extreme:
            conn.execute("INSERT INTO t SELECT 99999, 'a', 100 FROM generate_series(1, 3)")


@pytest.fixture(scope="module")
def auto_engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, AUTO_POLICY, _load_many, "atreeauto")


def test_tree_execute_audit_with_auto_bounds(
    auto_engines: tuple[Engine, Engine], request: pytest.FixtureRequest, monkeypatch: Any
) -> None:
    monkeypatch.setitem(SHAPES, "reaggregate_auto", AUTO_SHAPES["reaggregate_auto"])
    runs = 1500 if request.config.getoption("--run-slow") else 100
    first = auto_engines[0].execute(
        auto_engines[0].prepare(AUTO_SHAPES["reaggregate_auto"][0]), SESSION
    )
    assert "derived table q: contribution bounds:" in first.notices[0]  # chosen, not defaults
    assert "chosen from the data" in first.notices[0], first.notices
    # bound choices and answer: one charge of epsilon 1 (checked on every run)
    verdict = _execute_audit(auto_engines, "reaggregate_auto", runs)
    assert not verdict.exceeds, verdict

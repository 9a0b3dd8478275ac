"""Error bars on a table the catalog proves one row per unit (dpsql.execute.unique_units) whose
column is clamped narrower than declared (``clamp: auto``): clamping still removes value mass.

Data: 3,000 units, ``uid`` the PRIMARY KEY (one row each), ``v`` declared [0, 10,000]; 300 units
("whales", uid % 10 = 0) hold v = 350, the others 1 + uid % 50. The clamp is fixed at 100 for
the test (as ``auto`` could choose it: :func:`dpsql.sql.apply_bounds.apply_bounds`), so each whale
loses 250 to the clamp, below the cap C = 4 R c = 400, and SUM(v) is 75,000 below the truth: the
noise alone (Laplace, scale about 111) can't reach it.

Property: the 95% interval of SUM(v), SUM(v) by g and AVG(v) covers the truth (the query run as
written on PostgreSQL) in at least 95% of independent releases. The private SQL (the catalog's
unbounded path: asserted) runs once; its row is released ``DRAWS`` times by the engine's own
``release``, fresh noise each time, as in tests/integration/test_error_bars.py. With coverage
p >= 0.95, fewer than ``binom_min_successes(DRAWS, 0.95)`` covered releases has probability
<= 1e-6: the false-failure rate.

Broken twin: the same row with the removed-mass columns at 0 (what the unbounded path reported
before: "one row per unit, nothing removed"): its SUM interval is the noise's alone, 75,000 below
the truth, and it covers in none of the releases unless the Laplace noise passes 74,000 = 660
scales (probability e^-660): it fails the same check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
from dpsql.sql.auto_bounds import auto_items
from dpsql.sql.plan import Plan
from tests.helpers import EXACT, Coverage, Tally, interval_coverage
from tests.policies import build_policy, private_table

DRAWS = 400
UNITS = 3000
CLAMP = Fraction(100)
POLICY = build_policy(
    base={},
    version=1,
    dataset="uclamp",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.u": private_table(
            "uid",
            {
                "g": {"type": "text", "keys": ["a", "b"]},
                "v": {"type": "numeric", "bounds": [0, 10000]},  # clamp: auto (the default)
            },
        )
    },
    analysts={"a": {"budget": {"epsilon": 1000, "delta": 0.1}}},
)
QUERIES = {
    "sum": "SELECT SUM(v) FROM u",
    "sum_by_g": "SELECT g, SUM(v) FROM u GROUP BY g",
    "avg": "SELECT AVG(v) FROM u",
}
COVERAGE = Coverage(DRAWS)


def _value(u: int) -> int:
    return 350 if u % 10 == 0 else 1 + u % 50


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("uclamp")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE u (uid integer PRIMARY KEY, g text NOT NULL, v numeric)")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO u VALUES (%s, %s, %s)",
                [(u, "a" if u % 3 else "b", _value(u)) for u in range(UNITS)],
            )
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    e = Engine(POLICY, dsn, pool_size=2)
    yield e
    e.close()


def _clamped(engine: Engine, sql: str, clamp: Fraction = CLAMP) -> tuple[Any, Plan]:
    """The prepared statement and its plan with v clamped to at most ``clamp``."""
    prepared = engine.prepare(sql)
    session = SessionContext(analyst="a", epsilon=Fraction(1))
    a = engine.plan(prepared, session).analysis  # reads the catalog: one row per unit
    assert a.unique_unit
    (item,) = [it for it in auto_items(a) if it.kind == "value_hi"]
    chosen = ChosenBound("value_hi", item.column, clamp, Fraction(1, 5), 1, len(item.grid))
    plan = engine.plan(prepared, session, analysis=apply_bounds(a, AutoBounds((chosen,))))
    assert isinstance(plan, Plan)
    return prepared, plan


def _coverage(engine: Engine, name: str, broken: bool = False) -> Tally:
    """How many of DRAWS releases' 95% intervals hold the truth (of the first group, or of the
    only row). ``broken``: the removed-mass columns read 0 (the twin)."""
    sql = QUERIES[name]
    prepared, plan = _clamped(engine, sql)
    assert plan.bias, "a clamped SUM or AVG estimates what clamping removed"
    text = engine.private_sql(prepared, plan.analysis)
    assert "_dp_parts" not in text, "the catalog proves one row per unit: the unbounded path"
    row = list(engine.backend.run(text, private=True).rows[0])
    if broken:
        n = 2 * len(plan.bias)
        row[-n:] = [0] * n
    return interval_coverage(engine, plan, row, sql, DRAWS)


@pytest.mark.parametrize("name", list(QUERIES))
def test_interval_covers_what_the_clamp_removed(engine: Engine, name: str) -> None:
    COVERAGE.holds(_coverage(engine, name), name)


@pytest.mark.parametrize("name", ["sum", "sum_by_g"])
def test_nothing_removed_twin_fails_the_same_check(engine: Engine, name: str) -> None:
    COVERAGE.caught(_coverage(engine, name, broken=True), f"{name}, nothing removed")


def test_the_removed_mass_is_exactly_what_the_clamp_cut(dsn: str) -> None:
    """Zero-noise source: the released removed mass of SUM(v) is the clamped-off mass (deterministic),
    over-cap 0 (each whale loses 250 < C = 400)."""
    e = Engine(POLICY, dsn, pool_size=1, noise=EXACT)
    try:
        prepared, plan = _clamped(e, QUERIES["sum"])
        row = e.backend.run(e.private_sql(prepared, plan.analysis), private=True).rows[0]
        (b,) = plan.bias
        steps, over = int(row[-2]), int(row[-1])
        assert steps * b.target.grid == 300 * (350 - 100)
        assert over == 0
        assert float(row[0]) == sum(min(_value(u), 100) for u in range(UNITS))
    finally:
        e.close()


@pytest.mark.parametrize("name", ["sum", "avg"])
def test_the_declared_clamp_leaves_nothing_out(engine: Engine, name: str) -> None:
    """newcomer22 #2: AVG(birth_year) over one row per patient, its clamp chosen at the declared
    2,025 (nothing cut), read [1975.9, 2025.0] and 'clamping cut off about 831,110 of
    birth_year': the removed-mass estimate, known to be 0 there, added its noise's reach. With
    the clamp at the declared 10,000 and one row per unit nothing is removed: the interval is
    the answer's noise alone (SUM: its Laplace half-width at 95%, no reach above for the
    estimate) and still covers the truth in at least 95% of DRAWS releases (false failure <=
    1e-6, as above); the notice says the bounds left nothing out. Before, SUM's upper end was
    NULL (a unit beyond the cap could fit the releases) and AVG's interval was [0, 491] around
    45: 9x as wide as its noise's."""
    from dpsql.dp.noise_source import CSPRNG
    from dpsql.execute.noise import release

    sql = QUERIES[name]
    prepared, plan = _clamped(engine, sql, Fraction(10_000))
    assert plan.bias and all(b.target.nothing_removed for b in plan.bias)
    row = list(
        engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows[0]
    )
    COVERAGE.holds(interval_coverage(engine, plan, row, sql, DRAWS), f"{name}, nothing removed")
    rel = release(plan, [tuple(row)], [], None, 0.95, CSPRNG)
    (lo, hi), value = rel.intervals[0][0], float(rel.stats[0][0])
    (line,) = [n for n in rel.notes if n.startswith(QUERIES[name].split()[1])]
    assert "the bounds left nothing out" in line and "cut off" not in line, line
    if name == "sum":
        noise = plan.measure_plan(plan.analysis.statistics[0].measures[0]).mechanism
        hw = noise.half_width(0.95)  # type: ignore[union-attr]
        assert hi - value == pytest.approx(hw, rel=0.05) and value - lo == pytest.approx(
            hw, rel=0.05
        )
    else:
        assert hi - lo < 100, (lo, value, hi)  # noise alone: about 55 here (before: 491)

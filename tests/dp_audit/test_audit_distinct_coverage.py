"""COUNT(DISTINCT unit)'s interval holds the truth at its stated level, alone or beside other
aggregates (newcomer28 #2's coverage check, audit28).

newcomer28 counted, through the proxy at epsilon 1, 25 misses in 330 cells (7.6%) of a 95%
``COUNT(DISTINCT user_id) ... GROUP BY region`` interval with ``AVG(amount)`` beside it, 16 in 350
(4.6%) alone: p ~ 0.02, a hint that the distinct count's epsilon share (split with a bound
choice and the other aggregates) and its stated half-width might disagree. audit28 measured
``Engine.execute`` on the demo (fresh executions: a new epsilon each, so nothing repeats, every
cell's truth run as written on PostgreSQL; cells 5 a grouped statement): no shape undercovers
(numbers in the commit). This test keeps it so.

Property: in every shape below, each release's interval of the COUNT(DISTINCT) (the first
statistic) holds the truth (the statement's own COUNT(DISTINCT), run as written on PostgreSQL
by the owner: the event comes from the data, never from the mechanism's claim) with probability
at least the stated 0.95. Test: DRAWS cells a shape (independent noise draws: a grouped
statement's groups are drawn independently, so each of its releases gives one cell a region),
fewer than ``binom_min_successes(DRAWS, 0.95, 1e-6 / len(SHAPES))`` covered fails: a correct
engine fails the whole test with probability <= 1e-6 (Bonferroni over the shapes). Power: at a
true coverage of 90% the expected misses (200 of 2,000) are 5.6 standard deviations above the
limit of 144 misses (P(pass) ~ 1e-8 a shape).

Each cell is the engine's release (:func:`dpsql.execute.noise.release`: noise, post-processing,
intervals) of the demo's bounded rows, run once (only the noise is redrawn: the demo policy's
fixed bounds, 5 groups per user_id, remove nobody from a region, so the interval is the noise
alone, which is what the shapes could get wrong). ``--run-slow`` adds the whole path: fresh
``Engine.execute`` runs with the shipped ``auto`` bounds (their bound choice sharing epsilon).

Broken twins, which must be caught: the distinct count's noise drawn at twice its scale (an
epsilon split whose stated half-width is the larger share's), grouped with AVG beside and
ungrouped alone.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from dpsql.dp.mechanisms import Mechanism
from dpsql.dp.noise_source import CSPRNG, NoiseSource
from dpsql.engine import Engine
from dpsql.execute.noise import release
from dpsql.session import SessionContext
from tests.dp_audit.auditing import WrongScale
from tests.helpers import Coverage

_BY = "SELECT region, COUNT(DISTINCT user_id) AS c{more} FROM purchases{where} GROUP BY region"
_ALL = "SELECT COUNT(DISTINCT user_id) AS c{more} FROM purchases{where}"
SHAPES = {  # the grouped ones are cheap here (one release of DRAWS groups); ungrouped, one a draw
    "alone by region": (_BY, ""),
    "with AVG by region": (_BY, ", AVG(amount) AS a"),
    "with SUM by region": (_BY, ", SUM(amount) AS a"),
    "with COUNT(*) by region": (_BY, ", COUNT(*) AS a"),
    "alone": (_ALL, ""),
}
SLOW_SHAPES = {"with AVG": (_ALL, ", AVG(amount) AS a")}  # ~3 ms a release: 2,000 under --run-slow
WHERE = " WHERE purchased_at >= DATE '2025-07-01'"
DRAWS = 2_000  # cells a shape
CHECK = Coverage(DRAWS, 0.95, 1e-6 / len(SHAPES))
SLOW_CHECK = Coverage(DRAWS, 0.95, 1e-6 / (len(SLOW_SHAPES) + 4))  # + the executed shapes


def _sql(shape: str, where: str = WHERE) -> tuple[str, str]:
    """The statement of ``shape`` and its truth's (the COUNT(DISTINCT) alone, as written)."""
    text, more = {**SHAPES, **SLOW_SHAPES}[shape]
    return text.format(more=more, where=where), text.format(more="", where=where)


def _distinct_mech(plan: Any) -> Mechanism:
    key = plan.analysis.statistics[0].measures[0]
    (m,) = [m for m in plan.measures if m.key == key]
    return m.mechanism  # type: ignore[no-any-return]


def _covered(engine: Engine, shape: str, broken: int = 0) -> int:
    """How many of DRAWS released intervals of ``shape``'s COUNT(DISTINCT) hold the truth."""
    sql, truth_sql = _sql(shape)
    truths = {r[:-1]: float(r[-1]) for r in engine.backend.run(truth_sql, private=False).rows}
    prepared = engine.prepare(sql, "analyst")
    plan = engine.plan(prepared, SessionContext("analyst", Fraction(1)))
    assert plan.analysis.statistics[0].func == "count_distinct"
    rows = list(engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows)
    types = engine.group_types(prepared, plan.analysis)
    noise: NoiseSource = WrongScale(_distinct_mech(plan), broken) if broken else CSPRNG
    if plan.analysis.group_keys:  # one release of DRAWS groups, each a region's bounded row
        picked = [rows[i % len(rows)] for i in range(DRAWS)]
        keyed = [(str(i), *row[1:]) for i, row in enumerate(picked)]
        rel = release(plan, keyed, ["text"], None, 0.95, noise)
        of_key = [truths[tuple(row[:1])] for row in picked]  # released in the keys' order
        cells = [
            (iv[0], of_key[int(g[0])]) for g, iv in zip(rel.groups, rel.intervals, strict=True)
        ]
    else:
        each = (release(plan, rows, types, None, 0.95, noise) for _ in range(DRAWS))
        cells = [(rel.intervals[0][0], truths[()]) for rel in each]
    assert len(cells) == DRAWS
    covered = 0
    for iv, t in cells:
        assert iv is not None  # nothing disowns a distinct count that bounding keeps whole
        covered += iv[0] <= t <= iv[1]
    return covered


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Any:
    e = Engine(demo_policy, demo_dsn, pool_size=1)
    yield e
    e.close()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_distinct_count_interval_covers(engine: Engine, shape: str) -> None:
    CHECK.holds(_covered(engine, shape), shape)


@pytest.mark.parametrize("shape", ["with AVG by region", "alone"])
def test_distinct_coverage_catches_twice_the_noise(engine: Engine, shape: str) -> None:
    CHECK.caught(_covered(engine, shape, broken=2), shape)


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SLOW_SHAPES))
def test_distinct_count_interval_covers_slow_shapes(engine: Engine, shape: str) -> None:
    SLOW_CHECK.holds(_covered(engine, shape), shape)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s.endswith("by region")])
def test_distinct_count_interval_covers_executed(
    demo_dsn: str, demo_policy_auto: Any, shape: str
) -> None:
    """The whole path, fresh each time: ``Engine.execute`` with the shipped ``auto`` bounds (a
    bound choice sharing epsilon where a SUM or AVG is beside: newcomer28's shape), a new
    epsilon each run (nothing repeats a release), DRAWS / 5 runs of 5 regions (about 2 s a run
    with AVG beside on a loaded machine: ~15 min)."""
    sql, truth_sql = _sql(shape)
    e = Engine(demo_policy_auto, demo_dsn, pool_size=1)
    try:
        truths = {r[0]: float(r[1]) for r in e.backend.run(truth_sql, private=False).rows}
        prepared = e.prepare(sql, "analyst")
        covered = cells = 0
        for i in range(DRAWS // len(truths)):
            eps = Fraction(1) + Fraction(i, 10**6)
            r = e.execute(prepared, SessionContext("analyst", eps, show_intervals=True))
            assert r.intervals is not None
            for row, ivs in zip(r.rows, r.intervals, strict=True):
                iv = ivs[1]  # the COUNT(DISTINCT)'s columns
                assert iv is not None
                covered += iv[0] <= truths[row[0]] <= iv[1]
                cells += 1
    finally:
        e.close()
    assert cells == DRAWS
    SLOW_CHECK.holds(covered, shape)

"""Each grouping set bounds a unit's contribution on its own (neighbouring databases, no noise).

D has 30 units with one row each; D' adds one unit with 5 rows in every (g1, g2) group, all at
the upper bound of v. Per grouping set of ``GROUP BY ROLLUP (g1, g2)``, the exact answers on D
and D' differ, summed over the set's groups, by exactly that set's stated L1 sensitivity:
G·R·c for the sets with keys (the extra unit keeps G = 2 groups and R = 2 rows in each), R·c for
the grand total (G = 1). Computing the grand total from the finest set's bounded groups instead
(a tempting shortcut) would move it by G·R·c, more than the grand total's sensitivity: the test
below shows that such a shortcut would be caught.

The epsilon split is audited on the released values: the grand total's measurement, run 3e4
times a side with its planned Laplace noise on the real bounded counts of D and D', must show an
empirical epsilon (Clopper-Pearson lower bound at level 1 - 1e-6, event: the output reaching
D''s count) no larger than its share epsilon/3. A plan that does not split (the set at the
statement's full epsilon) realizes 3 times the share and must be flagged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.grouping_sets import set_sql
from dpsql.session import SessionContext
from dpsql.sql import plan as plan_module
from dpsql.sql.grouping_sets import SetsPlan, grouping_value, set_analysis
from tests.dp_audit.auditing import epsilon_lower_bound, neighbouring_engines
from tests.helpers import EXACT, unrounded
from tests.policies import build_policy, private_table

R, G, V = 2, 2, 10
POLICY = build_policy(
    base={},
    version=1,
    dataset="grouping_audit",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.t": private_table(
            "uid",
            {
                "g1": {"type": "text", "keys": ["a", "b", "c"]},
                "g2": {"type": "text", "keys": ["x", "y"]},
                "v": {"type": "numeric", "bounds": [0, V], "clamp": "bounds"},
            },
            rows=R,
            groups=G,
        )
    },
)
SQL = (
    "SELECT g1, g2, GROUPING(g1, g2) AS s, COUNT(*), SUM(v), COUNT(DISTINCT uid) "
    "FROM t GROUP BY ROLLUP (g1, g2)"
)


def _load(dsn: str, with_extreme: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g1 text, g2 text, v numeric)")
        rows = [(u, "abc"[u % 3], "xy"[u % 2], u % V) for u in range(30)]
        if with_extreme:
            rows += [(999, g1, g2, V) for g1 in "abc" for g2 in "xy" for _ in range(5)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s)", rows)


@pytest.fixture(scope="module")
def engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load, "gsets", noise=EXACT)


def _answer(e: Engine) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    r = e.execute(e.prepare(SQL), SessionContext())
    return {row[:3]: row[3:] for row in r.rows}


def _moved(a: dict[Any, Any], b: dict[Any, Any], rows: list[Any], i: int) -> Fraction:
    return sum((abs(Fraction(str(a[k][i])) - Fraction(str(b[k][i]))) for k in rows), Fraction(0))


def test_each_set_moves_by_exactly_its_own_sensitivity(
    engines: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    unrounded(monkeypatch)  # compares exact values: before the presentation rounding
    d, d2 = engines
    plan = d.plan(d.prepare(SQL), SessionContext())
    assert isinstance(plan, SetsPlan)
    a, b = _answer(d), _answer(d2)
    assert set(a) == set(b)  # declared keys: the same rows on both sides
    stats = plan.analysis.statistics
    expected = {(0, 1): [G * R, G * R * V, G], (0,): [G * R, G * R * V, G], (): [R, R * V, 1]}
    for sp in plan.sets:
        rows = [k for k in a if k[2] == grouping_value([0, 1], sp.keys)]
        assert rows
        for i, st in enumerate(stats):
            sens = sp.plan.measure_plan(st.measures[0]).sensitivity
            assert sens == expected[sp.keys][i], (sp.keys, st.sql)
            assert _moved(a, b, rows, i) == sens, (sp.keys, st.sql)


def test_a_grand_total_summed_from_the_finest_set_would_be_caught(
    engines: tuple[Engine, Engine],
) -> None:
    d, d2 = engines
    plan = d.plan(d.prepare(SQL), SessionContext())
    assert isinstance(plan, SetsPlan)
    a, b = _answer(d), _answer(d2)
    finest = [k for k in a if k[2] == 0]
    total = next(sp for sp in plan.sets if not sp.keys)
    count_sens = total.plan.measure_plan(plan.analysis.statistics[0].measures[0]).sensitivity
    assert _moved(a, b, finest, 0) > count_sens  # G·R = 4 > R = 2: would break the guarantee


AUDIT_SQL = "SELECT g1, g2, COUNT(*) FROM t GROUP BY ROLLUP (g1, g2)"  # one measure per set
AUDIT_SESSION = SessionContext(epsilon=Fraction(3), mechanism="laplace")


def _grand_total_hits(
    engines: tuple[Engine, Engine], n: int, *, split: bool = True
) -> tuple[float, Fraction]:
    """The empirical epsilon of the grand total's release, and the share it claims."""
    plans = [e.plan(e.prepare(AUDIT_SQL), AUDIT_SESSION) for e in engines]
    counts = []
    for e, plan in zip(engines, plans, strict=True):
        assert isinstance(plan, SetsPlan)
        text = set_sql(e, e.prepare(AUDIT_SQL), plan.analysis, ())
        rows = e.backend.run(text, private=True).rows
        counts.append(float(rows[0][0]))  # COUNT(*): the first measure
    plan = plans[0]
    assert isinstance(plan, SetsPlan)
    total = next(sp for sp in plan.sets if not sp.keys)
    claimed = total.plan.epsilon
    mech = total.plan.measures[0].mechanism
    if not split:  # the broken plan: the grand total at the statement's whole epsilon
        broken = plan_module.make_plan(set_analysis(plan.analysis, ()), plan.epsilon, Fraction(0))
        mech = broken.measures[0].mechanism
    assert counts[1] - counts[0] == R  # D' adds R bounded rows to the grand total
    hits = [int((mech.release(np.full(n, c)) >= counts[1]).sum()) for c in counts]
    eps_lb = max(
        epsilon_lower_bound(hits[0], n, hits[1], n, alpha=5e-7),
        epsilon_lower_bound(hits[1], n, hits[0], n, alpha=5e-7),
    )
    return eps_lb, claimed


def test_each_sets_epsilon_share_is_honest(engines: tuple[Engine, Engine]) -> None:
    eps_lb, claimed = _grand_total_hits(engines, 30_000)
    assert claimed == 1  # epsilon 3 over the 3 sets of ROLLUP (g1, g2)
    assert eps_lb <= claimed


def test_a_plan_that_does_not_split_is_flagged(engines: tuple[Engine, Engine]) -> None:
    eps_lb, claimed = _grand_total_hits(engines, 30_000, split=False)
    assert eps_lb > claimed  # realized 3 against a claimed share of 1

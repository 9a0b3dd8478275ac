"""Each grouping set bounds a unit's contribution on its own (neighbouring databases, no noise).

D has 30 units with one row each; D' adds one unit with 5 rows in every (g1, g2) group, all at
the upper bound of v. Per grouping set of ``GROUP BY ROLLUP (g1, g2)``, the noiseless answers on D
and D' differ, summed over the set's groups, by exactly that set's stated L1 sensitivity:
G·R·c for the sets with keys (the extra unit keeps G = 2 groups and R = 2 rows in each), R·c for
the grand total (G = 1). Computing the grand total from the finest set's bounded groups instead
(a tempting shortcut) would move it by G·R·c, more than the grand total's sensitivity: the test
below shows that such a shortcut would be caught.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from dpsql.sql.grouping_sets import SetsPlan, grouping_value
from tests.dp_audit.auditing import neighbouring_engines
from tests.helpers import noiseless

R, G, V = 2, 2, 10
POLICY: dict[str, Any] = {
    "version": 1,
    "dataset": "grouping_audit",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    "tables": {
        "public.t": {
            "privacy_unit": "uid",
            "max_rows_per_unit": R,
            "max_groups_per_unit": G,
            "columns": {
                "uid": {"type": "integer", "identifier": True},
                "g1": {"type": "text", "keys": ["a", "b", "c"]},
                "g2": {"type": "text", "keys": ["x", "y"]},
                "v": {"type": "numeric", "bounds": [0, V]},
            },
        }
    },
}
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
    for d, d2 in neighbouring_engines(make_db, POLICY, _load, "gsets"):
        yield noiseless(d), noiseless(d2)


def _answer(e: Engine) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    r = e.execute(e.prepare(SQL), SessionContext())
    return {row[:3]: row[3:] for row in r.rows}


def _moved(a: dict[Any, Any], b: dict[Any, Any], rows: list[Any], i: int) -> Fraction:
    return sum((abs(Fraction(str(a[k][i])) - Fraction(str(b[k][i]))) for k in rows), Fraction(0))


def test_each_set_moves_by_exactly_its_own_sensitivity(engines: tuple[Engine, Engine]) -> None:
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

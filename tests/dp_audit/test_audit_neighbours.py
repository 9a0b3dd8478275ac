"""Neighbouring databases, exactly: removing one unit moves each bounded measure by at most its
stated sensitivity (before noise), for the constructs last changed: integer division and
numeric(p, s) casts in sums, integral SUM rounding, AVG's centered sums, joins capped at R rows
per unit (self-joins, private-private, with public tables, GROUP BY a joined column).

The plan calibrates noise to: each group's measure moves by at most R * c (c = Measure.per_row(),
1 for COUNT(DISTINCT unit)), and the groups together by at most G * R * c (L1). Checked here on
the demo data by running the bounded SQL on D and on D minus one unit (its rows deleted from every
private table in a rolled-back transaction), for the five heavy units (400 rows each, clamped and
capped) and ordinary ones. A join keeps R random rows per unit of each table before joining
(``ORDER BY RANDOM()``); here that choice is made deterministic and still a function of each row
alone (``hashtext(ctid::text)``), so that the other units keep the same rows in both databases and
the difference is the removed unit's own contribution.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.sql.analysis import Analysis, Measure

QUERIES = [
    "SELECT category, SUM(div(quantity, 3)) FROM purchases GROUP BY category",
    "SELECT SUM(CAST(amount AS numeric(5,1))) FROM purchases",
    "SELECT SUM(quantity * 2 - 3), COUNT(*) FROM purchases",
    "SELECT AVG(amount / 7), VAR_POP(quantity) FROM purchases",
    "SELECT COUNT(DISTINCT user_id), SUM(ROUND(amount, 1)) FROM purchases",
    "SELECT a.category, SUM(b.amount) FROM purchases a JOIN purchases b ON a.user_id = b.user_id "
    "GROUP BY a.category",
    "SELECT SUM(p.amount), COUNT(*) FROM purchases p JOIN pums u ON p.user_id = u.pid",
    "SELECT r.name, COUNT(*), SUM(p.quantity) FROM purchases p JOIN regions r ON r.code = p.region "
    "GROUP BY r.name",
    "SELECT u.sex, SUM(p.quantity / 2) FROM purchases p JOIN pums u ON p.user_id = u.pid "
    "GROUP BY u.sex",
]
TWIN = "SELECT SUM(quantity * 2 - 3), COUNT(*) FROM purchases"
HEAVY = (100001, 100002, 100003, 100004, 100005)


def _measures(a: Analysis) -> tuple[Measure, ...]:
    """The measures of the bounded SQL, as dpsql.execute.private_sql.bounded_sql writes them."""
    if a.needs_selection:
        return a.measures + (Measure("count_rows" if a.private.row_privacy else "count_units"),)
    return a.measures


def _bound(a: Analysis, m: Measure) -> Fraction:
    return Fraction(1) if m.kind == "count_units" else a.max_rows * m.per_row()


def _released(conn: psycopg.Connection[Any], sql: str, keys: int) -> dict[tuple[Any, ...], list]:
    rows = conn.execute(sql).fetchall()
    return {tuple(r[:keys]): [Fraction(str(v)) for v in r[keys:]] for r in rows}


@pytest.fixture(scope="module")
def units(demo_dsn: str) -> tuple[int, ...]:
    """Two heavy units, the ordinary unit with the most rows, one that is in pums too."""
    with psycopg.connect(demo_dsn) as conn:
        top = conn.execute(
            "SELECT user_id FROM purchases GROUP BY user_id HAVING count(*) < 400 "
            "ORDER BY count(*) DESC, user_id LIMIT 1"
        ).fetchall()
        both = conn.execute(
            "SELECT min(pid) FROM pums WHERE pid IN (SELECT user_id FROM purchases)"
        ).fetchone()
    return HEAVY[:2] + tuple(u for (u,) in top) + ((both[0],) if both and both[0] else ())


def worst_ratio(
    engine: Engine, dsn: str, sql: str, units: tuple[int, ...], rows_bound: int | None = None
) -> Fraction:
    """The largest (change when one of ``units`` is removed) / (its bound), over groups (Linf)
    and over the sum of groups (L1 against G times the bound); ``rows_bound`` replaces R (to
    check that a wrong bound is caught)."""
    prepared = engine.prepare(sql)
    a = prepared.analysis
    assert a is not None
    text = engine.private_sql(prepared, a).replace("RANDOM()", "hashtext(ctid::text)")
    assert "random" not in text.lower()
    measures = _measures(a)
    bounds = [_bound(a, m) * (rows_bound or a.max_rows) / a.max_rows for m in measures]
    keys = len(a.group_keys)
    worst = Fraction(0)
    zero = [Fraction(0)] * len(measures)
    with psycopg.connect(dsn) as conn:
        full = _released(conn, text, keys)
        for u in units:
            conn.execute("DELETE FROM purchases WHERE user_id = %s", (u,))
            conn.execute("DELETE FROM pums WHERE pid = %s", (u,))
            less = _released(conn, text, keys)
            conn.rollback()
            l1 = [Fraction(0)] * len(measures)
            for g in set(full) | set(less):
                diffs = [
                    abs(x - y) for x, y in zip(full.get(g, zero), less.get(g, zero), strict=True)
                ]
                for i, d in enumerate(diffs):
                    worst = max(worst, d / bounds[i])
                    l1[i] += d
            worst = max([worst, *(x / (a.max_groups * b) for x, b in zip(l1, bounds, strict=True))])
    return worst


@pytest.mark.parametrize("sql", QUERIES)
def test_one_unit_moves_each_measure_by_at_most_its_sensitivity(
    engine: Engine, demo_dsn: str, units: tuple[int, ...], sql: str
) -> None:
    assert worst_ratio(engine, demo_dsn, sql, units) <= 1


def test_a_wrong_bound_is_caught(engine: Engine, demo_dsn: str) -> None:
    """The check can fail: claiming R = 1 for a heavy unit's 25 kept rows exceeds the bound."""
    assert worst_ratio(engine, demo_dsn, TWIN, HEAVY[:1], rows_bound=1) > 1

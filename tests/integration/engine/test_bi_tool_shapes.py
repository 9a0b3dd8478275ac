"""Statement shapes BI tools and ORMs send that dpsql refused or answered badly (newcomer 21).

Real engine and PostgreSQL, demo data. Properties, one per finding:
- 33: with ``show_intervals`` on, the same aggregate twice in the select list answers (it failed
  with dpsql's internal ``low0`` after charging), and no two result columns share a name because of
  the interval columns (``COUNT(*), 1 AS count_low``).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, None, pool_size=2)
    yield e
    e.close()


def _session(intervals: bool = True) -> SessionContext:
    s = SessionContext("analyst", Fraction(1))
    s.show_intervals = intervals
    return s


REPEATED = [
    (
        "SELECT category, SUM(amount) AS s, SUM(amount) AS s2 FROM purchases GROUP BY category",
        ["category", "s", "s2", "s_low", "s_high", "s2_low", "s2_high"],
    ),
    (
        "SELECT COUNT(*), COUNT(*) FROM purchases WHERE quantity = 3",
        ["count", "count", "count_low", "count_high", "count_2_low", "count_2_high"],
    ),
    (  # newcomer22 #31: the 2nd avg's, not the 4th column's (was avg_3_*, avg_4_*)
        "SELECT category, COUNT(*), AVG(amount), AVG(quantity) FROM purchases GROUP BY category",
        [
            "category",
            "count",
            "avg",
            "avg",
            "count_low",
            "count_high",
            "avg_low",
            "avg_high",
            "avg_2_low",
            "avg_2_high",
        ],  # fmt: skip
    ),
    (
        "SELECT COUNT(*), 1 AS count_low FROM purchases",
        ["count", "count_low", "count_1_low", "count_1_high"],
    ),
]


@pytest.mark.parametrize(("sql", "names"), REPEATED)
def test_repeated_aggregate_with_intervals(engine: Engine, sql: str, names: list[str]) -> None:
    got = engine.execute(engine.prepare(sql, "analyst"), _session())
    assert [c.name for c in got.columns] == names
    assert got.rows
    for row in got.rows:  # the two copies of one statistic: one value, one interval
        if names[1] == "s":
            assert row[1] == row[2] and row[3:5] == row[5:7]
        if names[:2] == ["count", "count"]:
            assert row[0] == row[1] and row[2:4] == row[4:6]
    if names.count("avg") == 2:  # which interval is which column, for a tool keyed by name
        assert (
            "interval columns of outputs that share a name: avg_low/avg_high: column 3 "
            "(avg: AVG(amount)); avg_2_low/"
            "avg_2_high: column 4 (avg: AVG(quantity))"
        ) in got.notices, got.notices


def _notes(got: Any) -> str:
    return " ".join(got.notices)


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT CAST("purchases"."category" AS TEXT) AS "category", SUM(1) AS "cnt" '
        'FROM "public"."purchases" "purchases" GROUP BY 1',
        "SELECT category::text, COUNT(*) FROM purchases WHERE category::text IN ('books', 'travel')"
        " GROUP BY category::text",
    ],
)
def test_cast_to_the_columns_own_type_keeps_its_keys(engine: Engine, sql: str) -> None:
    """Tableau's ``CAST(category AS TEXT)`` of a text column with declared keys: the declared
    keys (every one, narrowed by WHERE), no partition selection."""
    got = engine.execute(engine.prepare(sql, "analyst"), _session(False))
    assert [c.name for c in got.columns][0] == "category"
    keys = sorted(r[0] for r in got.rows)
    want = (
        ["books", "travel"]
        if "IN" in sql
        else ["books", "clothing", "electronics", "groceries", "travel"]
    )
    assert keys == want
    assert "threshold" not in _notes(got)

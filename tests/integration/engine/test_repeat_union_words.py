"""Notices of free repeats and of UNION ALL parts say what they are about.

* A free repeat of a released statement said nothing (its numbers came back, no charge, no
  word): it now says it is a repeat, free, and of which release (its id in dpsql.history), for
  a flat statement and for each part of a statement of several.
* The interval of a UNION ALL's column comes from each row's own part: the notice named the
  first part only.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

FLAT = "SELECT category, COUNT(*) FROM purchases GROUP BY category"
CTE = (
    "WITH a AS (SELECT COUNT(*) AS n FROM purchases WHERE quantity > 3), "
    "b AS (SELECT COUNT(*) AS m FROM purchases WHERE quantity > 2) "
    "SELECT n + m AS t FROM a, b"
)
UNION = (
    "SELECT category, COUNT(*) FROM purchases GROUP BY category UNION ALL "
    "SELECT region, COUNT(*) FROM purchases GROUP BY region"
)


@pytest.fixture
def engine(demo_policy: Any, demo_dsn: str) -> Iterator[Engine]:
    with ledgered_engine(demo_policy, demo_dsn, "dpsql_rw") as e:
        yield e


def _ask(engine: Engine, sql: str, **kw: Any) -> Any:
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), **kw)
    return engine.execute(engine.prepare(sql, "analyst"), s)


def _released(engine: Engine) -> list[int]:
    """The ids of the analyst's charged releases (dpsql.history), oldest first."""
    hist = engine.ledger.history("analyst")  # type: ignore[union-attr]
    return sorted(h.id for h in hist if h.state == "committed" and h.mechanism != "auto_bound")


@pytest.mark.parametrize("sql", [FLAT, CTE])
def test_a_free_repeat_says_so_and_of_which_release(engine: Engine, sql: str) -> None:
    first = _ask(engine, sql)
    assert not first.cached and not any("free repeat" in n for n in first.notices)
    (rid,) = _released(engine)
    again = _ask(engine, sql)
    assert again.cached and again.epsilon_spent == 0 and again.rows == first.rows
    said = [n for n in again.notices if f"free repeat of release {rid}," in n]
    assert all("no privacy budget spent" in n for n in said)
    if sql == CTE:  # each part says it (both were released together)
        assert [n.split(":")[0] for n in said] == ["CTE a", "CTE b"], again.notices
    else:
        assert len(said) == 1, again.notices


def test_a_union_alls_interval_names_every_part(engine: Engine) -> None:
    r = _ask(engine, UNION, show_intervals=True)
    (line,) = [n for n in r.notices if n.startswith("interval columns: count:")]
    assert "GROUP BY category" in line and "GROUP BY region" in line, line


def test_a_bounded_dates_days_are_its_keys(exact_engine: Engine) -> None:
    """GROUP BY a bounded date without keys releases every day of its bounds (bi25, Metabase's
    day): no group comes from the data, so no notice says so (it did, suggesting the date's
    months, when the days were selected from the data)."""
    sql = "SELECT p.purchased_at, COUNT(*) FROM purchases p GROUP BY 1"
    r = _ask(exact_engine, sql)
    assert not [n for n in r.notices if "come from the data (no declared keys)" in n]
    assert len(r.rows) == 365  # 2025, the demo's declared bounds


@pytest.mark.parametrize("confidence", [0.9, 0.999])
def test_max_and_min_say_the_level_their_columns_hold(
    exact_engine: Engine, confidence: float
) -> None:
    """MAX/MIN lines state the level in the words every other line uses ('90%'), the level
    the statement's interval columns are at: they said 'with probability >= 0.995' beside
    'COUNT(*): 90% interval'. Where the interval does not reach the level, the line says there
    is none at it, and the columns are NULL."""
    sql = "SELECT MAX(amount) AS mx, MIN(quantity) AS mn, COUNT(*) AS n FROM purchases"
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
    s.confidence = confidence
    r = exact_engine.execute(exact_engine.prepare(sql, "analyst"), s)
    words = "90%" if confidence == 0.9 else "99.9%"
    (row,) = r.rows
    for head in ("MAX(amount) (column mx): ", "MIN(quantity) (column mn): "):
        (line,) = [n for n in r.notices if n.startswith(head)]
        assert "probability >= 0.995" not in line and "probability 0.9 " not in line, line
        if confidence == 0.9:
            assert "the interval holds the" in line and f"with probability {words} or more" in line
        else:
            assert line.startswith(f"{head}no {words} interval"), line
    ends = row[3:7]  # mx_low, mx_high, mn_low, mn_high
    if confidence == 0.9:  # MAX keeps _low, MIN _high where the bounds leave rows out
        assert ends[0] is not None and ends[3] is not None, row
    else:
        assert all(x is None for x in ends), row
    assert any(n.startswith(f"COUNT(*) (column n): {words} interval") for n in r.notices) or any(
        f": {words} interval" in n for n in r.notices
    ), r.notices

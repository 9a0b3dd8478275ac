"""A statement of one grouping set releases what its GROUP BY does: the same plan, budget and
noise, so at zero noise the same rows, values rounded alike. Review30: an output computed from a
statistic whose interval the notice disowned (``MIN(amount) + 1``: MIN keeps its high end only)
is rounded at its own half-width (Release.derived_half_widths, dpsql.execute.flat_rounding);
the grouping-sets stitch dropped those, so the rounding fell back to MIN's relative half-width
and ``MIN(amount) + 1`` read 0 beside a MIN of 0.06 (GROUP BY category: 1). Before the fix
(dpsql/execute/grouping_sets.py as of f1e3a4d) this test fails on that column.
Deterministic (zero noise)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext

SQL = (
    "SELECT category, MIN(amount) AS m, MIN(amount) + 1 AS m1, SUM(amount) - 100000 AS s "
    "FROM purchases GROUP BY {g} ORDER BY 1"
)


def _ask(engine: Engine, g: str) -> Any:
    s = SessionContext("analyst", Fraction(1), show_intervals=True)
    return engine.execute(engine.prepare(SQL.format(g=g), "analyst"), s)


@pytest.mark.parametrize("g", ["GROUPING SETS ((category))", "ROLLUP(category)"])
def test_a_grouping_set_rounds_as_its_group_by(exact_engine: Engine, g: str) -> None:
    flat = _ask(exact_engine, "category")
    names = [c.name for c in flat.columns]
    # MIN's _low is disowned, and so m1's: m1 is rounded at its own half-width
    assert all(r[names.index("m1_low")] is None for r in flat.rows), flat.rows
    sets = _ask(exact_engine, g)
    assert [c.name for c in sets.columns] == names
    assert sets.rows[: len(flat.rows)] == flat.rows  # (ROLLUP: its total row after them)

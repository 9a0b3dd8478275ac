"""Every private answer says how accurate it is, in every statement shape (issue 16 item 2).

On the shipped demo policy (``auto`` bounds) each shape a psql user may send -- a plain
aggregate, GROUP BY, quantiles, MIN/MAX, COUNT(DISTINCT) over keys and over the unit, VARIANCE,
an expression of aggregates, a join with a public table, a join of two private tables, a CTE, a
window over aggregates, scalar subqueries, a per-person derived table, ROLLUP -- gets a notice
for each of its statistics naming the level and a half-width (``±``) or, for a quantile, the
probability its interval holds; a statistic whose bias is not estimated says so (``NOT``).
Deterministic: the notices' wording, whatever the noise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dpsql.engine import Engine
from tests.helpers import ledgered_engine, notices_of

PER_UNIT = "(SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t"
# (statement, the heads of the statistics' notice lines)
SHAPES: list[tuple[str, tuple[str, ...]]] = [
    ("SELECT COUNT(*), SUM(amount), AVG(amount) FROM purchases", ("COUNT(*)", "SUM(amount)", "AVG(amount)")),
    ("SELECT category, COUNT(*) FROM purchases GROUP BY category", ("COUNT(*)",)),
    ("SELECT region, COUNT(DISTINCT user_id) FROM purchases GROUP BY region", ("COUNT(DISTINCT user_id)",)),
    ("SELECT COUNT(DISTINCT category) FROM purchases", ("COUNT(DISTINCT category)",)),
    ("SELECT category, VARIANCE(quantity), STDDEV(quantity) FROM purchases GROUP BY category", ("VAR_SAMP(quantity)", "STDDEV(quantity)")),
    ("SELECT SUM(amount) / COUNT(*) AS r FROM purchases", ("SUM(amount)", "COUNT(*)")),
    ("SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON p.region = r.code GROUP BY r.name", ("COUNT(*)",)),
    ("SELECT COUNT(*) FROM purchases p JOIN pums u ON p.user_id = u.pid", ("COUNT(*)",)),
    ("WITH c AS (SELECT category, SUM(amount) AS s FROM purchases GROUP BY category) SELECT category, s / 1000 FROM c", ("SUM(amount)",)),
    ("SELECT category, COUNT(*), RANK() OVER (ORDER BY COUNT(*) DESC) FROM purchases GROUP BY category", ("COUNT(*)",)),
    ("SELECT (SELECT COUNT(*) FROM purchases) AS a, (SELECT AVG(income) FROM pums) AS b", ("COUNT(*)", "AVG(income)")),
    (f"SELECT AVG(n), SUM(n) FROM {PER_UNIT}", ("AVG(n)", "SUM(n)")),
    ("SELECT category, region, COUNT(*) FROM purchases GROUP BY ROLLUP (category, region)", ("COUNT(*)",)),
]  # fmt: skip
QUANTILES = [  # (statement, its quantiles)
    ("SELECT MEDIAN(income) FROM pums", 1),
    ("SELECT sex, percentile_cont(0.9) WITHIN GROUP (ORDER BY income) FROM pums GROUP BY sex", 1),
    ("SELECT MIN(purchased_at), MAX(purchased_at) FROM purchases", 2),
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_an") as e:
        yield e


def _stat(line: str) -> str:
    """A notice line's statistic: its text before ': 95% interval' (a tree leaf's line starts
    with the leaf's name and ': ')."""
    return line.split(": 95% interval")[0].split(": ")[-1]


@pytest.mark.parametrize(("sql", "heads"), SHAPES, ids=[s for s, _ in SHAPES])
def test_every_statistic_has_a_level_and_a_half_width(
    engine: Engine, sql: str, heads: tuple[str, ...]
) -> None:
    lines = [n for n in notices_of(engine, sql) if ": 95% interval" in n]
    for head in heads:
        mine = [n for n in lines if _stat(n) == head]
        assert mine, (head, lines)
        for line in mine:
            assert "±" in line, line


@pytest.mark.parametrize(("sql", "count"), QUANTILES)
def test_every_quantile_says_how_likely_its_interval_holds(
    engine: Engine, sql: str, count: int
) -> None:
    notes = [n for n in notices_of(engine, sql) if not n.startswith("contribution bounds")]
    holds = [n for n in notes if "the interval holds" in n and "with probability" in n]
    assert len(holds) == count, notes

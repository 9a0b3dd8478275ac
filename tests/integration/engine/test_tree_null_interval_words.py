"""A tree statement's interval-column notices do not contradict each other (newcomer26 #16).

`WITH u AS (SELECT user_id, SUM(amount) AS s ... GROUP BY user_id) SELECT AVG(s), COUNT(*) FROM
u`: its AVG's part disowns its interval (each user_id's s is capped before the AVG: the notice
says the cap's change is not estimated), so avg_low and avg_high are NULL in every row. The
notices said "avg: the interval of the aggregate over u ...'s released value, unchanged (at
0.95)" and then "avg_low, avg_high are NULL: a value it reads has an interval its part's
accuracy notice (above) says does NOT hold". Property: a column whose interval columns are
NULL in every row gets no line promising it an interval; the column beside it (count) keeps
its own.
"""

from __future__ import annotations

from typing import Any

from dpsql.engine import Engine
from tests.helpers import with_intervals

SQL = (
    "WITH u AS (SELECT user_id, SUM(amount) AS s FROM purchases WHERE region <> 'C' "
    "GROUP BY user_id) SELECT AVG(s), COUNT(*) FROM u"
)


def test_a_column_with_no_interval_is_promised_none(demo_dsn: str, demo_policy: Any) -> None:
    e = Engine(demo_policy, demo_dsn, pool_size=1)
    try:
        r = with_intervals(e, SQL)
    finally:
        e.close()
    names = [c.name for c in r.columns]
    row = dict(zip(names, r.rows[0], strict=True))
    assert row["avg_low"] is None and row["avg_high"] is None, row
    notes = [n.removeprefix("interval columns: ") for n in r.notices]
    assert any(n.startswith("avg_low, avg_high are NULL") for n in notes), r.notices
    assert not any(n.startswith("avg: ") for n in notes), r.notices
    assert any(n.startswith("count: ") for n in notes), r.notices

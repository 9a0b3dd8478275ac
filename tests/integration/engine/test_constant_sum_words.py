"""SUM(1) and SUM(CAST(1 AS BIGINT)) (Tableau's record count) are worded in rows, as COUNT(*):
the accuracy notice said 'they keep at most 16 of 1 per user_id', 'about 5,084 of CAST(1 AS
BIGINT)', 'no user_id lost more than 64 of CAST(1 AS BIGINT)'. Real engine, PostgreSQL, the
shipped demo policy (auto bounds, where the words about what the bounds keep appear)."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    e = Engine(demo_policy_auto, demo_dsn, pool_size=2)
    yield e
    e.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT category, SUM(1) FROM purchases GROUP BY 1",
        "SELECT SUM(CAST(1 AS BIGINT)) AS n FROM purchases",
    ],
)
def test_sum_of_one_is_worded_in_rows(engine: Engine, sql: str) -> None:
    s = SessionContext(analyst="analyst", epsilon=Fraction(1))
    notices = " ".join(engine.execute(engine.prepare(sql), s).notices)
    for bad in (" of 1 ", " of 1)", " of 1,", " of 1;", " of 1.", "of CAST(1 AS BIGINT)"):
        assert bad not in notices, (bad, notices)
    assert " rows" in notices, notices

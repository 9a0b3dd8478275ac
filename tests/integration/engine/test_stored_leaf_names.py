"""A stored answer's interval notice names the parts it is about, in the repeat's own words.

A free repeat keeps the intervals its parts were released with; at a higher dpsql.confidence the
statement's interval columns then fall short and the notice says which stored answers hold them
back. It named the first part a row reads (``labels[events[0]]``), whichever fell short: here
both do, and both are named, by the CTE names of the statement as asked now. And a row that
falls short is never said to hold at the session's level, also when its ends are NULL for
another reason (a part's notice disowning its interval).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

FIRST = (
    "WITH a AS (SELECT COUNT(*) AS n FROM purchases WHERE quantity > 3), "
    "b AS (SELECT COUNT(*) AS m FROM purchases WHERE quantity > 2) "
    "SELECT n + m AS t, n, m FROM a, b"
)
REPEAT = (  # the same statement: its CTEs renamed and listed the other way round
    "WITH bb AS (SELECT COUNT(*) AS m FROM purchases WHERE quantity > 2), "
    "aa AS (SELECT COUNT(*) AS n FROM purchases WHERE quantity > 3) "
    "SELECT n + m AS t, n, m FROM aa, bb"
)


@pytest.fixture
def engine(demo_policy: Any, demo_dsn: str) -> Iterator[Engine]:
    with ledgered_engine(demo_policy, demo_dsn, "dpsql_sl") as e:
        yield e


def _ask(engine: Engine, sql: str, confidence: float) -> Any:
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
    s.confidence = confidence
    return engine.execute(engine.prepare(sql, "analyst"), s)


def test_the_stored_answers_that_fall_short_are_named(engine: Engine) -> None:
    first = _ask(engine, FIRST, 0.9)
    assert not first.cached
    again = _ask(engine, REPEAT, 0.95)
    assert again.cached and again.epsilon_spent == 0
    (line,) = [n for n in again.notices if "t_low, t_high are NULL" in n]
    assert "the stored answers of CTE bb and CTE aa keep their intervals at 0.95" in line, line
    assert "CTE a " not in line and "CTE b " not in line
    (row,) = again.rows
    assert row[3] is None and row[4] is None  # t's interval: NULL, as the notice says
    assert not any(n.startswith("interval columns: t:") for n in again.notices), again.notices


def test_a_row_short_of_the_level_is_not_said_to_hold(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its ends NULL (every part's interval disowned: NULL) and its level short: said short,
    not held at the session's level (the line said 'it holds the true value with probability
    >= 0.95' of two values each held at 0.95)."""
    from dpsql.execute import noise

    monkeypatch.setattr(noise, "owned", lambda d, row, si, iv: None)
    _ask(engine, FIRST, 0.9)
    again = _ask(engine, REPEAT, 0.95)
    assert again.cached
    assert not any("probability >= 0.95" in n for n in again.notices), again.notices
    assert any("hold with probability only 0.9" in n for n in again.notices), again.notices

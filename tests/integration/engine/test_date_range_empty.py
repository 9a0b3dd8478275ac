"""A WHERE range on a date column that misses its declared range is the answer over no rows,
free (newcomer23 #13: ``purchased_at >= current_date - INTERVAL '30 days'``, the declared range
ending 2025-12-31, answered 217 [0, NULL] and was charged epsilon 1).

Policy (docs/policy.md, *Rows outside the declared bounds*): a date's declared bounds are the
values it takes, as keys are, so such a filter lets no row pass whatever the data. Property
(deterministic, demo data): each such statement answers exactly PostgreSQL's aggregates over no
rows (the demo's own rows agree: none pass), charges nothing, records nothing in the history,
and says why; a range that meets the declared one (an end day, a current_date range reaching
back into it), or an OR, is measured and charged as before. Each free case failed before
(charged, a noisy count).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

FREE = [
    "SELECT COUNT(*), SUM(amount) FROM purchases "
    "WHERE purchased_at >= current_date - INTERVAL '30 days'",
    "SELECT COUNT(*), AVG(amount) FROM purchases WHERE purchased_at >= '2026-01-01'",
    "SELECT COUNT(DISTINCT user_id) FROM purchases WHERE purchased_at > '2025-12-31'",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at BETWEEN '2024-01-01' AND '2024-12-31' "
    "AND amount > 3",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount), COUNT(*) FROM purchases "
    "WHERE purchased_at < DATE '2025-01-01'",
]
GROUPED = [
    "SELECT category, COUNT(*) FROM purchases WHERE purchased_at >= '2026-01-01' GROUP BY category",
    "SELECT date_trunc('month', purchased_at) AS m, SUM(amount) FROM purchases "
    "WHERE purchased_at >= current_date - INTERVAL '30 days' GROUP BY 1",
    "SELECT quantity, AVG(amount) FROM purchases WHERE purchased_at < '2024-06-01' GROUP BY quantity",
]
CHARGED = [
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= '2025-12-31'",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= current_date - INTERVAL '40 years'",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= '2026-01-01' OR amount > 499",
    "SELECT category, COUNT(*) FROM purchases WHERE purchased_at >= '2025-12-01' GROUP BY category",
]


@pytest.fixture
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_dre") as e:
        yield e


def ask(engine: Engine, sql: str) -> Any:
    return engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))


@pytest.mark.parametrize("sql", FREE)
def test_a_range_beyond_the_declared_one_answers_no_rows_free(
    engine: Engine, demo_dsn: str, sql: str
) -> None:
    got = ask(engine, sql)
    with psycopg.connect(demo_dsn) as conn:
        truth = conn.execute(sql).fetchall()  # type: ignore[arg-type]
    assert [tuple(r) for r in got.rows] == [tuple(r) for r in truth], (got.rows, truth)
    assert got.epsilon_spent == 0 and got.delta_spent == 0
    assert isinstance(engine.ledger, Ledger) and engine.ledger.history("analyst") == []
    assert any(
        n.startswith("the WHERE clause leaves nothing of purchased_at's declared range, "
                     "2025-01-01 to 2025-12-31") and "nothing was read or charged" in n
        for n in got.notices
    ), got.notices  # fmt: skip


@pytest.mark.parametrize("sql", CHARGED)
def test_a_range_meeting_the_declared_one_is_measured(engine: Engine, sql: str) -> None:
    got = ask(engine, sql)
    assert got.epsilon_spent > 0, got.notices
    assert not any("leaves nothing of" in n for n in got.notices), got.notices


@pytest.mark.parametrize("sql", GROUPED)
def test_grouped_beyond_the_declared_range_answers_no_rows_free(
    engine: Engine, demo_dsn: str, sql: str
) -> None:
    """With GROUP BY (declared keys, a date's periods read from current_date, groups from the
    data): no rows, as PostgreSQL, nothing charged (before: each key's noisy count, charged)."""
    got = ask(engine, sql)
    with psycopg.connect(demo_dsn) as conn:
        assert conn.execute(sql).fetchall() == []  # type: ignore[arg-type]
    assert got.rows == [] and got.epsilon_spent == 0, (got.rows, got.notices)
    assert isinstance(engine.ledger, Ledger) and engine.ledger.history("analyst") == []
    assert any("leaves nothing of purchased_at's declared range" in n and "the answer has no "
               "rows" in n for n in got.notices), got.notices  # fmt: skip

"""BI-tool and ORM statement shapes through the wire with psycopg (newcomer 21's findings).

Real engine and PostgreSQL (demo data) behind the in-process server. Properties:
- 33: with ``SET dpsql.show_intervals = on`` the same aggregate twice answers, each output with
  its own uniquely named interval columns (was 42702 ``low0`` is ambiguous, after charging).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    with served_engine(demo_policy, demo_dsn) as srv:
        yield srv


@pytest.fixture
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def test_repeated_aggregate_with_intervals(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET dpsql.show_intervals = on")
    cur = conn.execute(
        "SELECT category, SUM(amount) AS s, SUM(amount) AS s2 FROM purchases GROUP BY category"
    )
    names = [d.name for d in cur.description or ()]
    assert names == ["category", "s", "s2", "s_low", "s_high", "s2_low", "s2_high"]
    rows = cur.fetchall()
    assert len(rows) == 5 and all(r[1] == r[2] for r in rows)
    cur = conn.execute("SELECT COUNT(*), 1 AS count_low FROM purchases")
    names = [d.name for d in cur.description or ()]
    assert len(set(names)) == len(names), names

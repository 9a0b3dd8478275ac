"""Output names over a derived table are PostgreSQL's (BI tools read columns by name): a cast of
a derived column is named by the column (``CAST(rev AS bigint)`` is ``rev``, was ``sum``, its
intervals ``sum_low``/``sum_high``), through nested derived tables too.

The oracle is PostgreSQL itself: each statement is also run directly on the upstream database
(the names do not depend on the values). Real engine and PostgreSQL, demo data; deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext

INNER = "(SELECT category, SUM(amount) AS rev, COUNT(*) AS n FROM purchases GROUP BY 1)"
STATEMENTS = [
    f"SELECT category, CAST(rev AS bigint) FROM {INNER} t",
    f"SELECT category, rev::bigint, n::float8 FROM {INNER} t",
    f"SELECT category, (rev)::numeric(12, 2) FROM {INNER} t",
    f"SELECT category, rev * 2, round(rev), COALESCE(n, 0) FROM {INNER} t",
    f"SELECT category, rev FROM {INNER} t",
    f"SELECT category, CAST(rev AS bigint) FROM (SELECT category, rev FROM {INNER} a) t",
    f"SELECT CAST(x AS int) FROM (SELECT n AS x FROM {INNER} a) t",
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, None, pool_size=2)
    yield e
    e.close()


@pytest.mark.parametrize("sql", STATEMENTS)
def test_names_are_postgresqls(engine: Engine, demo_dsn: str, sql: str) -> None:
    with psycopg.connect(demo_dsn) as conn:
        cur = conn.execute(sql + " LIMIT 0")  # the names only
        expected = [d.name for d in cur.description or ()]
    got = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    assert [c.name for c in got.columns] == expected


def test_interval_columns_follow_the_name(engine: Engine) -> None:
    s = SessionContext("analyst", Fraction(1))
    s.show_intervals = True
    got = engine.execute(engine.prepare(STATEMENTS[0], "analyst"), s)
    assert [c.name for c in got.columns][:4] == ["category", "rev", "rev_low", "rev_high"]

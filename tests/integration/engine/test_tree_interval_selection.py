"""A tree statement's COALESCE over a leaf whose groups partition selection chose: where the
leaf has no row, the fallback is not exact (the true statement has that group's row).

0c3f0b3 made ``COALESCE(x, constant)`` exact (miss 0) wherever ``x`` is NULL. That holds when
the NULL is the truth's too (a re-aggregation over public rows), not for a LEFT JOIN to a leaf
grouped by a column without declared keys: a group partition selection dropped reads NULL, the
row printed 0 with the interval [0, 0], and the true value (the statement run as written on
PostgreSQL) is the group's count, here 1. An interval that claims more than it holds.

Property: the row of the group that holds one unit has an interval that is NULL or holds its true
value 1. False failure: only when that one-unit group is released (partition selection keeps a
group of one unit with probability <= delta = 1e-6) and its own 95% interval then misses: <= 5e-8.
The twin (0c3f0b3: miss 0 wherever x is NULL) prints [0, 0] for it whenever it is dropped, i.e.
with probability >= 1 - 1e-6, and fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.policies import build_policy, private_table

POLICY = build_policy(
    dataset="coalsel",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.t": private_table(
            "uid",
            {
                "g": {"type": "text", "keys": ["1", "2"]},
                "w": {"type": "text"},  # no keys: partition selection
            },
        )
    },
    public_tables=[],
    analysts={"a": {"budget": {"epsilon": 100000, "delta": 0.5}}},
)
ON = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
SQL = (
    "SELECT a.g, COALESCE(b.n, 0) AS n FROM (SELECT g, COUNT(*) AS c FROM t GROUP BY g) a "
    "LEFT JOIN (SELECT w, COUNT(*) AS n FROM t GROUP BY w) b ON b.w = a.g"
)


@pytest.fixture(scope="module")
def engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("coalsel")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer PRIMARY KEY, g text NOT NULL, w text NOT NULL)")
        # 2,000 units; w = '2' for unit 1 only (its group: 1 unit), '1' for the others
        conn.execute(
            "INSERT INTO t SELECT u, CASE WHEN u % 2 = 0 THEN '1' ELSE '2' END, "
            "CASE WHEN u = 1 THEN '2' ELSE '1' END FROM generate_series(1, 2000) u"
        )
        truth = conn.execute(SQL + " ORDER BY 1").fetchall()
    assert truth == [("1", 1999), ("2", 1)]
    e = Engine(POLICY, dsn, pool_size=2)
    yield e
    e.close()


def test_a_dropped_groups_fallback_is_not_exact(engine: Engine) -> None:
    r = engine.execute(engine.prepare(SQL), ON)
    names = [c.name for c in r.columns]
    g, lo, hi = names.index("g"), names.index("n_low"), names.index("n_high")
    (row,) = [row for row in r.rows if row[g] == "2"]
    if row[lo] is not None:
        assert row[lo] <= 1 <= row[hi], (row, r.notices)
    else:
        assert row[hi] is None
        notes = [n for n in r.notices if n.startswith("interval columns: n_low")]
        # NULL because the group was not released, or (at most 1e-3 a release) because a false
        # over-cap alarm disowned a leaf's interval: then the other row may be NULL too
        assert re.search(r"NULL in [12] of 2 rows", " ".join(notes)), notes
        assert any(
            "group was not released" in n or "accuracy notice (above)" in n for n in notes
        ), notes

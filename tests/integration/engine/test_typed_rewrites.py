"""Quantiles over integer columns are clamped and bucketed in integers (Analysis.integer_values,
from the engine's zero-row type probe): PostgreSQL returns exactly the cells the NUMERIC SQL
returns, for values below, inside and above the bounds, NULLs, and every column width.

Deterministic: the same rows, the same salt, two SQL texts; the cells must be equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.group_keys import value_types
from dpsql.execute.private_sql import integer_values
from dpsql.session import SessionContext
from dpsql.sql.rewrite import private_query
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

COLUMNS = {
    "g": {"type": "integer", "keys": [0, 1, 2]},
    "x": {"type": "integer", "bounds": [0, 10]},  # 11 buckets of 1
    "y": {"type": "integer", "bounds": [-5, 1000]},  # k = 1024 / 1006: width_bucket
    "s": {"type": "integer", "bounds": [10, 60]},  # k = 2 per unit of s (grid [10, 60) x 100)
    "n": {"type": "integer", "bounds": [0, 10]},  # NUMERIC upstream: stays NUMERIC
}
QUERIES = [
    "SELECT MEDIAN(x) FROM q",
    "SELECT g, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY y) FROM q GROUP BY g",
    "SELECT MIN(s), MAX(s), MEDIAN(x) FROM q",
    "SELECT g, MEDIAN(n), MEDIAN(x) FROM q GROUP BY g",
]


@pytest.fixture(scope="module")
def qengine(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[Engine]:
    dsn = make_db("typed")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE q (uid integer, g integer, x integer, y bigint, s smallint, n numeric)"
        )
        conn.execute(
            """INSERT INTO q
               SELECT i % 97, i % 3,
                      CASE WHEN i % 13 = 0 THEN NULL ELSE (i * 7) % 17 - 3 END,
                      (i * 31) % 1200 - 50, (i * 11) % 80, ((i * 5) % 14)::numeric - 2
               FROM generate_series(1, 3000) i"""
        )
    pf = make_policy(
        "typed",
        base={"version": 1},
        tables={"public.q": private_table("uid", COLUMNS, rows=5, groups=2)},
        analysts={"a": {"budget": {"epsilon": 1000, "delta": 0.1}}},
    )
    e = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


@pytest.mark.parametrize("sql", QUERIES)
def test_integer_quantiles_give_the_numeric_cells(qengine: Engine, sql: str) -> None:
    p = qengine.prepare(sql)
    a = qengine.plan(p, SessionContext(analyst="a")).analysis
    typed = qengine.private_sql(p, a)
    assert 'CASE WHEN "q".' in typed and 'WHEN "q"."n"' not in typed, typed
    numeric = private_query(dataclasses.replace(a, integer_values=()), "s4lt").sql("postgres")
    ints = integer_values(value_types(qengine, p, a))
    assert ints and not any("n" in t.replace('"q"', "") for t in ints), ints  # n is NUMERIC
    integer_a = dataclasses.replace(a, integer_values=ints)
    integer = private_query(integer_a, "s4lt").sql("postgres")
    assert integer != numeric
    got = qengine.backend.run(integer, private=True).rows
    want = qengine.backend.run(numeric, private=True).rows
    assert sorted(map(repr, got)) == sorted(map(repr, want))
    assert len(want) > 3

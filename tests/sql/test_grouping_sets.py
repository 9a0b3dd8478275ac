"""GROUP BY ROLLUP / CUBE / GROUPING SETS on a real PostgreSQL: shapes, budget, EXPLAIN, refusals.

With noise switched off (tests.helpers.noiseless) and data that contribution bounding leaves
untouched (one row per unit, values inside the declared bounds, every declared key present),
dpsql's answer must be PostgreSQL's own answer to the same statement: the same rows (NULLs in the
rolled-up columns, GROUPING() values), the same column names and types.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.policy.model import Policy
from dpsql.session import SessionContext
from dpsql.sql.grouping_sets import SetsPlan
from tests.helpers import noiseless

POLICY: dict[str, Any] = {
    "version": 1,
    "dataset": "grouping",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    "tables": {
        "public.sales": {
            "privacy_unit": "uid",
            "max_rows_per_unit": 1,
            "max_groups_per_unit": 1,
            "columns": {
                "uid": {"type": "integer", "identifier": True},
                "cat": {"type": "text", "keys": ["a", "b", "c"]},
                "reg": {"type": "text", "keys": ["n", "s"]},
                "shop": {"type": "text"},  # no declared keys: partition selection
                "day": {"type": "date"},
                "amt": {"type": "numeric", "bounds": [0, 100]},
                "qty": {"type": "integer", "bounds": [0, 10]},
            },
        }
    },
    "analysts": {"analyst": {"budget": {"epsilon": 100, "delta": 1e-3}}},
}

LOAD = """
CREATE TABLE sales (uid integer, cat text, reg text, shop text, day date, amt numeric, qty integer);
INSERT INTO sales
SELECT u, (ARRAY['a','b','c'])[1 + u % 3], (ARRAY['n','s'])[1 + (u / 3) % 2],
       'shop' || (u % 4), DATE '2024-01-01' + (u % 50), (u * 37) % 100, u % 11
FROM generate_series(1, 600) u;
"""


@pytest.fixture(scope="module")
def sales_dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("grouping")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LOAD)
    return dsn


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.model_validate(POLICY)


@pytest.fixture(scope="module")
def exact(policy: Policy, sales_dsn: str) -> Iterator[Engine]:
    e = noiseless(Engine(policy, sales_dsn, pool_size=2))
    yield e
    e.close()


def session(**kw: Any) -> SessionContext:
    s = SessionContext(analyst="analyst")
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def ask(engine: Engine, sql: str, **kw: Any):  # type: ignore[no-untyped-def]
    return engine.execute(engine.prepare(sql), session(**kw))


def postgres(dsn: str, sql: str) -> tuple[list[tuple[Any, ...]], list[tuple[str, int]]]:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql)
        assert cur.description is not None
        cols = [(d.name, d.type_code) for d in cur.description]
        return cur.fetchall(), cols


def _norm(v: Any) -> Any:
    if isinstance(v, float | Decimal):
        return round(float(v), 6)
    return v


def same_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> bool:
    return Counter(tuple(map(_norm, r)) for r in got) == Counter(
        tuple(map(_norm, r)) for r in want
    )


SHAPES = [
    "SELECT cat, reg, COUNT(*), SUM(amt) FROM sales GROUP BY ROLLUP (cat, reg)",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY CUBE (cat, reg)",
    "SELECT cat, reg, COUNT(*), SUM(qty) FROM sales GROUP BY GROUPING SETS ((cat, reg), (cat), ())",
    "SELECT cat, reg, shop, COUNT(*) FROM sales GROUP BY cat, ROLLUP (reg, shop)",
    "SELECT cat, reg, COUNT(*), GROUPING(cat, reg) AS g, GROUPING(reg) FROM sales "
    "GROUP BY ROLLUP (cat, reg)",
    "SELECT shop, COUNT(*), AVG(amt) FROM sales GROUP BY ROLLUP (shop)",
    "SELECT cat, COUNT(*) FROM sales GROUP BY GROUPING SETS ((cat), (cat), ())",
    "SELECT cat, COUNT(*) FROM sales GROUP BY DISTINCT GROUPING SETS ((cat), (cat), ())",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY ROLLUP (cat), ROLLUP (reg)",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY GROUPING SETS (cat, ROLLUP (reg), ())",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY ROLLUP ((cat, reg))",
    "SELECT cat AS c, COUNT(*) AS n FROM sales GROUP BY ROLLUP (1) HAVING COUNT(*) > 250 "
    "ORDER BY n DESC",
    "SELECT COALESCE(cat, 'All') AS cat, reg, COUNT(*) AS n FROM sales "
    "GROUP BY ROLLUP (cat, reg) ORDER BY GROUPING(cat, reg), 1, 2 LIMIT 4",
    "SELECT date_trunc('month', day) AS m, cat, COUNT(*) FROM sales "
    "GROUP BY ROLLUP (date_trunc('month', day), cat)",
    "SELECT cat, COUNT(*) FROM sales WHERE amt > 50 GROUP BY ROLLUP (cat) "
    "HAVING GROUPING(cat) = 1 OR COUNT(*) > 0",
    'SELECT "t"."cat", "t"."n" FROM (SELECT cat, COUNT(*) AS "n" FROM sales '
    'GROUP BY ROLLUP (cat)) AS "t" ORDER BY "t"."n" LIMIT 1000',
    "SELECT cat, reg, COUNT(*), GROUPING(cat) FROM sales GROUP BY cat, reg",
]


@pytest.mark.parametrize("sql", SHAPES)
def test_shape_is_postgresql(sql: str, exact: Engine, sales_dsn: str) -> None:
    got = ask(exact, sql)
    want, cols = postgres(sales_dsn, sql)
    assert [(c.name, c.type_oid) for c in got.columns] == cols
    if "ORDER BY" in sql:
        assert [tuple(map(_norm, r)) for r in got.rows] == [tuple(map(_norm, r)) for r in want]
    assert same_rows(got.rows, want), (got.rows, want)
    described = exact.describe(exact.prepare(sql), session())
    assert [(c.name, c.type_oid) for c in described] == cols

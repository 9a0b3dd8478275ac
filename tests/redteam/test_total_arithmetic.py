"""Row-level arithmetic made total (dpsql/sql/rewrite/make_total.py) never raises, for any value
a column can hold, and gives PostgreSQL's own value (and scale) wherever PostgreSQL does not fail.

A sweep over NUMERIC's boundary values: 0, the smallest (10^-16383, 16,383 decimals), the largest
magnitudes PostgreSQL stores (a 131,071-digit number), ±Infinity, NaN, NULL, values with 16,383
decimals and ordinary ones. Every pair goes through ``+ - * / %``, ``div``, and nested shapes
(a product of four, a quotient of quotients): the total form runs over the whole table in one
statement and must not fail; each pair's value, where PostgreSQL's own expression succeeds and
no value reaches the clamp (every intermediate within 10^1000 in magnitude), must be
PostgreSQL's value as text (the same digits and the same scale). Deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlglot

from dpsql.policy.tables import Column
from dpsql.sql.rewrite.make_total import make_total

NUMERIC_VALUES = [
    "0", "1", "-1", "1.37", "-2.5", "3", "0.1",
    "1e-16383", "-1e-16383", "round(1.5, 16383)", "round(-7.25, 16383)",
    "1e1000", "-1e1000", "9.99e131071", "-9.99e131071",
    "'Infinity'", "'-Infinity'", "'NaN'", "NULL",
]  # fmt: skip
SHAPES = [
    "a + b", "a - b", "a * b", "a / b", "a % b", "div(a, b)", "-a * b", "a * b * a * b",
    "(a / b) / (b / a)", "a * 1.5 - b / 7", "(a + b) * (a - b) / 3",
]  # fmt: skip
# where no operand or intermediate value passes the clamp (10^1000): operands of at most 10^200
# in magnitude, 0 or at least 10^-200 (a quotient of quotients stays below 10^800)
WITHIN = " AND ".join(f"abs({x}) <= 1e200 AND ({x} = 0 OR abs({x}) >= 1e-200)" for x in ("a", "b"))


@pytest.fixture(scope="module")
def conn(make_db: Callable[[str], str]) -> Iterator[Any]:
    dsn = make_db("total_arithmetic")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE v (k int, x numeric)")
        for k, x in enumerate(NUMERIC_VALUES):
            c.execute(f"INSERT INTO v VALUES ({k}, {x}::numeric)")
        c.execute(
            "CREATE TABLE pairs AS SELECT v1.k * 100 + v2.k AS k, v1.x AS a, v2.x AS b"
            " FROM v v1, v v2"
        )
        yield c


def _total(shape: str) -> str:
    return make_total(sqlglot.parse_one(shape, read="postgres")).sql("postgres")


@pytest.mark.parametrize("shape", SHAPES)
def test_total_numeric_arithmetic_never_fails_and_is_postgresql_value(
    conn: Any, shape: str
) -> None:
    total = _total(shape)
    rows = conn.execute(f"SELECT k, ({total})::text FROM pairs").fetchall()
    assert len(rows) == len(NUMERIC_VALUES) ** 2  # the whole sweep ran, no row failed
    got = dict(rows)
    keys = [k for (k,) in conn.execute(f"SELECT k FROM pairs WHERE {WITHIN}").fetchall()]
    compared = 0
    for k in keys:
        try:
            with conn.transaction():
                guarded = shape.replace("/ b", "/ NULLIF(b, 0)").replace("% b", "% NULLIF(b, 0)")
                guarded = guarded.replace("div(a, b)", "div(a, NULLIF(b, 0))")
                guarded = guarded.replace("/ (b / a)", "/ NULLIF(b / NULLIF(a, 0), 0)")
                (want,) = conn.execute(
                    f"SELECT ({guarded})::text FROM pairs WHERE k = {int(k)}"
                ).fetchone()
        except psycopg.Error:
            continue  # PostgreSQL itself fails on this row: any defined value will do
        compared += 1
        assert got[k] == want, (shape, k, got[k], want)
    assert compared >= 60  # 9 ordinary values, 81 pairs (fewer where PostgreSQL fails)


FLOAT_VALUES = [
    "0", "'-0'", "1", "-2.55", "0.1", "3", "1e-30", "-1e30",
    "'5e-324'", "'-5e-324'", "'2.2250738585072014e-308'", "1e-200", "1e-150", "1e-119",
    "1e150", "1e200", "'1.7976931348623157e308'", "'-1.7976931348623157e308'",
    "'Infinity'", "'-Infinity'", "'NaN'", "NULL",
]  # fmt: skip
FLOAT_SHAPES = [
    "a + b", "a - b", "a * b", "a / b", "-a * b", "abs(a) * b", "a * b * a * b",
    "(a / b) / (b / a)", "a * 1.5 - b / 7", "(a + b) * (a - b) / 3", "a * 1e-300 + b",
    "a * 1e300 - b", "a + 0.1", "a * 2 + n", "a / i",
]  # fmt: skip
SINGLE = {"a + b", "a - b", "a * b", "a / b", "a + 0.1"}  # infinities and NaN kept as they are
# a literal past 1e150 or below 1e-150 is made safe too (1e-300 reads as 0): totality only
TOTAL_ONLY = {"a * 1e-300 + b", "a * 1e300 - b"}
# where no value reaches the clamp or the snap: 0, or magnitudes in [1e-30, 1e30]
ORDINARY = " AND ".join(f"({x} = 0 OR abs({x}) BETWEEN 1e-30 AND 1e30)" for x in ("a", "b"))
SPECIAL = "(a IN ('Infinity', '-Infinity', 'NaN') AND abs(b) BETWEEN 1e-30 AND 1e30)"


@pytest.fixture(scope="module")
def float_pairs(conn: Any) -> Any:
    conn.execute("CREATE TABLE fv (k int, x float8)")
    for k, x in enumerate(FLOAT_VALUES):
        conn.execute(f"INSERT INTO fv VALUES ({k}, {x}::float8)")
    conn.execute(
        "CREATE TABLE fpairs AS SELECT v1.k * 100 + v2.k AS k, v1.x AS a, v2.x AS b,"
        " 1.25::numeric AS n, 4 AS i FROM fv v1, fv v2"
    )
    return conn


@pytest.mark.parametrize("shape", FLOAT_SHAPES)
def test_total_float8_arithmetic_never_fails_and_is_postgresql_value(
    float_pairs: Any, shape: str
) -> None:
    """The float8 path (dpsql/sql/rewrite/total_float.py): no row of the sweep (every finite
    extreme, subnormals, ±0, ±Infinity, NaN, NULL) makes it fail; every ordinary pair gives
    PostgreSQL's own float8 text (f + 0.1 is -2.4499999999999997), infinities and NaN too for
    one operation (a negative zero may read 0)."""
    conn = float_pairs
    columns = {
        "a": Column(type="float8"), "b": Column(type="float8"), "n": Column(type="numeric"),
        "i": Column(type="integer"),
    }  # fmt: skip
    total = make_total(sqlglot.parse_one(shape, read="postgres"), columns).sql("postgres")
    rows = conn.execute(f"SELECT k, ({total})::text FROM fpairs").fetchall()
    assert len(rows) == len(FLOAT_VALUES) ** 2  # the whole sweep ran, no row failed
    if shape in TOTAL_ONLY:
        return
    got = dict(rows)
    where = f"({ORDINARY}) OR {SPECIAL}" if shape in SINGLE else ORDINARY
    keys = [k for (k,) in conn.execute(f"SELECT k FROM fpairs WHERE {where}").fetchall()]
    compared = 0
    for k in keys:
        guarded = shape.replace("/ b", "/ NULLIF(b, 0)").replace("/ (b / a)", "/ NULLIF(b / a, 0)")
        guarded = guarded.replace("a / i", "a / NULLIF(i, 0)")
        try:
            with conn.transaction():
                (want,) = conn.execute(
                    f"SELECT ({guarded})::text FROM fpairs WHERE k = {int(k)}"
                ).fetchone()
        except psycopg.Error:
            continue  # PostgreSQL itself fails on this row
        compared += 1
        zero = {"0", "-0"}  # the snap reads a negative zero as 0 (they compare equal)
        assert got[k] == want or {got[k], want} <= zero, (shape, k, got[k], want)
    assert compared >= 40

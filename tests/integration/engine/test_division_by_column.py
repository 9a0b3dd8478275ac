"""Division by a column whose declared range excludes 0 (``amount / quantity``, quantity in
[1, 10]; ``NULLIF(quantity, 0)`` of whole numbers) is bounded by interval arithmetic and answered
(was 42501 "can't be bounded"); the SQL PostgreSQL runs clamps the divisor into its bounds where
it is read, so a stored 0 or 1,000 can't leave the range the sensitivity assumes."""

from __future__ import annotations

import psycopg

from dpsql.engine import Engine
from dpsql.execute.prepared import PrivateQuery
from dpsql.session import SessionContext

DIVISOR_CLAMPED = (
    'NUMERIC_SMALLER(NUMERIC_LARGER(CAST("purchases"."quantity" AS DECIMAL), '
    "CAST(1 AS DECIMAL)), CAST(10 AS DECIMAL))"
)


def test_sum_and_avg_of_a_quotient(exact_engine: Engine, demo_dsn: str) -> None:
    s = SessionContext(analyst="analyst")
    sql = "SELECT SUM(amount::float / NULLIF(quantity, 0)), AVG(amount / quantity) FROM purchases"
    p = exact_engine.prepare(sql)
    total, avg = exact_engine.execute(p, s).rows[0]
    with psycopg.connect(demo_dsn) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM purchases").fetchone() or (0,)
    assert 0 < float(total) <= 500 * rows and 0 < float(avg) <= 500
    assert isinstance(p, PrivateQuery)
    text = exact_engine.private_sql(p, exact_engine.plan(p, s).analysis)
    assert text.count(DIVISOR_CLAMPED) >= 2  # in both quotients

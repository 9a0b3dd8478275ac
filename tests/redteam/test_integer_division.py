"""Integer division keeps PostgreSQL's truncation when its operands are compound expressions.

make_total rewrites bottom-up, so the operands of ``quantity / (quantity - 5)`` were already
NUMERIC when the division was looked at: it lost its ``TRUNC`` and divided exactly, giving keys
and filters PostgreSQL would not (-0.25 instead of 0). Checked against PostgreSQL itself.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import sqlglot

from dpsql.sql.rewrite.make_total import make_total

EXPRS = (
    "quantity / (quantity - 5)",
    "(quantity + 1) / (quantity * 2)",
    "-quantity / abs(quantity - 3)",
    "quantity / (quantity - 5) / 2",
    "(quantity * 7) / 4 + quantity / 3",
    "amount / (quantity - 5)",  # numeric: PostgreSQL's own numeric quotient (its digits)
    "amount * 1.5 - quantity / 7.0",
)


def _guard_division(n: sqlglot.exp.Expression) -> sqlglot.exp.Expression:
    """PostgreSQL's own expression, with x / 0 as NULL (as make_total makes it)."""
    if isinstance(n, sqlglot.exp.Div):
        zero = sqlglot.exp.Literal.number(0)
        n.set("expression", sqlglot.exp.Nullif(this=n.expression, expression=zero))
    return n


@pytest.mark.parametrize("expr", EXPRS)
def test_division_matches_postgresql(expr: str, demo_dsn: str, demo_policy: Any) -> None:
    columns = demo_policy.private_table("public.purchases").columns
    tree = sqlglot.parse_one(expr, read="postgres")
    total = make_total(tree, columns).sql("postgres")
    guarded = sqlglot.parse_one(expr, read="postgres").transform(
        lambda n: (
            n.set(
                "expression",
                sqlglot.exp.Nullif(this=n.expression, expression=sqlglot.exp.Literal.number(0)),
            )
            or n  # type: ignore[func-returns-value]
            if isinstance(n, sqlglot.exp.Div)
            else n
        )
    )
    with psycopg.connect(demo_dsn) as conn:
        q = (
            f"SELECT count(*) FROM (SELECT ({guarded.sql('postgres')}) AS a, ({total}) AS b "
            "FROM purchases) t WHERE a::text IS DISTINCT FROM b::text"
        )
        (differ,) = conn.execute(q).fetchone()  # type: ignore[misc]
    assert differ == 0, (expr, total)


def test_bigint_division_truncates_exactly(demo_dsn: str) -> None:
    """The integer quotient of int8 extremes: 2^63 - 1 over 2^62 is 1 (a NUMERIC quotient
    rounded to PostgreSQL's 16 significant digits is 2.0000000000000000, TRUNC 2)."""
    tree = sqlglot.parse_one("CAST(a AS BIGINT) / CAST(b AS BIGINT)", read="postgres")
    total = make_total(tree).sql("postgres")
    values = "(9223372036854775807, 4611686018427387904), (-9223372036854775808, -1),"
    values += " (9223372036854775806, 9223372036854775807), (-7, 2), (7, 0)"
    with psycopg.connect(demo_dsn) as conn:
        rows = conn.execute(
            f"SELECT ({total})::text, CASE WHEN b <> 0 AND NOT (a = -9223372036854775808 AND"
            f" b = -1) THEN (a::bigint / b::bigint)::text END FROM (VALUES {values}) v(a, b)"
        ).fetchall()
    assert rows[0] == ("1", "1") and rows[3] == ("-3", "-3"), rows
    assert all(got == want for got, want in rows if want is not None), rows
    assert rows[1][0] == "9223372036854775807" and rows[4][0] is None  # clamped; x / 0 is NULL

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
    "amount / (quantity - 5)",  # numeric: exact division, no TRUNC (PostgreSQL keeps fewer
    # digits of a numeric quotient: compared to 12 decimals)
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
            "FROM purchases) t WHERE round(a, 12) IS DISTINCT FROM round(b, 12)"
        )
        (differ,) = conn.execute(q).fetchone()  # type: ignore[misc]
    assert differ == 0, (expr, total)

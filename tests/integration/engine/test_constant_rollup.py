"""A constant grouping key in ROLLUP/CUBE/GROUPING SETS is NULL on the rows that roll it up.

PostgreSQL gives ``NULL`` for a grouping column outside the current grouping set, also when the
key is a constant (``SELECT 'x' AS k, COUNT(*) ... GROUP BY ROLLUP (1)``); dpsql showed the
constant on the grand-total row. Compared with PostgreSQL with noise switched off.
"""

from __future__ import annotations

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from tests.integration.engine.test_grouping_sets import (  # noqa: F401 (fixtures)
    _norm,
    ask,
    exact,
    postgres,
    sales_dsn,
    same_rows,
)

SHAPES = [
    "SELECT 'x' AS k, COUNT(*) FROM sales GROUP BY ROLLUP (1)",
    "SELECT cat, 1 AS one, COUNT(*) FROM sales GROUP BY ROLLUP (cat, 2)",
    "SELECT 'x' AS k, cat, COUNT(*) FROM sales GROUP BY CUBE (1, cat)",
    "SELECT 'x' AS k, cat, COUNT(*), GROUPING(cat) FROM sales "
    "GROUP BY GROUPING SETS ((1, cat), (cat), ())",
    "SELECT cat, COUNT(*) FROM sales GROUP BY ROLLUP (cat)",
]


@pytest.mark.parametrize("sql", SHAPES)
def test_constant_key_is_null_where_rolled_up(sql: str, exact: Engine, sales_dsn: str) -> None:  # noqa: F811
    got = ask(exact, sql)
    want, cols = postgres(sales_dsn, sql)
    assert [(c.name, c.type_oid) for c in got.columns] == cols
    assert same_rows(got.rows, want), (got.rows, want)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM sales GROUP BY ROLLUP ('x')",
        "SELECT COUNT(*) FROM sales GROUP BY 'x'",
        "SELECT cat, COUNT(*) FROM sales GROUP BY cat, 1.5",
    ],
)
def test_non_integer_constant_key_is_refused_as_postgresql(
    sql: str,
    exact: Engine,  # noqa: F811
    sales_dsn: str,  # noqa: F811
) -> None:
    with pytest.raises(psycopg.Error) as pg:
        postgres(sales_dsn, sql)
    with pytest.raises(DpsqlError) as e:
        ask(exact, sql)
    assert e.value.sqlstate == pg.value.sqlstate == "42601"
    assert str(e.value) == "non-integer constant in GROUP BY"

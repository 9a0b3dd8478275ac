"""Derived tables whose merge would change PostgreSQL's row count are refused (0A000).

``SELECT COUNT(*) FROM (SELECT generate_series(1, 3) AS g FROM t) s`` counts three rows per row of
``t`` in PostgreSQL; flattening the derived table dropped the unreferenced set-returning function
and counted one. ``FOR UPDATE`` inside a derived table was dropped the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot

from dpsql.errors import UnsupportedSql
from dpsql.sql.analyze import analyze

REFUSED = [
    ("SELECT COUNT(*) FROM (SELECT generate_series(1, quantity) AS g FROM purchases) t",
     "generate_series"),
    ("SELECT SUM(amount) FROM (SELECT amount, unnest(ARRAY[1, 2]) AS u FROM purchases) t",
     "unnest"),
    ("WITH x AS (SELECT amount, jsonb_array_elements('[1, 2]'::jsonb) AS j FROM purchases) "
     "SELECT COUNT(*) FROM x", "jsonb_array_elements"),
    ("SELECT COUNT(*) FROM (SELECT amount FROM (SELECT amount, "
     "regexp_split_to_table(category, 'a') AS c FROM purchases) a) b", "regexp_split_to_table"),
    ("SELECT COUNT(*) FROM (SELECT amount FROM purchases FOR UPDATE) t", "FOR UPDATE"),
    ("SELECT COUNT(*) FROM (SELECT amount FROM purchases FOR SHARE) t", "FOR SHARE"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "what"), REFUSED)
def test_refused(sql: str, what: str, demo_policy: Any) -> None:
    with pytest.raises(UnsupportedSql) as e:
        analyze(sqlglot.parse_one(sql, read="postgres"), demo_policy)
    assert e.value.sqlstate == "0A000"
    assert what in str(e.value)
    assert e.value.hint


def test_plain_derived_table_still_merges(demo_policy: Any) -> None:
    sql = (
        "SELECT COUNT(*), SUM(v) FROM (SELECT amount * 2 AS v FROM purchases WHERE quantity > 1) t"
    )
    a = analyze(sqlglot.parse_one(sql, read="postgres"), demo_policy)
    assert len(a.measures) == 2

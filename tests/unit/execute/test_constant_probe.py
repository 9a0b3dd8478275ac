"""The constants probe (dpsql.execute.constant_probe) reads no table and runs nothing a public
statement may not: columns become NULLs of their types, and an expression with a subquery, a
parameter, a whole row or a function with effects is left out."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.execute.constant_probe import probe_sql

TYPES = {
    "purchases": {"amount": "numeric(10,2)", "purchased_at": "date", "category": "text"},
    "regions": {"code": "text", "name": "text"},
}


def _probe(sql: str) -> str | None:
    return probe_sql(sqlglot.parse_one(sql, read="postgres"), lambda t: TYPES.get(t, {}))


@pytest.mark.parametrize(
    ("sql", "probe"),
    [
        (
            "SELECT COUNT(*) FROM purchases WHERE amount > 'abc'",
            "SELECT CAST(NULL AS DECIMAL(10, 2)) > 'abc'",
        ),
        (
            "SELECT COUNT(*) FROM purchases p WHERE p.purchased_at > TO_DATE('xx', 'YYYY')",
            "SELECT CAST(NULL AS DATE) > TO_DATE('xx', 'YYYY'), TO_DATE('xx', 'YYYY')",
        ),
        (
            "SELECT COUNT(*) FROM purchases p JOIN regions r ON p.category = r.code "
            "WHERE r.name > 'a' AND pg_sleep(1) IS NULL",
            "SELECT CAST(NULL AS TEXT) > 'a'",
        ),
        ("SELECT COUNT(*) FROM purchases WHERE amount > $1", None),
        (
            "SELECT COUNT(*) FROM purchases WHERE category IN (SELECT code FROM regions "
            "WHERE name = 'x')",
            "SELECT CAST(NULL AS TEXT) = 'x'",  # the subquery's own constants, no table
        ),
        ("SELECT COUNT(*) FROM purchases WHERE nosuch > 'abc'", None),
        ("SELECT category, COUNT(*) FROM purchases GROUP BY 1", None),
    ],
)
def test_probe(sql: str, probe: str | None) -> None:
    got = _probe(sql)
    assert got == probe
    if got is not None:
        assert "purchases" not in got and "regions" not in got and "sleep" not in got.lower()

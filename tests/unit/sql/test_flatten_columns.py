"""A merged derived table's columns: a column the derived table does not select is refused with
the derived table's name (0A000), in FROM and when the derived table is joined; a selected one
is read as its definition."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.errors import UnsupportedSql
from dpsql.sql.flatten import flatten

MISSING = [
    "SELECT SUM(s.nope) FROM (SELECT amount FROM purchases) s",
    "SELECT r.name, COUNT(*) FROM (SELECT user_id, amount FROM purchases) p "
    "JOIN regions r ON r.code = p.region GROUP BY r.name",
]


@pytest.mark.parametrize("sql", MISSING)
def test_a_column_the_derived_table_does_not_select_is_refused(sql: str) -> None:
    with pytest.raises(UnsupportedSql) as e:
        flatten(sqlglot.parse_one(sql, read="postgres"))
    assert e.value.sqlstate == "0A000"
    assert 'does not exist in the derived table "' in str(e.value)
    assert e.value.hint == "refer to the columns the subquery selects"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT SUM(v) FROM (SELECT amount * 2 AS v FROM purchases) s",
            "SELECT SUM((amount * 2)) FROM purchases",
        ),
        (
            "SELECT r.name, SUM(p.v) FROM (SELECT user_id, amount * 2 AS v, region FROM "
            "purchases) p JOIN regions r ON r.code = p.region GROUP BY r.name",
            "SELECT r.name, SUM((p.amount * 2)) FROM purchases AS p JOIN regions AS r "
            "ON r.code = p.region GROUP BY r.name",
        ),
    ],
)
def test_a_selected_column_is_read_as_its_definition(sql: str, expected: str) -> None:
    assert flatten(sqlglot.parse_one(sql, read="postgres")).sql("postgres") == expected

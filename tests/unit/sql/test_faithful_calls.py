"""Calls sqlglot reads into another function's node go upstream as written (dpsql/sql/faithful.py):
date_part stays date_part (double precision, not EXTRACT's numeric), log10 stays log10,
json_object(keys, values) stays the PostgreSQL 15 function; the forms dpsql can't send are
refused with 0A000 before anything runs. Compared against PostgreSQL in
tests/integration/engine/test_function_fidelity.py."""

from __future__ import annotations

import pytest

from dpsql.errors import FeatureNotSupported, InvalidParameter
from dpsql.sql.parse import parse_statement


@pytest.mark.parametrize(
    ("sql", "sent"),
    [
        ("SELECT date_part('dow', ts) FROM t", "SELECT DATE_PART('dow', ts) FROM t"),
        ("SELECT extract(dow FROM ts) FROM t", "SELECT EXTRACT(DOW FROM ts) FROM t"),
        (
            "SELECT date_part('year', date_part('epoch', ts)::int::timestamp), extract(year FROM d) FROM t",
            "SELECT DATE_PART('year', CAST(CAST(DATE_PART('epoch', ts) AS INT) AS TIMESTAMP)),"
            " EXTRACT(YEAR FROM d) FROM t",
        ),
        ("SELECT date_part('dow', CURRENT_DATE)", "SELECT DATE_PART('dow', CURRENT_DATE)"),
        (
            "SELECT (SELECT date_part('dow', ts) FROM t)",
            "SELECT (SELECT DATE_PART('dow', ts) FROM t)",
        ),
        ("SELECT log10(f), log(2, f) FROM t", "SELECT LOG10(f), LOG(2, f) FROM t"),
        (
            "SELECT json_object(ARRAY['a'], ARRAY[s]) FROM t",
            "SELECT JSON_OBJECT(ARRAY['a'], ARRAY[s]) FROM t",
        ),
    ],
)
def test_calls_are_sent_as_written(sql: str, sent: str) -> None:
    assert parse_statement(sql).tree.sql("postgres") == sent  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT date_part(s, ts) FROM t", "date_part with a field that is not a string constant"),
        ("SELECT date_part($1, ts) FROM t", "date_part with a field that is not a string constant"),
        ("SELECT json_object('{a,1}')", "json_object with one argument"),
    ],
)
def test_forms_dpsql_cannot_send_are_refused(sql: str, words: str) -> None:
    with pytest.raises(FeatureNotSupported) as e:
        parse_statement(sql)
    assert words in e.value.message and e.value.hint


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT date_part('', DATE '2024-03-15')",
        "SELECT COUNT(*) FROM purchases WHERE date_part('', purchased_at) = 1",
    ],
)
def test_an_empty_date_part_field_is_postgresqls_22023(sql: str) -> None:
    """date_part('', d): PostgreSQL's 22023 'unit "" not recognized' (was an internal error,
    XX000: sqlglot raised a ValueError building the field; redteam31's sweep)."""
    with pytest.raises(InvalidParameter) as e:
        parse_statement(sql)
    assert (e.value.sqlstate, str(e.value)) == ("22023", 'unit "" not recognized')

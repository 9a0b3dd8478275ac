"""A call with more arguments than PostgreSQL's function takes is refused as PostgreSQL would
refuse it (42883), never run as something else: sqlglot drops the surplus of these functions
(``round(a, 1, 2)`` was written ``ROUND(a, 1)``) or reads them as another function (``min(a, b)``
became ``LEAST(a, b)``)."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.errors import FeatureNotSupported, SqlSyntaxError, UndefinedFunction
from dpsql.sql.arities import ARITY
from dpsql.sql.parse import parse_statement

SURPLUS = [
    ("SELECT COUNT(*), round(AVG(amount), 1, 2) FROM purchases", "round", 3),
    ("SELECT SUM(length(substring(s, 1, 2, 3))) FROM t", "substring", 4),
    ("SELECT SUM(length(substr(s, 1, 2, 3))) FROM t", "substr", 4),
    ("SELECT MIN(amount, 1) FROM purchases", "min", 2),
    ("SELECT MAX(amount, quantity) FROM purchases", "max", 2),
    ("SELECT COUNT(*) FROM t WHERE lpad(s, 3, 'x', 'y') = 'a'", "lpad", 4),
    ("SELECT date_trunc('month', d, 'UTC', 1), COUNT(*) FROM t GROUP BY 1", "date_trunc", 4),
    ("SELECT COUNT(*) FROM t WHERE mod(q, 2, 3) = 0", "mod", 3),
    ("SELECT COUNT(*) FROM t WHERE to_date(s, 'YYYY', 'x') > now()", "to_date", 3),
    ("SELECT COUNT(*) FROM t WHERE ROUND(a, (1, 2)[1], 2) > 0", "round", 3),
]


@pytest.mark.parametrize(("sql", "name", "n"), SURPLUS)
def test_surplus_arguments_refused(sql: str, name: str, n: int) -> None:
    with pytest.raises(UndefinedFunction) as e:
        parse_statement(sql)
    assert str(e.value) == f"function {name} with {n} arguments does not exist"
    most = ARITY[name][1]
    assert e.value.hint == f"{name.upper()} takes at most " + (
        f"{most} argument" + ("" if most == 1 else "s")
    )
    assert e.value.sqlstate == "42883"


def test_sqlglot_still_drops_them() -> None:
    """The twin: without the check these statements would run as something else (if sqlglot stops
    dropping surplus arguments, the check is still right: PostgreSQL refuses them)."""
    changed = 0
    for sql, _, _ in SURPLUS:
        out = sqlglot.parse_one(sql, read="postgres").sql("postgres")
        changed += "LEAST" in out or "GREATEST" in out or out.count(",") < sql.count(",")
    assert changed >= 6


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT round(AVG(amount), 1), round(SUM(amount)) FROM purchases",
        "SELECT COUNT(*) FROM t WHERE substring(s FROM 1 FOR 2) = 'ab'",
        "SELECT COUNT(*) FROM t WHERE substring(s, 1, 2) = 'ab' AND lpad(s, 3, 'x') > ''",
        "SELECT date_trunc('month', d, 'UTC'), MIN(a), MAX(a) FROM t GROUP BY 1",
        "SELECT MAX(a) OVER (PARTITION BY b, c ORDER BY d, e) FROM t",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY a, b) FROM t",
        "SELECT COUNT(*) FROM t WHERE a IN (1, 2, 3) AND ARRAY[1, 2] @> ARRAY[round(a)]",
        "SELECT length(s, 'UTF8'), mod(q, 2), to_timestamp(s, 'YYYY') FROM t",
    ],
)
def test_written_arities_pass(sql: str) -> None:
    parse_statement(sql)  # no refusal: PostgreSQL takes these


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        # a keyword of another call's grammar (IN, DISTINCT) does not stop the count
        ("SELECT string_agg(DISTINCT s) FROM t", "function string_agg with 1 argument"),
        ("SELECT round(AVG(a), 1, 2 IN (2)) FROM t", "function round with 3 arguments"),
        ("SELECT log10(a, 1 IN (1)) FROM t", "function log10 with 2 arguments"),
        ("SELECT array_agg(DISTINCT a, b) FROM t", "function array_agg with 2 arguments"),
        # the name sqlglot reads: U&"r\006Fund" is round, "ROUND" is not
        ('SELECT U&"r\\006Fund"(AVG(a), 1, 2) FROM t', "function round with 3 arguments"),
        ('SELECT U&"\\0069fnull"(a, 1) FROM t', "function ifnull does not exist"),
        ('SELECT "ROUND"(AVG(a), 1) FROM t', 'function "ROUND" does not exist'),
    ],
)
def test_calls_sqlglot_would_change_are_refused(sql: str, message: str) -> None:
    """Each ran as another statement (sqlglot dropped or filled an argument, or called round
    for "ROUND"); PostgreSQL refuses each with 42883."""
    with pytest.raises(UndefinedFunction) as e:
        parse_statement(sql)
    assert str(e.value).startswith(message)
    assert e.value.sqlstate == "42883"


def test_keyword_forms_take_no_comma() -> None:
    """position('b', s IN ('x')) ran (sqlglot read it as a call of two arguments): the IN
    beside the comma made it look like position(a IN b)."""
    with pytest.raises(SqlSyntaxError) as e:
        parse_statement("SELECT COUNT(*) FROM t WHERE position('b', s IN ('x')) > 0")
    assert (str(e.value), e.value.sqlstate) == ('syntax error at or near ","', "42601")


def test_a_call_left_open_is_refused() -> None:
    """sqlglot closes string_agg(s FROM t itself (it ran as STRING_AGG(s, ',') FROM t)."""
    twin = sqlglot.parse_one("SELECT string_agg(s FROM t", read="postgres").sql("postgres")
    assert twin == "SELECT STRING_AGG(s, ',') FROM t"
    with pytest.raises(SqlSyntaxError) as e:
        parse_statement("SELECT string_agg(s FROM t")
    assert (str(e.value), e.value.sqlstate) == ("syntax error at end of input", "42601")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t WHERE position('b' IN s) > 0 AND trim(BOTH 'x' FROM s) = ''",
        "SELECT COUNT(*) FROM t WHERE overlay(s PLACING 'x' FROM 1 FOR 2) = 'ab'",
        "SELECT COUNT(*) FROM t WHERE EXTRACT(year FROM d) = 2024 AND coalesce(a IN (1), true)",
        "SELECT SUM(DISTINCT a), string_agg(DISTINCT s, ',') FROM t",
        'SELECT "round"(AVG(a), 1) FROM t',
        # a quoted name with a column list: an alias, not a call
        'WITH "Sum"(x) AS (SELECT 1) SELECT x FROM "Sum"',
        'SELECT COUNT(*) FROM t "Round"(a, b)',
        'SELECT COUNT(*) FROM (SELECT 1, 2) "Round"(a, b)',
    ],
)
def test_grammar_forms_still_pass(sql: str) -> None:
    parse_statement(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t WHERE s LIKE ('a%')",
        "SELECT COUNT(*) FROM t WHERE s NOT LIKE ('a' || '%')",
        "SELECT 'abc' LIKE ('a%')",
        "SELECT COUNT(*) FROM t WHERE (d, e) OVERLAPS (f, g)",
        "SELECT (DATE '2025-01-01', DATE '2025-02-01') OVERLAPS (DATE '2025-01-15', DATE '2025-03-01')",
    ],
)
def test_an_infix_keyword_before_a_bracket_is_no_call(sql: str) -> None:
    """``s LIKE ('a%')`` and ``(a, b) OVERLAPS (c, d)`` were refused as calls of like with 1
    argument and overlaps with 2 (42883, sqlglot's words; redteam30): after an operand the
    keyword is PostgreSQL's operator, and only ``like(`` opening an expression is a call."""
    parse_statement(sql)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT like('abc') FROM t", "function like with 1 argument"),
        ("SELECT COUNT(*) FROM t WHERE NOT like('a')", "function like with 1 argument"),
        ("SELECT overlaps(d, e) FROM t", "function overlaps with 2 arguments"),
    ],
)
def test_the_calls_of_those_keywords_are_still_counted(sql: str, message: str) -> None:
    with pytest.raises(UndefinedFunction) as e:
        parse_statement(sql)
    assert str(e.value).startswith(message)


def test_the_function_form_of_like_is_refused() -> None:
    """``like('abc', 'a%')`` is true in PostgreSQL (like(string, pattern)); sqlglot reads it as
    SQLite's like(pattern, string) and dpsql sent ``'a%' LIKE 'abc'``: false, and over a private
    column ``like('b%', category)`` (true for no row: 'b%' is no category) ran as
    ``category LIKE 'b%'`` and counted the books (redteam30). Refused, with the operator form."""
    twin = sqlglot.parse_one("SELECT like('abc', 'a%')", read="postgres").sql("postgres")
    assert twin == "SELECT 'a%' LIKE 'abc'"  # the twin: sqlglot still swaps them
    for sql, hint in [
        ("SELECT like('abc', 'a%')", "write the operator: 'abc' LIKE 'a%'"),
        ("SELECT COUNT(*) FROM t WHERE like('b%', s)", "write the operator: 'b%' LIKE s"),
        ("SELECT COUNT(*) FROM t WHERE NOT like(s, 'b%')", "write the operator: s LIKE 'b%'"),
    ]:
        with pytest.raises(FeatureNotSupported) as e:
            parse_statement(sql)
        assert (e.value.sqlstate, e.value.hint) == ("0A000", hint)

"""What the analyzer accepts, what it refuses, and with which SQLSTATE."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.demo import POLICY
from dpsql.errors import DpsqlError
from dpsql.execute.classify import classify
from dpsql.policy import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.parse import parse_statement, split_statements

policy = load_policy(POLICY)


def run(sql: str):  # type: ignore[no-untyped-def]
    st = parse_statement(sql)
    assert st.tree is not None
    assert classify(st.tree, policy) == "private"
    return analyze(st.tree, policy)


ACCEPTED = [
    "SELECT COUNT(*) FROM purchases",
    "SELECT COUNT(amount), COUNT(DISTINCT user_id), SUM(amount), AVG(amount) FROM purchases",
    "SELECT VAR_POP(amount), VAR_SAMP(quantity), VARIANCE(amount), STDDEV(amount), "
    "STDDEV_POP(amount), STDDEV_SAMP(amount) FROM purchases",
    "SELECT category, COUNT(*) AS n FROM purchases GROUP BY category HAVING COUNT(*) > 10 "
    "ORDER BY n DESC LIMIT 3",
    "SELECT category AS c, SUM(amount) / COUNT(*) FROM purchases GROUP BY 1",
    "SELECT COUNT(*) FROM purchases WHERE amount BETWEEN 1 AND 20 AND NOT (quantity IN (1, 2)) "
    "OR category LIKE 'b%' OR purchased_at IS NULL",
    "SELECT SUM(CASE WHEN category = 'books' THEN amount ELSE 0 END) FROM purchases",
    "SELECT SUM(amount * quantity) FROM purchases",
    "SELECT purchased_at, COUNT(*) FROM purchases GROUP BY purchased_at",
    "SELECT ROUND(AVG(amount), 2) AS a FROM purchases p WHERE p.quantity > 1",
    "SELECT COUNT(*) FROM purchases WHERE email IS NULL",
    "SELECT COUNT(*) FROM purchases WHERE quantity > $1",
    "SELECT COUNT(*) FROM purchases JOIN regions ON region = code",
    "SELECT r.name, SUM(p.amount) FROM purchases p JOIN regions r ON p.region = r.code GROUP BY 1",
    "SELECT COUNT(*) FROM purchases p JOIN pums u ON p.user_id = u.pid",
    "WITH t AS (SELECT amount * quantity AS v FROM purchases) SELECT SUM(v) FROM t",
    'SELECT "t"."n" FROM (SELECT COUNT(*) AS "n" FROM purchases) AS "t" LIMIT 10',
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_accepted(sql: str) -> None:
    a = run(sql)
    assert a.statistics


REFUSED = [
    ("SELECT * FROM purchases", "42501"),
    ("SELECT amount FROM purchases", "42501"),
    ("SELECT email, COUNT(*) FROM purchases GROUP BY email", "42501"),
    ("SELECT user_id FROM purchases GROUP BY user_id", "42501"),
    ("SELECT COUNT(*) FROM purchases WHERE email = 'user1@example.com'", "42501"),
    ("SELECT COUNT(*) FROM purchases WHERE user_id IN (1, 2)", "42501"),
    ("SELECT SUM(user_id) FROM purchases", "42501"),
    ("SELECT SUM(id) FROM purchases", "42501"),
    ("SELECT array_agg(amount) FROM purchases", "42501"),
    ("SELECT string_agg(email, ',') FROM purchases", "42501"),
    ("SELECT SUM(amount / (quantity - 5)) FROM purchases", "42501"),  # the divisor may be 0
    ("SELECT AVG(purchased_at) FROM purchases", "42883"),  # PostgreSQL has no avg(date)
    ("SELECT amount FROM purchases ORDER BY amount LIMIT 1", "42501"),
    ("SELECT DISTINCT category FROM purchases", "42501"),
    ("SELECT COUNT(*) OVER () FROM purchases", "42501"),
    ("SELECT MIN(email) FROM purchases", "42501"),
    ("SELECT COUNT(*) FROM purchases WHERE amount > (SELECT 1)", "0A000"),
    ("SELECT COUNT(*) FROM purchases WHERE pg_sleep(1) IS NULL", "0A000"),
    ("SELECT COUNT(*) FROM purchases WHERE CAST(category AS INT) > 1", "0A000"),
    ("SELECT AVG(DISTINCT amount) FROM purchases", "0A000"),
    ("SELECT COUNT(nope) FROM purchases", "42703"),
]


@pytest.mark.parametrize(("sql", "state"), REFUSED)
def test_refused(sql: str, state: str) -> None:
    with pytest.raises(DpsqlError) as e:
        run(sql)
    assert e.value.sqlstate == state, e.value
    assert e.value.hint or state == "42703"


@pytest.mark.parametrize(
    ("sql", "state"),
    [
        ("SELECT * FROM nope", "42P01"),
        ("DELETE FROM purchases", "25006"),
        ("DROP TABLE purchases", "25006"),
        ("COPY purchases TO STDOUT", "0A000"),
        ("SELECT FROM WHERE", "42601"),
        ("SELECT 1; SELECT 2", "42601"),
    ],
)
def test_refused_before_analysis(sql: str, state: str) -> None:
    with pytest.raises(DpsqlError) as e:
        st = parse_statement(sql)
        assert st.tree is not None
        classify(st.tree, policy)
    assert e.value.sqlstate == state


def test_split_respects_quotes_and_comments() -> None:
    assert split_statements("select ';'; -- x;\nselect $$a;b$$;") == [
        "select ';'",
        "select $$a;b$$",
    ]


def test_sensitivity_from_policy() -> None:
    a = run("SELECT category, SUM(amount) FROM purchases GROUP BY category")
    (m,) = a.measures
    assert (m.kind, m.lo, m.hi) == ("sum", 0, 500)
    # the demo policy chooses R, G and the clamp per query (auto): 1 until chosen
    assert a.private.auto_rows and a.private.auto_groups and a.max_rows == a.max_groups == 1
    assert not a.needs_selection
    assert run("SELECT amount, COUNT(*) FROM purchases GROUP BY 1").needs_selection
    # a bounded integer's whole numbers (at most 1,000: bi26) and a bounded date's days are
    # keys (Metabase's day: bi25)
    q = run("SELECT quantity, COUNT(*) FROM purchases GROUP BY 1")
    assert not q.needs_selection and q.group_keys[0].keys == tuple(str(i) for i in range(1, 11))
    assert not run("SELECT purchased_at, COUNT(*) FROM purchases GROUP BY 1").needs_selection


def test_interval_arithmetic_bounds_products() -> None:
    (m,) = run("SELECT SUM(amount * quantity) FROM purchases").measures
    assert (m.lo, m.hi) == (0, 5000)


def test_parse_tree_not_mutated_by_analysis() -> None:
    tree = sqlglot.parse_one("SELECT AVG(amount) FROM purchases", read="postgres")
    before = tree.sql()
    analyze(tree, policy)
    assert tree.sql() == before


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT g::regclass::text FROM generate_series(16384, 17000) g",
        "SELECT obj_description(16390)",
        "SELECT format_type(16390, NULL)",
    ],
)
def test_object_lookups_without_tables_go_through_the_catalog_filter(sql: str) -> None:
    st = parse_statement(sql)
    assert st.tree is not None
    assert classify(st.tree, policy) == "catalog"


def test_array_types_sqlglot_cannot_parse_are_respelled() -> None:
    sql_text = "SELECT t.oid FROM pg_type t WHERE t.oid = ANY($1::oid[]) AND t.typname <> 'oid[]'"
    st = parse_statement(sql_text)
    assert st.tree is not None
    sql = st.tree.sql("postgres")
    assert "_oid" in sql and "'oid[]'" in sql  # string literals are left alone


def test_output_columns_are_named_as_postgresql_names_them() -> None:
    """An aggregate's column is named by the function as written (PostgreSQL's rule):
    ``variance(x)`` is "variance", not sqlglot's VAR_SAMP; tools that read columns by name
    depend on it."""
    sql = (
        "SELECT variance(quantity), VAR_SAMP(quantity), stddev(quantity), Avg(amount), "
        "var_pop(quantity), percentile_cont(0.5) WITHIN GROUP (ORDER BY amount), COUNT(*) "
        "FROM purchases"
    )
    st = parse_statement(sql)
    assert st.tree is not None
    a = analyze(st.tree, policy)
    names = [s.alias_or_name for s in a.outer.expressions]
    assert names == [
        "variance", "var_samp", "stddev", "avg", "var_pop", "percentile_cont", "count",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("sql", "pg_type"),
    [
        ("SELECT SUM(quantity) FROM purchases", "int8"),
        # a cast to an integer type is whole whatever it casts (was numeric: 360617.25 answered);
        # PostgreSQL's SUM of a bigint is numeric (words28: was bigint here)
        ("SELECT SUM(quantity::bigint) FROM purchases", "numeric"),
        ("SELECT SUM(CAST(amount AS int)) FROM purchases", "int8"),
        ("SELECT SUM(quantity::numeric) FROM purchases", "numeric"),
        ("SELECT SUM(amount) FROM purchases", "numeric"),
        # an integer quotient truncates: its SUM is PostgreSQL's bigint (words28: was numeric)
        ("SELECT SUM(quantity / 2) FROM purchases", "int8"),
        ("SELECT SUM(quantity / 2.0) FROM purchases", "numeric"),
    ],
)
def test_sum_of_whole_numbers_is_a_whole_number(sql: str, pg_type: str) -> None:
    a = analyze(sqlglot.parse_one(sql, read="postgres"), policy)
    assert [s.pg_type for s in a.statistics] == [pg_type]


def test_a_numeric_quantile_keeps_the_digits_its_buckets_resolve() -> None:
    from dpsql.sql.postprocess import _to_resolution

    # 1,024 buckets over [0, 500]: about 0.49 wide; a tenth of a bucket is the 0.01 digit
    assert _to_resolution(370.849609375, 500.0) == 370.85
    assert _to_resolution(22216.796875, 500000.0) == 22220.0
    assert abs(_to_resolution(0.123456789, 1.0) - 0.12346) < 1e-12


def test_an_unsupported_function_names_the_date_forms_that_work() -> None:
    """newcomer26 #9: date(purchased_at) is answered now (read as purchased_at::date); a date
    function dpsql does not read (age(x)) is refused 0A000 with a hint naming the date and time
    forms that are answered, not only numeric casts."""
    with pytest.raises(DpsqlError) as e:
        run("SELECT COUNT(*) FROM purchases WHERE age(purchased_at) > INTERVAL '1 day'")
    assert e.value.sqlstate == "0A000"
    hint = e.value.hint or ""
    for form in ("x::date", "date(x)", "date_trunc('month', x)", "EXTRACT(MONTH FROM x)"):
        assert form in hint, hint
    run("SELECT COUNT(*) FROM purchases WHERE date(purchased_at) = '2025-01-02'")  # answered


def test_an_interval_cast_names_the_interval_constant() -> None:
    """newcomer27 #5: '1 mon'::interval in a private WHERE is refused 0A000; the hint named the
    allowed casts only, now also the form that is answered, INTERVAL '1 month'."""
    sql = (
        "SELECT COUNT(*) FROM purchases WHERE purchased_at >= "
        "date_trunc('month', DATE '2025-05-20') + '1 mon'::interval"
    )
    with pytest.raises(DpsqlError) as e:
        run(sql)
    assert e.value.sqlstate == "0A000"
    assert "INTERVAL '1 month' (not '1 month'::interval)" in (e.value.hint or ""), e.value.hint
    run(sql.replace("'1 mon'::interval", "INTERVAL '1 month'"))  # answered

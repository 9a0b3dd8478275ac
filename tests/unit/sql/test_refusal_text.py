"""Refusals a new user meets first say plainly why and what to write instead (dpsql/sql/refusal_text.py).

A raw column of a private table, and another query's answer read inside a private block: each
keeps its SQLSTATE; the message says why in the user's terms (their column and table, their
subquery), the hint gives a statement to write instead. The hints' statements are themselves
answered (checked by parsing and analysing them). No database.
"""

from __future__ import annotations

import pytest

from dpsql.demo import POLICY
from dpsql.errors import DpsqlError
from dpsql.policy import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.parse import parse_statement
from dpsql.sql.tree import split

POL = load_policy(POLICY)


def refusal(sql: str) -> DpsqlError:
    with pytest.raises(DpsqlError) as info:  # at parse time (COUNT(DISTINCT a, b)) or later
        tree = parse_statement(sql).tree
        assert tree is not None
        if split(tree, POL, analyze) is None:
            analyze(tree, POL)
    return info.value


def answered(sql: str) -> None:
    tree = parse_statement(sql).tree
    assert tree is not None
    if split(tree, POL, analyze) is None:
        assert analyze(tree, POL).statistics


RAW = [  # (statement, sqlstate, words of the message, the statement the hint suggests)
    # newcomer22 #26: an identifier of the JOINed table is that table's (was the first table's,
    # and a hint whose statement failed with 42703)
    ("SELECT COUNT(*) FROM purchases p JOIN pums q ON q.pid = p.user_id WHERE q.pid > 7", "42501",
     "column pid of private table pums is an identifier",
     "SELECT COUNT(*) FROM pums WHERE pid IS NOT NULL"),
    ("SELECT email FROM purchases", "42501", "email of private table purchases is an identifier",
     "SELECT COUNT(DISTINCT email) FROM purchases"),
    ("SELECT user_id FROM purchases", "42501", "user_id of private table purchases is an identifier",
     "SELECT COUNT(DISTINCT user_id) FROM purchases"),
    ("SELECT amount FROM purchases", "42501", "amount of private table purchases can't be returned row by row",
     "SELECT AVG(amount), SUM(amount), MEDIAN(amount) FROM purchases"),
    ("SELECT category FROM public.purchases ORDER BY category LIMIT 1000", "42501",
     "category of private table purchases can't be returned row by row",
     "SELECT category, COUNT(*) FROM purchases GROUP BY category"),
    ("SELECT purchased_at FROM purchases", "42501", "can't be returned row by row",
     "SELECT MIN(purchased_at), MAX(purchased_at) FROM purchases"),
    ("SELECT * FROM pums", "42501", "SELECT * would return raw rows of private table pums",
     "SELECT COUNT(*), AVG(age) FROM pums"),
    ("SELECT COUNT(*) FROM purchases WHERE user_id = 5", "42501",
     "column user_id of private table purchases is an identifier and can't be filtered on",
     "SELECT COUNT(*) FROM purchases WHERE user_id IS NOT NULL"),
    ("SELECT category, amount FROM purchases GROUP BY category", "42501",
     "amount is not a GROUP BY key of this query", None),
    ("SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON r.code = p.region", "42501",
     "name of public table regions is not a GROUP BY key", None),
    # a table preview (BI corpus #51: Superset's dataset preview; #110: an ORM's query; #41:
    # a raw-mode table chart; #86: pandas read_sql): the raw rows it asks for, with an
    # aggregate over its own columns and filter (was: its first identifier, 'count them
    # instead: SELECT COUNT(DISTINCT id)')
    ("SELECT id AS id, user_id AS user_id, email AS email, category AS category, region AS "
     "region, amount AS amount, quantity AS quantity, purchased_at AS purchased_at FROM "
     "public.purchases LIMIT 100", "42501",
     "SELECT id, user_id, email, ... would return raw rows of private table purchases",
     "SELECT category, region, COUNT(*), AVG(amount) FROM purchases GROUP BY category, region"),
    ("SELECT purchases.id, purchases.user_id, purchases.email, purchases.category FROM purchases",
     "42501", "SELECT id, user_id, email, category would return raw rows of private table purchases",
     "SELECT category, COUNT(*) FROM purchases GROUP BY category"),
    ("SELECT category AS category, region AS region, amount AS amount, purchased_at AS "
     "purchased_at FROM public.purchases LIMIT 1000", "42501",
     "SELECT category, region, amount, purchased_at would return raw rows",
     "SELECT category, region, COUNT(*), AVG(amount) FROM purchases GROUP BY category, region"),
    ("SELECT email, amount FROM purchases WHERE amount > 400", "42501",
     "SELECT email, amount would return raw rows of private table purchases",
     "SELECT COUNT(*), AVG(amount) FROM purchases WHERE amount > 400"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "state", "why", "instead"), RAW)
def test_a_raw_column_says_why_and_what_to_write(
    sql: str, state: str, why: str, instead: str | None
) -> None:
    err = refusal(sql)
    assert err.sqlstate == state, err
    assert why in err.message, err.message
    assert "public.purchases" not in err.message and "aggregate it (COUNT, SUM" not in (
        err.hint or ""
    ), err
    if instead is not None:
        assert instead in (err.hint or ""), err.hint
        answered(instead)


SUBQUERY = [  # (statement, the message's start, the hint's words)
    ("SELECT COUNT(*) FROM purchases WHERE amount > (SELECT AVG(amount) FROM purchases)",
     "WHERE amount > (SELECT AVG(amount) FROM purchases) is not supported: the rows a private "
     "query aggregates are chosen by constants and public tables only",
     "run SELECT AVG(amount) FROM purchases on its own first, then write its answer into the "
     "filter as a constant: WHERE amount > <its answer>"),
    ("SELECT COUNT(*) FROM purchases WHERE category IN (SELECT category FROM purchases GROUP BY category)",
     "WHERE category IN (SELECT category FROM purchases GROUP BY category) is not supported",
     "WHERE category IN (<its values>)"),
    ("SELECT category, COUNT(*) FROM purchases GROUP BY category HAVING COUNT(*) > (SELECT COUNT(*) / 5 FROM purchases)",
     "HAVING COUNT(*) > (SELECT COUNT(*) / 5 FROM purchases) is not supported",
     "WITH a AS (SELECT category, COUNT(*) FROM purchases GROUP BY category), b AS (SELECT "
     "COUNT(*) / 5 AS v FROM purchases) SELECT ... FROM a CROSS JOIN b WHERE ..."),
    # counting a DISTINCT list (was: 'x can't be joined here', and no join was written)
    ("SELECT COUNT(*) FROM (SELECT DISTINCT category FROM purchases WHERE amount > 10) x",
     "the subquery or CTE x lists the DISTINCT values of category in private rows",
     "count them directly: SELECT COUNT(DISTINCT category) FROM purchases WHERE amount > 10"),
    # newcomer31: DISTINCT of several columns, and a LIMIT, said 'can't be joined here' too
    ("SELECT COUNT(*) FROM (SELECT DISTINCT user_id, category FROM purchases) t",
     "the subquery or CTE t lists the DISTINCT combinations of user_id, category in private rows",
     "SELECT category, COUNT(DISTINCT user_id) FROM purchases GROUP BY category"),
    ("SELECT COUNT(*) FROM (SELECT DISTINCT category, region FROM purchases WHERE amount > 10) t",
     "the subquery or CTE t lists the DISTINCT combinations of category, region in private rows",
     "SELECT category, region, COUNT(*) FROM purchases WHERE amount > 10 GROUP BY category, region"),
    ("SELECT COUNT(*) FROM (SELECT category FROM purchases LIMIT 5) t",
     "the subquery or CTE t can't be read here", "aggregate inside it"),
    # review31: a join inside, or a column listed twice, keeps the generic words (the
    # combinations' hint read one table and dropped the JOIN; 'SELECT , COUNT(*)' for the twice)
    ("SELECT COUNT(*) FROM (SELECT DISTINCT p.user_id, r.region FROM purchases p "
     "JOIN regions r ON p.region = r.region) t",
     "the subquery or CTE t can't be read here", "aggregate inside it"),
    ("SELECT COUNT(*) FROM (SELECT DISTINCT user_id, user_id FROM purchases) t",
     "the subquery or CTE t can't be read here", "aggregate inside it"),
    ("SELECT COUNT(*), (SELECT AVG(amount) FROM purchases) FROM purchases WHERE amount > 3",
     "a subquery in the select list, (SELECT AVG(amount) FROM purchases), is not supported",
     "WITH a AS (SELECT COUNT(*) FROM purchases WHERE amount > 3), b AS (SELECT AVG(amount) AS v "
     "FROM purchases) SELECT a.*, b.v FROM a CROSS JOIN b"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "message", "hint"), SUBQUERY)
def test_another_answer_inside_a_private_block_says_why_and_what_to_write(
    sql: str, message: str, hint: str
) -> None:
    """It said "supported as a series limit only (one JOIN to one aggregate ...)" and hinted at
    a JOIN the user never wrote."""
    err = refusal(sql)
    assert err.sqlstate == "0A000", err
    assert err.message.startswith(message), err.message
    assert hint in (err.hint or ""), err.hint
    assert "series limit" not in err.message and "_dpsql" not in f"{err.message} {err.hint}"


def test_the_suggested_ctes_are_answered() -> None:
    answered(
        "WITH a AS (SELECT COUNT(*) AS n FROM purchases WHERE amount > 3), b AS (SELECT "
        "AVG(amount) AS v FROM purchases) SELECT a.*, b.v FROM a CROSS JOIN b"
    )
    answered(
        "WITH a AS (SELECT category, COUNT(*) AS n FROM purchases GROUP BY category), b AS "
        "(SELECT COUNT(*) / 5 AS v FROM purchases) SELECT a.* FROM a CROSS JOIN b WHERE n > v"
    )


MORE = [  # (statement, sqlstate, words of the message, words of the hint)
    ("SELECT MEDIAN(email) FROM purchases", "42501",
     "column email of private table purchases is an identifier and can't be aggregated with MEDIAN",
     "SELECT COUNT(DISTINCT email) FROM purchases"),
    ("SELECT user_id, COUNT(*) FROM purchases GROUP BY user_id", "42501",
     "a table grouped by user_id alone has one row per user_id, that user_id's own values: dpsql "
     "answers it only as a derived table or CTE that an aggregate outside it reads",
     "SELECT n, COUNT(*) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t"),
    ("SELECT COUNT(DISTINCT category, region) FROM purchases", "0A000",
     "COUNT(DISTINCT category, region): COUNT(DISTINCT ...) of several columns is not supported",
     "SELECT category, region, COUNT(*) ... GROUP BY category, region"),
    ("SELECT string_agg(category, ',') FROM purchases", "42501",
     "string_agg(category, ',') would return raw private values",
     "SELECT category, COUNT(*) FROM ... GROUP BY category"),
    ("SELECT corr(amount, quantity) FROM purchases", "0A000",
     "the aggregate corr(amount, quantity) is not supported", "MEDIAN"),
    ("SELECT COUNT(*) FROM purchases WHERE category IN (SELECT category FROM purchases)", "0A000",
     "a subquery in a filter may read public tables only, not private table purchases",
     "SELECT COUNT(*) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t WHERE n > 5"),
    ("SELECT SUM(amount) OVER (PARTITION BY category) FROM purchases", "42501",
     "window functions over private rows are not allowed",
     "SELECT category, SUM(amount), SUM(SUM(amount)) OVER () FROM t GROUP BY category"),
    ("WITH RECURSIVE r AS (SELECT 1) SELECT COUNT(*) FROM purchases", "0A000",
     "WITH RECURSIVE is not supported", "read each CTE once, in FROM or a JOIN"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "state", "why", "instead"), MORE)
def test_other_first_refusals_say_why_and_what_to_write(
    sql: str, state: str, why: str, instead: str
) -> None:
    err = refusal(sql)
    assert err.sqlstate == state, err
    assert why.lower() in err.message.lower(), err.message
    assert instead in (err.hint or ""), err.hint
    assert "PERCENTILE_CONT" not in err.message, err


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT n, COUNT(*) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t WHERE n > 5 GROUP BY n",
        "SELECT COUNT(*) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t WHERE n > 5",
        "SELECT n, COUNT(*) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t GROUP BY n",
        "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY n) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t",
        "SELECT category, COUNT(DISTINCT user_id) FROM purchases GROUP BY category",
        "SELECT category, region, COUNT(*) FROM purchases WHERE amount > 10 GROUP BY category, region",
        "SELECT category, SUM(amount), SUM(SUM(amount)) OVER () FROM purchases GROUP BY category",
    ],
)
def test_the_suggested_statements_are_answered(sql: str) -> None:
    answered(sql)


def test_a_create_as_points_to_its_query() -> None:
    """``CREATE VIEW ... AS (<query>)`` (dbt's view model, BI corpus #117) stays 25006, its hint
    the query itself (answered) and, for dbt, how to run the model without a write (it said
    'run SELECT queries with aggregates; data changes are made directly on the database by its
    owner'). A CREATE without a query keeps the general hint."""
    dbt = (
        '/* {"app": "dbt", "dbt_version": "1.9.11", "node_id": "model.dpdemo.by_category"} */\n\n'
        '  create view "demo"."public"."by_category__dbt_tmp"\n    \n  as (\n    select '
        'category, count(*) as n, avg(amount) as avg_amount from "demo"."public"."purchases" '
        "group by 1\n  );"
    )
    query = (
        'select category, count(*) as n, avg(amount) as avg_amount from "demo"."public".'
        '"purchases" group by 1'
    )
    err = refusal(dbt)
    assert err.sqlstate == "25006", err
    assert f"dpsql never stores a view; run its query itself: {query};" in (err.hint or ""), err
    assert "materialized='ephemeral'" in (err.hint or "") and "dbt show" in (err.hint or "")
    answered(query)
    assert "materialized='ephemeral'" in (refusal(dbt.split("*/", 1)[1]).hint or "")  # no comment
    err = refusal("CREATE TABLE t AS SELECT category, COUNT(*) FROM purchases GROUP BY 1")
    assert err.hint == (
        "dpsql never stores a table; run its query itself: SELECT category, COUNT(*) FROM "
        "purchases GROUP BY 1"
    ), err.hint
    assert "data changes are made directly" in (refusal("CREATE TABLE t (a int)").hint or "")

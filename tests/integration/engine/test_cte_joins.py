"""A row-level CTE (or derived table) joined to a public table is answered (README: CTEs and
public-table joins), as the join of its one private table (dpsql/sql/flatten.py ``_merge_joined``).

Property (deterministic, from the plan): the CTE form and the hand-written join of the table
itself with the CTE's filter in WHERE have the same plan -- the same rewritten SQL, the same
measures and sensitivities, the same contribution bounds and cost -- so the CTE form is exactly
as private as the supported private-join-public shape. The answer has one row per region name
and a notice for its statistic. Forms that are not a view of one table's rows (an outer join
keeping unmatched rows of the public side, DISTINCT) keep a refusal that says what to write.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.explain.report import explain
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine, notices_of

SESSION = SessionContext(analyst="analyst", epsilon=Fraction(1))
PAIRS = [  # (the user's statement, the same as a join of the table itself)
    (
        "WITH p AS (SELECT user_id, amount, region FROM purchases WHERE amount < 100) "
        "SELECT r.name, COUNT(*) FROM p JOIN regions r ON r.code = p.region GROUP BY r.name",
        "SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON r.code = p.region "
        "WHERE p.amount < 100 GROUP BY r.name",
    ),
    (
        "WITH p AS (SELECT user_id, amount * 2 AS v, region AS reg FROM purchases WHERE quantity > 1) "
        "SELECT r.name, SUM(v), AVG(p.v) FROM regions r JOIN p ON r.code = p.reg GROUP BY r.name",
        "SELECT r.name, SUM((p.amount * 2)), AVG((p.amount * 2)) FROM regions r JOIN purchases p "
        "ON r.code = p.region WHERE p.quantity > 1 GROUP BY r.name",
    ),
    (
        "SELECT r.name, COUNT(DISTINCT p.user_id) FROM (SELECT * FROM purchases WHERE category = "
        "'books') p JOIN regions r ON p.region = r.code GROUP BY r.name",
        "SELECT r.name, COUNT(DISTINCT p.user_id) FROM purchases p JOIN regions r "
        "ON p.region = r.code WHERE p.category = 'books' GROUP BY r.name",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("cte", "join"), PAIRS)
def test_the_cte_form_has_the_plan_of_the_join(demo_policy: Any, cte: str, join: str) -> None:
    a, b = explain(demo_policy, cte, SESSION), explain(demo_policy, join, SESSION)
    assert a.rewritten == b.rewritten
    # the same measures, each named as its statement writes it (explain.measure_words)
    assert [replace(m, measure="") for m in a.measures] == [
        replace(m, measure="") for m in b.measures
    ]
    assert a.contribution == b.contribution
    assert (a.epsilon, a.delta, a.cost) == (b.epsilon, b.delta, b.cost)


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy, demo_dsn, "dpsql_cj") as e:
        yield e


def test_the_readme_shape_is_answered(engine: Engine) -> None:
    sql = PAIRS[0][0]
    r = engine.execute(engine.prepare(sql, "analyst"), SESSION)
    assert sorted(row[0] for row in r.rows) == ["Central", "East", "North", "South", "West"]
    assert any(n.startswith("COUNT(*): 95% interval") for n in r.notices), r.notices


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        (
            "SELECT r.name, COUNT(*) FROM regions r LEFT JOIN (SELECT * FROM purchases WHERE "
            "amount > 2) p ON r.code = p.region GROUP BY 1",
            "join the table itself and move the subquery's filter into WHERE: FROM purchases AS "
            "p JOIN ... ON ... WHERE amount > 2",
        ),
        (
            "SELECT COUNT(*) FROM (SELECT DISTINCT user_id, region FROM purchases) p JOIN "
            "regions r ON r.code = p.region",
            "aggregate inside it",
        ),
    ],
)
def test_what_is_not_a_view_of_one_table_says_what_to_write(
    engine: Engine, sql: str, words: str
) -> None:
    with pytest.raises(DpsqlError) as info:
        notices_of(engine, sql)
    assert info.value.sqlstate == "0A000", info.value
    assert words in (info.value.hint or ""), info.value.hint
    assert "query the private table directly" not in (info.value.hint or "")


# a nested subquery's correlated reference p.x to the merged derived table: after the merge
# ``p`` names the table itself, so p.x reads the table's own column x. Merged only when that is
# what the derived table's x was (0606a57 merged always: p.region below read purchases.region,
# not the CTE's constant 'N', and the answer counted North purchases only)
CORRELATED = (
    "WITH p AS (SELECT user_id, {col} AS region FROM purchases) SELECT r.name, COUNT(*) "
    "FROM p JOIN regions r ON r.code = p.region WHERE EXISTS "
    "(SELECT 1 FROM regions x WHERE x.code = p.region AND x.name = 'North') GROUP BY r.name"
)


def test_a_correlated_reference_keeps_the_derived_tables_column(exact_engine: Engine) -> None:
    def rows(sql: str) -> list[tuple[object, ...]]:
        return sorted(exact_engine.execute(exact_engine.prepare(sql), SESSION).rows)

    # the derived table's region is the table's region: merged, answered as the plain join
    same = rows(CORRELATED.format(col="region"))
    assert same == rows(
        "SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON r.code = p.region "
        "WHERE p.region = 'N' GROUP BY r.name"
    )
    # a constant 'N': every purchase joins North and passes the EXISTS; never read as the
    # table's own region (which would keep North purchases only)
    everyone = rows(
        "SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON r.code = 'N' GROUP BY r.name"
    )
    assert everyone != same
    try:
        got = rows(CORRELATED.format(col="'N'"))
    except DpsqlError as e:
        assert e.sqlstate == "0A000", e
    else:
        assert got == everyone

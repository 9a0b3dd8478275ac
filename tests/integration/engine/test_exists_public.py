"""Correlated EXISTS over a public table (docs/sql.md, "IN/EXISTS over public tables"): the usual
semi-join ``EXISTS (SELECT 1 FROM regions r WHERE r.code = p.region AND ...)`` is a row-level
predicate on one private row and public data, answered like the IN form it equals; correlations
anywhere else stay refused (tests/redteam/corpus.yaml)."""

from __future__ import annotations

import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.result import Result
from dpsql.session import SessionContext


def ask(engine: Engine, sql: str) -> Result:
    s = SessionContext(analyst="analyst")
    s.epsilon = s.epsilon  # the session default
    return engine.execute(engine.prepare(sql), s)


# each pair: the EXISTS form, and the IN / literal form PostgreSQL evaluates the same way
SAME = [
    (
        "SELECT COUNT(*) FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code = p.region AND r.name LIKE 'N%')",
        "SELECT COUNT(*) FROM purchases p WHERE p.region IN "
        "(SELECT r.code FROM regions r WHERE r.name LIKE 'N%')",
    ),
    (
        "SELECT category, SUM(amount) FROM purchases WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE purchases.region = r.code AND r.name <> 'East') "
        "GROUP BY category",
        "SELECT category, SUM(amount) FROM purchases WHERE region IN ('N', 'S', 'W', 'C') "
        "GROUP BY category",
    ),
    (
        "SELECT COUNT(*) FROM purchases p WHERE NOT EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code = p.region AND r.name IN ('North', 'South'))",
        "SELECT COUNT(*) FROM purchases p WHERE p.region NOT IN ('N', 'S')",
    ),
    (
        "SELECT COUNT(*) FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code = upper(lower(p.region)))",
        "SELECT COUNT(*) FROM purchases p",
    ),
]


@pytest.mark.parametrize(("exists", "same"), SAME)
def test_correlated_exists_answers_as_its_in_form(
    exact_engine: Engine, exists: str, same: str
) -> None:
    assert ask(exact_engine, exists).rows == ask(exact_engine, same).rows


REFUSED = [
    # the outer row in the select list, or in a conjunct that isn't an equality with the table
    ("SELECT COUNT(*) FROM purchases p WHERE EXISTS (SELECT p.region FROM regions r)", "42703"),
    (
        "SELECT COUNT(*) FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code = p.region OR p.amount > 100)",
        "42703",
    ),
    (
        "SELECT COUNT(*) FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code < p.region)",
        "42703",
    ),
    # the outer expression is checked as the outer query's WHERE would be: identifiers stay out
    (
        "SELECT COUNT(*) FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code = p.email)",
        "42501",
    ),
    # an unqualified name could resolve to either row
    (
        "SELECT COUNT(*) FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code = region)",
        "42703",
    ),
]


@pytest.mark.parametrize(("sql", "sqlstate"), REFUSED)
def test_other_correlations_stay_refused(engine: Engine, sql: str, sqlstate: str) -> None:
    with pytest.raises(DpsqlError) as e:
        engine.prepare(sql)
    assert e.value.sqlstate == sqlstate, e.value.message


def test_with_a_join_and_in_a_cte(exact_engine: Engine) -> None:
    joined = (
        "SELECT g.name, COUNT(*) FROM purchases p JOIN regions g ON g.code = p.region "
        "WHERE EXISTS (SELECT 1 FROM regions r WHERE r.code = p.region AND r.name <> 'East') "
        "GROUP BY g.name ORDER BY 1"
    )
    plain = (
        "SELECT g.name, COUNT(*) FROM purchases p JOIN regions g ON g.code = p.region "
        "WHERE p.region <> 'E' GROUP BY g.name ORDER BY 1"
    )
    assert ask(exact_engine, joined).rows == ask(exact_engine, plain).rows
    cte = (
        "WITH t AS (SELECT category, COUNT(*) AS n FROM purchases p WHERE EXISTS "
        "(SELECT 1 FROM regions r WHERE r.code = p.region AND r.name = 'North') GROUP BY 1) "
        "SELECT SUM(n) FROM t"
    )
    same = (
        "WITH t AS (SELECT category, COUNT(*) AS n FROM purchases p WHERE p.region = 'N' "
        "GROUP BY 1) SELECT SUM(n) FROM t"
    )
    assert ask(exact_engine, cte).rows == ask(exact_engine, same).rows

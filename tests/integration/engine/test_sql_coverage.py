"""Wider SQL on a real PostgreSQL: joins, CTEs, derived tables, BI wrappers, BI functions.

Soundness is checked on neighbouring databases with noise switched off: removing all rows of one
privacy unit (from every private table) moves each measure, summed over groups, by at most its
stated L1 sensitivity G·R·c. Queries are chosen so that contribution bounding's random row choice
can't change the result (the heavy units' values are all clamped to the same bound).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import build_policy, private_table

WHALE = 100001
USERS = """
CREATE TABLE users (user_id integer PRIMARY KEY, age integer, country text);
INSERT INTO users SELECT u, 18 + (u * 7) % 60, (ARRAY['fr','de','us'])[1 + u % 3]
FROM (SELECT DISTINCT user_id AS u FROM purchases) s;
"""


USER_COLUMNS = {
    "age": {"type": "integer", "bounds": [0, 120]},
    "country": {"type": "text", "keys": ["fr", "de", "us"]},
}
# fixed bounds: exact sensitivities
JOIN_POLICY = build_policy(
    add_tables={"public.users": private_table("user_id", USER_COLUMNS, rows=1, groups=3)},
    fixed_bounds=True,
)


@pytest.fixture(scope="module")
def join_dsn(make_demo_db: Callable[[str], str]) -> str:
    dsn = make_demo_db("joins")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(USERS)
    return dsn


@pytest.fixture(scope="module")
def jengine(join_dsn: str) -> Iterator[Engine]:
    e = Engine(JOIN_POLICY, join_dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def ask(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    return engine.execute(engine.prepare(sql), SessionContext(analyst="analyst")).rows


def without_unit(dsn: str, unit: int) -> Callable[[], None]:
    """Delete one unit's rows from every private table; return a function that restores them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS x (a int)")
        p = conn.execute("SELECT * FROM purchases WHERE user_id = %s", (unit,)).fetchall()
        u = conn.execute("SELECT * FROM users WHERE user_id = %s", (unit,)).fetchall()
        conn.execute("DELETE FROM purchases WHERE user_id = %s", (unit,))
        conn.execute("DELETE FROM users WHERE user_id = %s", (unit,))

    def restore() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
            if p:
                cur.executemany(
                    f"INSERT INTO purchases VALUES ({', '.join(['%s'] * len(p[0]))})", p
                )
            if u:
                cur.executemany("INSERT INTO users VALUES (%s, %s, %s)", u)

    return restore


NEIGHBOUR_QUERIES = [
    # private JOIN public (dimension lookup), keys derived from the public table
    "SELECT r.name, COUNT(*), SUM(p.amount) FROM purchases p JOIN regions r ON p.region = r.code "
    "GROUP BY r.name",
    # private JOIN private on the privacy unit, bounded after the join (R = 1 keeps a random
    # purchase per unit, so only statistics that don't depend on which one are compared)
    "SELECT u.country, COUNT(*), SUM(u.age) FROM users u "
    "JOIN purchases p ON u.user_id = p.user_id GROUP BY u.country",
    # CTE + derived table deriving row-level values
    "WITH t AS (SELECT category, amount * quantity AS v FROM purchases WHERE quantity > 0) "
    "SELECT category, COUNT(*), SUM(v) FROM (SELECT * FROM t) s GROUP BY category",
    # IN-subquery over a public table
    "SELECT category, COUNT(*), SUM(amount) FROM purchases p WHERE p.region IN "
    "(SELECT r.code FROM regions r WHERE r.name <> 'North') GROUP BY category",
    # BI wrapper with an outer LIMIT
    'SELECT "t"."category", "t"."n" FROM (SELECT category, COUNT(*) AS "n" FROM purchases '
    'GROUP BY category) AS "t" LIMIT 1000',
]


@pytest.mark.parametrize("sql", NEIGHBOUR_QUERIES)
def test_neighbours_move_each_measure_by_at_most_its_sensitivity(
    sql: str, jengine: Engine, join_dsn: str
) -> None:
    prepared = jengine.prepare(sql)
    plan = jengine.plan(prepared, SessionContext(analyst="analyst"))
    a = plan.analysis
    stat_sens = []
    for st in a.statistics:
        assert st.func in ("count", "sum")
        stat_sens.append(plan.measure_plan(st.measures[0]).sensitivity)
    nk = len(a.group_keys)
    full = {r[:nk]: r[nk:] for r in ask(jengine, sql)}
    for unit in (WHALE, 42, 4242):
        restore = without_unit(join_dsn, unit)
        try:
            less = {r[:nk]: r[nk:] for r in ask(jengine, sql)}
        finally:
            restore()
        assert set(less) == set(full)  # declared / derived keys: same groups either way
        for i, sens in enumerate(stat_sens):
            moved = sum(abs(Fraction(str(full[k][i])) - Fraction(str(less[k][i]))) for k in full)
            assert moved <= sens, (sql, unit, i, moved, sens)


def test_join_sensitivity_uses_the_smallest_bounds(jengine: Engine) -> None:
    sql = "SELECT COUNT(*) FROM users u JOIN purchases p ON u.user_id = p.user_id"
    plan = jengine.plan(jengine.prepare(sql), SessionContext(analyst="analyst"))
    assert plan.analysis.max_rows == 1  # min(users 1, purchases 10)
    assert plan.measures[0].sensitivity == 1


def test_private_join_is_bounded_after_the_join(jengine: Engine, join_dsn: str) -> None:
    (got,) = ask(jengine, "SELECT COUNT(*) FROM users u JOIN purchases p ON u.user_id = p.user_id")
    with psycopg.connect(join_dsn) as conn:
        (units,) = conn.execute("SELECT count(DISTINCT user_id) FROM purchases").fetchone()
    assert got == (units,)  # R = 1: one joined row per unit


REFUSED = [
    ("SELECT COUNT(*) FROM users u JOIN purchases p ON u.age = p.quantity", "42501"),
    ("SELECT COUNT(*) FROM users u, purchases p", "42501"),
    (  # the third table must itself be tied by its unit, not by an equality of the first two
        "SELECT COUNT(*) FROM users u JOIN purchases p ON u.user_id = p.user_id "
        "JOIN pums x ON u.user_id = p.user_id",
        "42501",
    ),
    ("SELECT COUNT(*) FROM purchases p JOIN regions r ON p.user_id::text = r.code", "42501"),
    ("SELECT COUNT(*) FROM purchases p RIGHT JOIN regions r ON p.region = r.code", "0A000"),
    ("SELECT COUNT(*) FROM regions r LEFT JOIN purchases p ON p.region = r.code", "0A000"),
    ("SELECT r.name FROM purchases p JOIN regions r ON p.region = r.code", "42501"),
    (
        "SELECT COUNT(*) FROM purchases p JOIN users u ON p.user_id = u.user_id AND u.user_id = 5",
        "42501",
    ),
]


@pytest.mark.parametrize(("sql", "state"), REFUSED)
def test_refused_joins(sql: str, state: str, jengine: Engine) -> None:
    with pytest.raises(DpsqlError) as e:
        ask(jengine, sql)
    assert e.value.sqlstate == state
    assert e.value.hint


def test_public_join_keys_come_from_the_public_table(jengine: Engine) -> None:
    rows = ask(
        jengine,
        "SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON p.region = r.code "
        "WHERE r.code = 'N' GROUP BY r.name",
    )
    assert sorted(r[0] for r in rows) == ["Central", "East", "North", "South", "West"]
    assert dict(rows)["South"] == 0

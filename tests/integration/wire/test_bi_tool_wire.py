"""BI-tool and ORM statement shapes through the wire with psycopg (newcomer 21's findings).

Real engine and PostgreSQL (demo data) behind the in-process server. Properties:
- 33: with ``SET dpsql.show_intervals = on`` the same aggregate twice answers, each output with
  its own uniquely named interval columns (was 42702 ``low0`` is ambiguous, after charging).
- 18: a negative (or beyond bigint) constant LIMIT/OFFSET is refused before any charge.
- 19: ``FETCH FIRST n ROWS ONLY`` (and Hibernate's ``fetch first ? rows only``) is a LIMIT.
- 10: a cast of a bound parameter (``%s::date``, ``CAST(%s AS date)``, ``TO_DATE(%s, ...)``)
  answers as the same statement with the value written inline; a value that is not a valid
  date is refused before any charge (the bound statement is checked again, as a literal).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine


@pytest.fixture(scope="module")
def ledger(make_db: Callable[[str], str], demo_policy: Any) -> Iterator[Ledger]:
    led = Ledger.open(make_db("bi_tool_ledger"), demo_policy)
    yield led
    led.close()


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any, ledger: Ledger) -> Iterator[ServerThread]:
    with served_engine(demo_policy, demo_dsn, ledger=ledger) as srv:
        yield srv


def _charges(conn: psycopg.Connection[Any]) -> int:
    return len(conn.execute("SELECT id FROM dpsql.history").fetchall())


@pytest.fixture
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def test_repeated_aggregate_with_intervals(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET dpsql.show_intervals = on")
    cur = conn.execute(
        "SELECT category, SUM(amount) AS s, SUM(amount) AS s2 FROM purchases GROUP BY category"
    )
    names = [d.name for d in cur.description or ()]
    assert names == ["category", "s", "s2", "s_low", "s_high", "s2_low", "s2_high"]
    rows = cur.fetchall()
    assert len(rows) == 5 and all(r[1] == r[2] for r in rows)
    cur = conn.execute("SELECT COUNT(*), 1 AS count_low FROM purchases")
    names = [d.name for d in cur.description or ()]
    assert len(set(names)) == len(names), names


CAST_PARAMS = [
    ("SELECT COUNT(*) FROM purchases WHERE purchased_at >= %s::date", "2025-06-01"),
    ("SELECT COUNT(*) FROM purchases WHERE purchased_at >= CAST(%s AS date)", dt.date(2025, 6, 1)),
    (
        "SELECT COUNT(*) FROM purchases WHERE purchased_at >= TO_DATE(%s, 'YYYY-MM-DD')",
        "2025-06-01",
    ),
]


@pytest.mark.parametrize(("sql", "value"), CAST_PARAMS)
def test_cast_of_a_parameter_answers(conn: psycopg.Connection[Any], sql: str, value: Any) -> None:
    conn.execute("SET dpsql.epsilon = 0.1")
    (n,) = conn.execute(sql, [value]).fetchone()  # type: ignore[misc]
    assert 0 < n < 200_000


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at >= %s::date", "20250-06-01"),
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at >= %s::date", "not a date"),
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at >= CAST(%s AS date)", "2025-02-30"),
        ("SELECT COUNT(*) FROM purchases WHERE purchased_at >= TO_DATE(%s, 'YYYY-MM-DD')", "x"),
    ],
)
def test_bad_parameter_date_is_refused_before_charging(
    conn: psycopg.Connection[Any], sql: str, value: str
) -> None:
    before = _charges(conn)
    with pytest.raises(psycopg.Error) as e:
        conn.execute(sql, [value])
    assert e.value.sqlstate in ("0A000", "22007", "22008", "22023", "22P02"), e.value
    assert _charges(conn) == before


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (
            "SELECT category, COUNT(*) FROM purchases GROUP BY category "
            "ORDER BY COUNT(*) DESC FETCH FIRST 2 ROWS ONLY",
            None,
        ),
        (  # Hibernate 6's PostgreSQL dialect
            "select category, count(*) from purchases group by category order by 2 desc "
            "fetch first %s rows only",
            [2],
        ),
    ],
)
def test_fetch_first_is_a_limit(
    conn: psycopg.Connection[Any], sql: str, params: list[int] | None
) -> None:
    """19: ``FETCH FIRST n ROWS ONLY`` answers as ``LIMIT n`` (was 0A000 "LIMIT must be a
    constant")."""
    conn.execute("SET dpsql.epsilon = 0.1")
    rows = conn.execute(sql, params).fetchall()
    assert len(rows) == 2
    assert rows[0][1] >= rows[1][1]


@pytest.mark.parametrize(
    ("page", "sqlstate"),
    [
        ("LIMIT -1", "2201W"),
        ("LIMIT (-2)", "2201W"),
        ("OFFSET -1", "2201X"),
        ("LIMIT 99999999999999999999", "22003"),
    ],
)
def test_bad_constant_page_is_refused_before_charging(
    conn: psycopg.Connection[Any], page: str, sqlstate: str
) -> None:
    """18: a LIMIT/OFFSET PostgreSQL refuses by itself is refused with its code before any
    charge (was: charged, then PostgreSQL's error with "the answer was released")."""
    conn.execute("SET dpsql.epsilon = 0.1")
    before = _charges(conn)
    with pytest.raises(psycopg.Error) as e:
        conn.execute(f"SELECT category, COUNT(*) FROM purchases GROUP BY 1 {page}")
    assert e.value.sqlstate == sqlstate, e.value
    assert _charges(conn) == before
    rows = conn.execute("SELECT category, COUNT(*) FROM purchases GROUP BY 1 LIMIT 2.7").fetchall()
    assert len(rows) == 3  # PostgreSQL rounds a fractional count


ANY_LISTS = [
    ("SELECT category, COUNT(*) FROM purchases WHERE category = ANY(%s) GROUP BY category",
     [["books", "travel"]], ["books", "travel"]),
    ("SELECT category, COUNT(*) FROM purchases WHERE category = ANY(%s::text[]) "
     "GROUP BY category", [["books", "travel"]], ["books", "travel"]),
    ("SELECT category, COUNT(*) FROM purchases WHERE category = ANY(ARRAY['books', 'travel']) "
     "GROUP BY category", None, ["books", "travel"]),
    ("SELECT category, COUNT(*) FROM purchases WHERE category = ANY('{books,travel}') "
     "GROUP BY category", None, ["books", "travel"]),
    ("SELECT category, COUNT(*) FROM purchases WHERE category <> ALL(ARRAY['books']) "
     "GROUP BY category", None, ["clothing", "electronics", "groceries", "travel"]),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "params", "keys"), ANY_LISTS)
def test_any_of_a_list_is_an_in_list(
    conn: psycopg.Connection[Any], sql: str, params: Any, keys: list[str]
) -> None:
    """40: ``= ANY(<list parameter or array constant>)`` is an IN list (it narrows the declared
    keys as IN does), ``<> ALL(...)`` NOT IN (was 0A000 "ANY is not supported", "function
    all() is not supported")."""
    conn.execute("SET dpsql.epsilon = 0.1")
    rows = conn.execute(sql, params).fetchall()
    assert sorted(r[0] for r in rows) == keys


def test_any_of_a_list_in_a_public_statement(conn: psycopg.Connection[Any]) -> None:
    """A public statement with a list parameter (``code = ANY(%s)``) answers as PostgreSQL does
    (prepared: the extended protocol with a named statement)."""
    for _ in range(2):
        rows = conn.execute(
            "SELECT code FROM regions WHERE code = ANY(%s) ORDER BY code",
            [["N", "S"]],
            prepare=True,
        ).fetchall()
        assert rows == [("N",), ("S",)], rows

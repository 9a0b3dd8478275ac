"""What BI tools and their users send that bi24's corpus left refused with the wrong words,
replayed on the wire (psycopg, Simple Query) on one connection: each answered, or refused with a
SQLSTATE and dpsql's own words that say what to write instead, nothing charged (the ledger's
history is as it was) and the session unharmed (the next statement answered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import pq

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_with_ledger


@pytest.fixture(scope="module")
def served(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> Iterator[ServerThread]:
    with served_with_ledger(demo_policy, demo_dsn, make_db("leftovers_ledger")) as srv:
        yield srv


@pytest.fixture(scope="module")
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def _run(conn: psycopg.Connection[Any], sql: str) -> pq.abc.PGresult:
    pgconn = conn.pgconn
    res = pgconn.exec_(sql.encode())
    while pgconn.get_result() is not None:
        pass
    return res


def _field(res: pq.abc.PGresult, f: pq.DiagnosticField) -> str:
    return (res.error_field(f) or b"").decode()


def _releases(conn: psycopg.Connection[Any]) -> int:
    return len(conn.execute("SELECT * FROM dpsql.history").fetchall())


@pytest.mark.parametrize(
    ("escape", "shown"),
    [("category", "ESCAPE category"), ("(region)", "ESCAPE (...)"), ("E'!'", "ESCAPE E'!'")],
)
def test_a_like_escape_that_is_no_constant_gets_dpsqls_words(
    conn: psycopg.Connection[Any], escape: str, shown: str
) -> None:
    """``LIKE '%x' ESCAPE category`` (PostgreSQL takes an expression as the escape; sqlglot
    reads only a string) was 42601 'syntax error at end of input' with the hint 'write an
    operand after "category"', which reads as if the statement were cut short. Now 0A000 that
    names the escape and says what dpsql supports: a one-character string constant."""
    before = _releases(conn)
    sql = f"SELECT COUNT(*) FROM purchases WHERE category LIKE '%x' ESCAPE {escape}"
    res = _run(conn, sql)
    assert res.status == pq.ExecStatus.FATAL_ERROR
    assert _field(res, pq.DiagnosticField.SQLSTATE) == "0A000"
    message = _field(res, pq.DiagnosticField.MESSAGE_PRIMARY)
    assert shown in message and "one character" in message, message
    assert "ESCAPE '!'" in _field(res, pq.DiagnosticField.MESSAGE_HINT)
    assert _releases(conn) == before  # nothing charged
    ok = _run(conn, "SELECT COUNT(*) FROM purchases WHERE category LIKE '%x' ESCAPE '!'")
    assert ok.status == pq.ExecStatus.TUPLES_OK  # the session goes on


def test_a_public_table_left_joined_to_a_private_one_gets_the_statement_to_write(
    conn: psycopg.Connection[Any],
) -> None:
    """Metabase's join when a question starts from the dimension table (``FROM regions LEFT
    JOIN purchases``) was 0A000 'a private table can't be LEFT JOINed to public tables' with the
    hint 'put the private table first, or use an INNER JOIN'. Now the words say why (the
    unmatched public rows would be counted too) and give the statement's own tables and
    condition the other way round; that statement is answered, every region a key."""
    before = _releases(conn)
    res = _run(
        conn,
        'SELECT "public"."regions"."name" AS "name", COUNT(*) AS "count" FROM "public"."regions" '
        'LEFT JOIN "public"."purchases" AS "Purchases" ON "public"."regions"."code" = '
        '"Purchases"."region" GROUP BY "public"."regions"."name" ORDER BY "public"."regions"."name"',
    )
    assert _field(res, pq.DiagnosticField.SQLSTATE) == "0A000"
    assert "would be counted too" in _field(res, pq.DiagnosticField.MESSAGE_PRIMARY)
    hint = _field(res, pq.DiagnosticField.MESSAGE_HINT)
    instead = (
        'FROM public.purchases AS "Purchases" JOIN public.regions ON public.regions.code = '
        '"Purchases".region'
    )
    assert instead in hint, hint
    assert _releases(conn) == before  # nothing charged
    ok = _run(conn, f"SELECT public.regions.name, COUNT(*) {instead} GROUP BY public.regions.name")
    assert ok.status == pq.ExecStatus.TUPLES_OK
    assert ok.ntuples == len(conn.execute("SELECT code FROM regions").fetchall())


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM purchases WHERE category = $$books$$",
        "SELECT category, COUNT(*) FROM purchases WHERE category LIKE $$b%$$ ESCAPE $$!$$ "
        "GROUP BY category",
        "SELECT COUNT(*) FROM purchases WHERE category IN ($t$books$t$, 'travel')",
        # escape strings (newcomer27 #4: 0A000 "the expression e'books' is not supported")
        "SELECT COUNT(*) FROM purchases WHERE category = E'b\\x6foks'",
        "SELECT COUNT(*) FROM purchases WHERE category IN (E'books', 'travel') AND category "
        "LIKE E'b%' AND category <> E'it\\'s'",
        "SELECT E'total' AS label, COUNT(*) FROM purchases",
    ],
)
def test_dollar_quoted_strings_are_string_constants(
    conn: psycopg.Connection[Any], sql: str
) -> None:
    """A dollar-quoted string is a string constant (PostgreSQL's ``$$books$$``): it was 0A000
    "the expression 'books' is not supported in WHERE of a private query" (sqlglot reads it
    into a node of its own), also as the escape of a LIKE."""
    res = _run(conn, sql)
    assert res.status == pq.ExecStatus.TUPLES_OK, _field(res, pq.DiagnosticField.MESSAGE_PRIMARY)


def test_date_of_a_column_is_its_cast_to_date(conn: psycopg.Connection[Any]) -> None:
    """``date(d)``, PostgreSQL's function form of ``CAST(d AS date)``, was 0A000 "function date()
    is not supported in GROUP BY of a private query" (and in WHERE). Now the cast: the 365 days
    of purchased_at's declared bounds, each with noise (none selected from the data), narrowed by
    ``WHERE date(d) >= ...`` (and ``CAST(d AS date) >= ...``: a date column's days were narrowed
    by a range on the column only); the column is named "date", as PostgreSQL names it."""
    cur = conn.execute("SELECT date(purchased_at), COUNT(*) FROM purchases GROUP BY 1 ORDER BY 1")
    rows = cur.fetchall()
    assert cur.description is not None and cur.description[0].name == "date"
    assert len(rows) == 365 and str(rows[0][0]) == "2025-01-01" and str(rows[-1][0]) == "2025-12-31"
    rows = conn.execute(
        "SELECT date(purchased_at) AS day, COUNT(*) FROM purchases "
        "WHERE date(purchased_at) >= '2025-12-01' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert [str(r[0]) for r in rows] == [f"2025-12-{d:02d}" for d in range(1, 32)]
    rows = conn.execute(  # another range, the same key: not the days remembered for the first
        "SELECT date(purchased_at), COUNT(*) FROM purchases "
        "WHERE CAST(purchased_at AS date) >= '2025-11-01' GROUP BY 1"
    ).fetchall()
    assert len(rows) == 61


def test_a_bounded_integer_releases_every_value_of_its_bounds(
    conn: psycopg.Connection[Any],
) -> None:
    """``GROUP BY quantity`` (bounds [1, 10], no keys declared) selected its groups from the data
    (newcomer25 #15: quantities 6-10 were left out by the threshold); now its 10 whole numbers,
    each with noise, as declared keys are (also narrowed by WHERE)."""
    rows = conn.execute("SELECT quantity, COUNT(*) FROM purchases GROUP BY quantity").fetchall()
    assert sorted(r[0] for r in rows) == list(range(1, 11))
    rows = conn.execute(
        "SELECT quantity, AVG(amount) FROM purchases WHERE quantity > 6 GROUP BY 1"
    ).fetchall()
    assert sorted(r[0] for r in rows) == [7, 8, 9, 10]

"""``COPY ... TO STDOUT`` through the wire (newcomer 21's finding 11: psql's ``\\copy``, psycopg's
``cursor.copy()``, asyncpg's ``copy_from_query``).

Real engine, ledger and PostgreSQL (demo data) behind the in-process server. Properties:
- a private aggregate's COPY answers its released values, charged once as the SELECT is: the
  SELECT after it is a free repeat with the same numbers, one charge in dpsql.history;
- a public statement's COPY is byte for byte PostgreSQL's own COPY of it, in text and CSV with
  the options tools send (HEADER, DELIMITER, NULL, QUOTE, ESCAPE, FORCE_QUOTE, the old syntax),
  over values that need quoting or escaping;
- ``COPY private_table TO STDOUT`` is refused 42501 (its rows), ``TO 'file'`` 42501, ``FROM``
  25006, ``FORMAT binary`` 0A000: nothing charged, the session unharmed;
- asyncpg's copy_from_query (with a parameter) and copy_from_table answer.
"""

from __future__ import annotations

import asyncio
import io
import select
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import psycopg
import pytest

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_with_ledger


@pytest.fixture(scope="module")
def served(
    make_db: Callable[[str], str], demo_dsn: str, demo_policy: Any
) -> Iterator[ServerThread]:
    with served_with_ledger(demo_policy, demo_dsn, make_db("copy_ledger")) as srv:
        yield srv


@pytest.fixture
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def _copy(conn: psycopg.Connection[Any], statement: str) -> bytes:
    with conn.cursor() as cur, cur.copy(statement) as cp:
        return b"".join(bytes(b) for b in cp)


def _history(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT id, epsilon FROM dpsql.history ORDER BY id").fetchall()


def test_private_aggregate_is_charged_once(conn: psycopg.Connection[Any]) -> None:
    query = "SELECT category, COUNT(*) AS n FROM purchases WHERE quantity = 2 GROUP BY category"
    conn.execute("SET dpsql.epsilon = 0.25")
    before = len(_history(conn))
    lines = _copy(conn, f"COPY ({query}) TO STDOUT WITH (FORMAT csv, HEADER)").decode()
    header, *rows = lines.splitlines()
    assert header == "category,n" and len(rows) == 5
    copied = sorted(tuple(r.split(",")) for r in rows)
    selected = sorted((k, str(n)) for k, n in conn.execute(query).fetchall())
    assert copied == selected  # the SELECT repeats the COPY's release
    charged = [e for _, e in _history(conn)[before:] if e]
    assert len(charged) >= 1 and sum(charged) == pytest.approx(0.25)


OPTIONS = [
    "",
    "WITH (FORMAT csv, HEADER)",
    "WITH (FORMAT csv, DELIMITER ';', NULL 'none', QUOTE '''', ESCAPE '\\', FORCE_QUOTE *)",
    "WITH (FORMAT text, HEADER true, DELIMITER '|', NULL '')",
    "CSV HEADER FORCE QUOTE code",
    "DELIMITER AS ','",
    # escape strings read as PostgreSQL reads them: a tab, and '-' (was: 't' and 'x2D')
    "WITH (FORMAT csv, DELIMITER E'\\t', NULL E'\\x2D')",
]
PUBLIC = (
    "SELECT code, name, NULL::text AS nothing, '' AS empty, 'a,b;c|d' AS seps, "
    "E'tab\\there\\nnew' AS ctl, 'say \"hi\" it''s \\ back' AS quotes FROM regions ORDER BY code"
)


@pytest.mark.parametrize("options", OPTIONS)
def test_public_copy_is_postgresqls(
    conn: psycopg.Connection[Any], demo_dsn: str, options: str
) -> None:
    statement = f"COPY ({PUBLIC}) TO STDOUT {options}"
    with psycopg.connect(demo_dsn, autocommit=True) as pg:
        truth = _copy(pg, statement)
    assert _copy(conn, statement) == truth


# a ")" inside a dollar quote whose tag has a digit or a non-ASCII letter, and inside a nested
# comment: the query ends where PostgreSQL's lexer ends it (was cut there: 42601)
DOLLARS = (
    "SELECT code, $a1$)$a1$ AS d1, $é$ ) ( $é$ AS d2 /* ) /* ( */ ) */, $_9$'$_9$ AS d3 "
    "FROM regions ORDER BY code"
)


def test_public_copy_with_dollar_quotes_is_postgresqls(
    conn: psycopg.Connection[Any], demo_dsn: str
) -> None:
    statement = f"COPY ({DOLLARS}) TO STDOUT WITH (FORMAT csv, HEADER)"
    with psycopg.connect(demo_dsn, autocommit=True) as pg:
        truth = _copy(pg, statement)
    assert truth.startswith(b"code,d1,d2,d3\n") and b") ( " in truth
    assert _copy(conn, statement) == truth


@pytest.mark.parametrize(
    ("statement", "sqlstate"),
    [
        ("COPY purchases TO STDOUT", "42501"),
        ("COPY (SELECT * FROM purchases) TO STDOUT WITH (FORMAT csv)", "42501"),
        ("COPY (SELECT 1) TO '/tmp/dpsql_copy'", "42501"),
        ("COPY purchases FROM STDIN", "25006"),
        ("COPY (SELECT category, COUNT(*) FROM purchases GROUP BY 1) TO STDOUT (FORMAT binary)",
         "0A000"),
    ],
)  # fmt: skip
def test_refused(conn: psycopg.Connection[Any], statement: str, sqlstate: str) -> None:
    before = _history(conn)
    with pytest.raises(psycopg.Error) as e:
        _copy(conn, statement)
    assert e.value.sqlstate == sqlstate, e.value
    assert e.value.diag.message_hint  # what to do instead
    if statement == "COPY purchases TO STDOUT":  # a runnable aggregate, of a declared key
        assert "COPY (SELECT category, COUNT(*) FROM purchases" in e.value.diag.message_hint
    assert _history(conn) == before  # nothing charged
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_asyncpg(served: ServerThread) -> None:
    async def run() -> tuple[str, str]:
        c = await asyncpg.connect(host="127.0.0.1", port=served.port, user="analyst",
                                  password="analyst", database="demo")  # fmt: skip
        try:
            await c.execute("SET dpsql.epsilon = 0.2")
            out = io.BytesIO()
            await c.copy_from_query(
                "SELECT region, COUNT(*) FROM purchases WHERE category = $1 GROUP BY region",
                "books", output=out, format="csv", header=True,
            )  # fmt: skip
            table = io.BytesIO()
            await c.copy_from_table("regions", output=table, format="csv")
            return out.getvalue().decode(), table.getvalue().decode()
        finally:
            await c.close()

    grouped, regions = asyncio.run(run())
    assert grouped.splitlines()[0] == "region,count" and len(grouped.splitlines()) == 6
    assert "N,North" in regions.splitlines()


def test_extended_protocol(conn: psycopg.Connection[Any], demo_dsn: str) -> None:
    """COPY sent as Parse/Bind/Describe/Execute (libpq's PQsendQueryParams) answers as over the
    simple protocol: the portal is described as NoData, Execute sends the COPY data. (libpq
    driven without blocking: a blocking call would hold the GIL the in-process server needs.)"""

    def wait(pg: Any) -> None:
        select.select([pg.socket], [], [], 1)
        pg.consume_input()

    def result(pg: Any) -> Any:
        pg.consume_input()
        while pg.is_busy():
            wait(pg)
        return pg.get_result()

    def copy_extended(c: psycopg.Connection[Any]) -> list[bytes]:
        pg = c.pgconn
        pg.send_query_params(f"COPY ({PUBLIC}) TO STDOUT (FORMAT csv)".encode(), None)
        while pg.flush():
            select.select([], [pg.socket], [], 1)
        res = result(pg)
        assert res is not None and res.status == psycopg.pq.ExecStatus.COPY_OUT, res
        lines = []
        while True:
            n, data = pg.get_copy_data(1)
            if n == 0:
                wait(pg)
                continue
            if n < 0:
                break
            lines.append(bytes(data))
        done = result(pg)
        assert done is not None and done.command_status == b"COPY 5"
        assert result(pg) is None
        return lines

    with psycopg.connect(demo_dsn, autocommit=True) as pg:
        truth = copy_extended(pg)
    assert copy_extended(conn) == truth

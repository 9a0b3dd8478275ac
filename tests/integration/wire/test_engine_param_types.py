"""A Parse parameter that nothing types gets PostgreSQL's 42P18, through dpsql as directly.

PostgreSQL gives a prepared statement ``max(declared types, highest $n)`` parameters and refuses
at Parse (42P18 "could not determine data type of parameter $n", the first one) any that the
statement does not use and the Parse message does not type: ``SELECT $2`` without a type for
``$1``, ``SELECT 1`` with one unspecified type. Each case runs through libpq (psycopg's ``pq``)
and asyncpg against the real PostgreSQL of the test session and against ``dpsql serve``
(in-process, real engine) on the same demo data; the SQLSTATE, the message and, for accepted
statements, the ParameterDescription and the RowDescription's types (Parse's types for used
parameters type the result columns as they do in PostgreSQL) must agree.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import pq

from tests.conftest import IN_CI
from tests.helpers import analyst_dsn, served_engine

INT4, TEXT = 23, 25
PRIVATE = "SELECT count(*) FROM pums WHERE age > $2"
PUBLIC = "SELECT name FROM regions WHERE code = $2"
CASES: dict[str, tuple[str, list[int] | None]] = {
    "$2 only": ("SELECT $2", None),
    "$2 only, $1 typed": ("SELECT $2", [INT4]),
    "$2 only, $1 unspecified": ("SELECT $2", [0, INT4]),
    "$2 only, $1 unknown": ("SELECT $2", [705]),
    "extra unspecified type": ("SELECT $1", [0, 0]),
    "extra typed type": ("SELECT $1", [TEXT, INT4]),
    "no placeholder, unspecified type": ("SELECT 1", [0]),
    "no placeholder, typed": ("SELECT 1", [INT4]),
    "private, $2 only": (PRIVATE, None),
    "private, $1 typed": (PRIVATE, [INT4, INT4]),
    "public, $2 only": (PUBLIC, None),
    "EXPLAIN, $2 only": ("EXPLAIN " + PRIVATE, None),
    "gap: $3 and $1": ("SELECT $3::int, $1::int", None),
    "used, typed: the column's type": ("SELECT $1", [INT4]),
    "used, typed numeric, aliased": ("SELECT $1 AS x, $2", [1700, 0]),
    "used, typed, compared": ("SELECT name FROM regions WHERE code = $1", [TEXT]),
    "used, typed, cast": ("SELECT $1::text", [INT4]),
    "session statement, unspecified type": ("SHOW search_path", [0]),
    "transaction statement, unspecified type": ("BEGIN", [0]),
}


@pytest.fixture(scope="module")
def dsns(demo_dsn: str, demo_policy: Any) -> Iterator[tuple[str, str]]:
    """(PostgreSQL, dpsql) DSNs on the same data."""
    with served_engine(demo_policy, demo_dsn) as srv:
        yield demo_dsn, analyst_dsn(srv.port)


def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
    """The one result of the request just sent, waited for without blocking in libpq (the
    dpsql server runs in this process: a blocking libpq call may hold the GIL it needs)."""
    deadline = time.monotonic() + 30
    while pgconn.flush() or pgconn.consume_input() or pgconn.is_busy():
        assert time.monotonic() < deadline, "no answer within 30 s"
        time.sleep(0.002)
    r = pgconn.get_result()
    assert r is not None and pgconn.get_result() is None
    return r


def _parse(dsn: str, sql: str, types: list[int] | None) -> tuple[str | None, str | None, Any]:
    """(SQLSTATE, message, (parameter types, column types)) of a Parse (libpq
    PQprepare) + Describe."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.pgconn.send_prepare(b"s", sql.encode(), types)
        r = _result(c.pgconn)
        f = pq.DiagnosticField
        state, msg = r.error_field(f.SQLSTATE), r.error_field(f.MESSAGE_PRIMARY)
        if r.status != pq.ExecStatus.COMMAND_OK:
            assert r.status == pq.ExecStatus.FATAL_ERROR
            return (state or b"").decode(), (msg or b"").decode(), None
        c.pgconn.send_describe_prepared(b"s")
        d = _result(c.pgconn)
        assert d.status == pq.ExecStatus.COMMAND_OK, d.error_message
        params = [d.param_type(i) for i in range(d.nparams)]
        return None, None, (params, [d.ftype(i) for i in range(d.nfields)])


@pytest.mark.parametrize("name", CASES)
def test_parse_answers_as_postgresql(dsns: tuple[str, str], name: str) -> None:
    sql, types = CASES[name]
    pg, dpsql = (_parse(dsn, sql, types) for dsn in dsns)
    assert dpsql == pg


EXECUTE = {
    "$2 only, $1 typed int4": ("SELECT $2", [INT4], [b"5", b"x"]),
    "$2 only, $1 typed text": ("SELECT $2", [TEXT], [b"a", b"x"]),
    "$2 only, private": (PRIVATE.replace("count(*)", "count(*) > -1e9"), [INT4], [b"1", b"30"]),
    "$3 only, typed": ("SELECT $3::int4 + 1", [TEXT, INT4], [b"a", b"2", b"40"]),
}


@pytest.mark.parametrize("name", EXECUTE)
def test_a_statement_with_an_unused_typed_parameter_runs(dsns: tuple[str, str], name: str) -> None:
    """As PostgreSQL, dpsql runs it (the unused value is checked against its type, then
    ignored), also on its fast path that passes public parameters upstream as values."""
    sql, types, values = EXECUTE[name]
    answers = []
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.pgconn.send_prepare(b"s", sql.encode(), types)
            assert _result(c.pgconn).status == pq.ExecStatus.COMMAND_OK
            for _ in range(2):  # the second time from dpsql's memo
                c.pgconn.send_query_prepared(b"s", values)
                r = _result(c.pgconn)
                assert r.status == pq.ExecStatus.TUPLES_OK, r.error_message
                answers.append([r.get_value(0, j) for j in range(r.nfields)])
    assert answers[2:] == answers[:2]


def test_an_untyped_unused_parameter_is_the_first_one_named(dsns: tuple[str, str]) -> None:
    got = _parse(dsns[1], "SELECT $3::int, $1::int", None)
    assert got == ("42P18", "could not determine data type of parameter $2", None)


def test_asyncpg(dsns: tuple[str, str]) -> None:
    if importlib.util.find_spec("asyncpg") is None:
        if IN_CI:
            pytest.fail("asyncpg is not installed")
        pytest.skip("asyncpg is not installed")
    import asyncpg  # type: ignore[import-untyped]

    async def answer(dsn: str, sql: str) -> tuple[str, str] | list[int]:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        c = await asyncpg.connect(
            host=info.get("host"), port=int(info.get("port") or 5432), user=info.get("user"),
            password=info.get("password"), database=info.get("dbname"), ssl=False,
        )  # fmt: skip
        try:
            st = await c.prepare(sql)
            return [t.oid for t in st.get_parameters()]
        except asyncpg.PostgresError as e:
            return e.sqlstate, e.args[0]
        finally:
            await c.close()

    for sql in ("SELECT $2", PRIVATE, "SELECT $2::int4, $1::int4"):
        pg, dpsql = (asyncio.run(answer(dsn, sql)) for dsn in dsns)
        assert dpsql == pg, sql
    assert asyncio.run(answer(dsns[1], "SELECT $2")) == (
        "42P18",
        "could not determine data type of parameter $1",
    )

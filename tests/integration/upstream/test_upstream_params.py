"""Parameters passed to the upstream as values (dpsql.wire.params.upstream_param) and the fast
path's own connections (dpsql.wire.upstream).

Real PostgreSQL. The property: for a public statement, running ``tree.sql()`` with the values as
typed parameters gives PostgreSQL's answer for the engine's inlined literals (``bind``): the same
rows in the same types, or (only where PostgreSQL cannot type a bare parameter) a class-42 error,
after which the fast path uses the literal form.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import stat
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import sqlglot

from dpsql.engine import Engine
from dpsql.errors import DpsqlError, InvalidParameter
from dpsql.session import SessionContext
from dpsql.sql.bind import bind, literal
from dpsql.wire.params import upstream_param, upstream_params
from dpsql.wire.upstream import AsyncUpstream, _private_socket

T = TypeVar("T")

STATEMENTS = (
    "SELECT $1 AS v",
    "SELECT $1 AS a, $2 AS b",
    "SELECT -($1 + 0) AS v",
    "SELECT $1 + 1 AS v",
    "SELECT $1::text || 'x' AS v",
    "SELECT pg_typeof($1)::text AS t",
    "SELECT ARRAY[$1, $1] AS v",
    "SELECT CASE WHEN $1 IS NOT DISTINCT FROM $1 THEN 1 END AS v",
    "SELECT $1 IS NULL AS v",
    "SELECT COALESCE($1, $1) AS v",
    "SELECT * FROM (VALUES (1), (2)) AS t(x) LIMIT $1",
)
VALUES: tuple[Any, ...] = (
    0, 7, -5, 2**31 - 1, 2**31, -(2**31), 2**63 - 1, 2**63, 2**70, True, False, None, 1.5, -0.0,
    1e300, 1e16, Decimal("-1.50"), Decimal("100"), Decimal("1E+2"), "it's", "", "a\\b", "ü'\"",
    "42", dt.date(2024, 2, 29), dt.datetime(2024, 1, 2, 3, 4, 5),
    dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.UTC),
)  # fmt: skip


def _run(coro: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(coro())  # type: ignore[arg-type]


def _literal(pg: psycopg.Connection[Any], sql: str, values: Sequence[Any]) -> Any:
    text = bind(sqlglot.parse_one(sql, read="postgres"), values).sql("postgres")
    try:
        cur = pg.execute(text.encode(), prepare=False)
        return [(d.name, d.type_code) for d in cur.description or ()], cur.fetchall()
    except psycopg.Error as e:
        return e.sqlstate


def test_upstream_param_refuses_what_literal_refuses() -> None:
    for bad in (float("inf"), float("nan"), Decimal("NaN"), "a\x00b", b"x", dt.time(1)):
        with pytest.raises(InvalidParameter) as want:
            literal(bad)
        with pytest.raises(InvalidParameter) as got:
            upstream_param(bad)
        assert got.value.message == want.value.message
    # a list (x = ANY(%s), 1a8b787) has a literal, ARRAY[...], and no upstream parameter form
    # (a public statement with one: test_bi_tool_wire.test_any_of_a_list_in_a_public_statement)
    assert literal([1, 2]).sql("postgres") == "ARRAY[1, 2]"
    with pytest.raises(InvalidParameter):
        upstream_param([1])


def test_parameters_read_as_the_inlined_literals(pg_admin_dsn: str) -> None:
    async def go() -> list[str]:
        up = AsyncUpstream(pg_admin_dsn, statement_timeout_ms=5000, max_size=2)
        await up.open()
        fell_back = []
        try:
            with psycopg.connect(pg_admin_dsn, autocommit=True) as pg:
                for sql in STATEMENTS:
                    n = sql.count("$2") and 2 or 1
                    for v in VALUES:
                        values = (v,) * n if n == 1 else (v, "b")
                        want = _literal(pg, sql, values)
                        texts, types = upstream_params(values)
                        tree_sql = sqlglot.parse_one(sql, read="postgres").sql("postgres")
                        for _ in range(2):  # unnamed, then a prepared statement
                            try:
                                rows = await up.run(tree_sql, texts, types, fmt=None)
                            except DpsqlError as e:
                                if e.sqlstate.startswith("42") and want != e.sqlstate:
                                    fell_back.append(f"{sql} {v!r}")
                                    continue
                                assert e.sqlstate == want, (sql, v)
                                continue
                            got = [(c.name, c.type_oid) for c in rows.columns], rows.rows
                            assert got == want, (sql, v)
        finally:
            await up.close()
        return fell_back

    fell_back = _run(go)
    # only a bare parameter PostgreSQL cannot type (`$1 IS NULL` with an untyped value)
    assert all("IS NULL" in f or "pg_typeof" in f or "COALESCE" in f for f in fell_back), fell_back


def test_parameterized_sql_only_for_public_statements(demo_dsn: str, demo_policy: Any) -> None:
    engine = Engine(demo_policy, demo_dsn, pool_size=1)
    try:
        ctx = SessionContext(analyst="analyst")
        public = engine.prepare("SELECT name FROM regions WHERE code = $1", "analyst")
        # not before the statement was checked against the upstream's own functions (a worker
        # thread's runnable_sql does it: the fast path can't read the upstream's catalog)
        assert engine.parameterized_sql(public, ctx) is None
        engine.runnable_sql(public, ctx, ("x",))
        assert engine.parameterized_sql(public, ctx) == "SELECT name FROM regions WHERE code = $1"
        catalog = engine.prepare("SELECT relname FROM pg_class WHERE relname = $1", "analyst")
        assert catalog.kind == "catalog" and engine.parameterized_sql(catalog, ctx) is None
        no_params = engine.prepare("SELECT name FROM regions", "analyst")
        assert engine.parameterized_sql(no_params, ctx) is None
        names = engine.prepare("SELECT $1::regclass", "analyst")  # names objects: catalog
        assert engine.parameterized_sql(names, ctx) is None
        for sql in (  # a constant there is not read as a parameter would be
            "SELECT code, name FROM regions ORDER BY $1",
            "SELECT code FROM regions GROUP BY $1",
            "SELECT DISTINCT ON ($1) code FROM regions",
            "SELECT code FROM regions GROUP BY ROLLUP ($1)",
            "SELECT -$1 AS v FROM regions",
            "SELECT -($1) AS v FROM regions",
        ):
            prepared = engine.prepare(sql, "analyst")
            assert prepared.kind == "public" and engine.parameterized_sql(prepared, ctx) is None
        ordered = engine.prepare("SELECT code FROM regions ORDER BY code LIMIT $1", "analyst")
        engine.runnable_sql(ordered, ctx, (1,))
        assert engine.parameterized_sql(ordered, ctx) is not None
    finally:
        engine.close()


def test_prepared_statement_survives_a_result_type_change(make_db: Callable[[str], str]) -> None:
    dsn = make_db("upstream_ddl")
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (x int)")
        pg.execute("INSERT INTO t VALUES (1)")

    async def go() -> list[Any]:
        up = AsyncUpstream(dsn, statement_timeout_ms=5000, max_size=1)
        await up.open()
        out: list[Any] = []
        try:
            for _ in range(3):
                out.append((await up.run("SELECT * FROM t WHERE x = $1", [b"1"], [0])).rows)
            with psycopg.connect(dsn, autocommit=True) as pg:
                pg.execute("ALTER TABLE t ALTER COLUMN x TYPE text")
            for _ in range(3):
                try:
                    out.append((await up.run("SELECT * FROM t WHERE x = $1", [b"1"], [0])).rows)
                except DpsqlError as e:
                    out.append(e.sqlstate)
        finally:
            await up.close()
        return out

    got = _run(go)
    assert got[:3] == [[(1,)]] * 3
    assert got[-1] == [("1",)], got  # at worst one error, then prepared anew


def test_local_socket_only_in_a_private_directory(tmp_path: Path, pg_admin_dsn: str) -> None:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / ".s.PGSQL.5999"))
        os.chmod(tmp_path, 0o700)
        assert _private_socket(str(tmp_path), 5999)
        os.chmod(tmp_path, 0o777 | stat.S_ISVTX)  # like /tmp: anyone may have put it there
        assert not _private_socket(str(tmp_path), 5999)
        assert not _private_socket(str(tmp_path), 6000)
    finally:
        sock.close()

    async def go() -> tuple[str, Any]:
        up = AsyncUpstream(pg_admin_dsn, statement_timeout_ms=5000, max_size=2)
        await up.open()
        try:
            await asyncio.gather(*(up.run("SELECT pg_sleep(0.05)") for _ in range(2)))
            return up.dsn, (await up.run("SELECT 1 AS one")).rows
        finally:
            await up.close()

    dsn, rows = _run(go)
    assert rows == [(1,)]
    host = psycopg.conninfo.conninfo_to_dict(dsn).get("host", "")
    # the test cluster (dpsql.execute.embedded) keeps its socket next to its data, mode 0700
    assert str(host).startswith("/") or "DPSQL_TEST_DSN" in os.environ

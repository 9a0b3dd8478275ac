"""psycopg 3, asyncpg, pg8000, SQLAlchemy 2 and pandas against ``dpsql serve``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest

from tests.compat.conftest import (
    AGGREGATE,
    DP_NODE,
    EXPLAIN_ANALYZE,
    EXPLAIN_PRIVATE,
    EXPLAIN_PRIVATE_JSON,
    EXPLAIN_PRIVATE_PARAM,
    EXPLAIN_PUBLIC,
    EXPLAIN_PUBLIC_JSON,
    EXPLAIN_PUBLIC_PARAM,
    HIDDEN,
    PUMS_COLUMNS,
    RAW,
    REFUSED_SQLSTATE,
    VISIBLE_TABLES,
    Server,
    require,
)

TABLES_SQL = (
    "SELECT table_name FROM information_schema.tables "
    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
)
COLUMNS_SQL = (
    "SELECT column_name FROM information_schema.columns WHERE table_name = 'pums' "
    "ORDER BY ordinal_position"
)


GROUPED = "SELECT sex, count(*) AS n, avg(age) AS mean_age FROM pums GROUP BY sex ORDER BY sex"


def plausible_groups(rows: Any) -> None:
    """Two groups (the declared keys of sex), each with a count and a mean age in [0, 100]."""
    assert [int(r[0]) for r in rows] == [0, 1], rows
    for r in rows:
        assert float(r[1]) > 0 and 0 <= float(r[2]) <= 100, r


def plausible_count(value: Any, server: Server) -> None:
    """At the demo's epsilon (1 per query, sensitivity 1) noise beyond 100 has probability ~e^-100."""
    assert abs(float(value) - server.true_count) < 100, (value, server.true_count)


def sqlstate_in_chain(err: BaseException | None) -> str | None:
    """The SQLSTATE of the driver error somewhere in an exception's cause chain."""
    while err is not None:
        state = getattr(err, "sqlstate", None) or getattr(
            getattr(err, "orig", None), "sqlstate", None
        )
        if state:
            return str(state)
        err = err.__cause__ or err.__context__
    return None


HISTORY = "SELECT * FROM dpsql.history"  # the analyst's releases (costs no budget)


def dp_text_plan(lines: list[str]) -> None:
    """dpsql's text plan: one row per line, the DP root first, nothing read."""
    assert lines[0].startswith(DP_NODE), lines
    assert any("Data read: none" in line for line in lines), lines


def pg_text_plan(lines: list[str]) -> None:
    """PostgreSQL's own text plan of a public query."""
    assert any("Scan on regions" in line for line in lines), lines
    assert not any(DP_NODE in line for line in lines), lines


def json_plan(value: Any) -> dict[str, Any]:
    """The root node of an EXPLAIN (FORMAT JSON) value (parsed or as text), PostgreSQL's shape."""
    doc = json.loads(value) if isinstance(value, str) else value
    plan = doc[0]["Plan"]
    for key in ("Node Type", "Startup Cost", "Total Cost", "Plan Rows", "Plan Width", "Plans"):
        assert key in plan, (key, plan)
    return dict(plan)


def dp_json_plan(value: Any) -> None:
    plan = json_plan(value)
    assert plan["Node Type"] == DP_NODE and plan["Reads Data"] is False, plan
    assert plan["Total Cost"] == 0 and plan["Plan Rows"] == 1  # nothing estimated from data


def pg_json_plan(value: Any) -> None:
    assert json_plan(value)["Node Type"] == "Aggregate"


def no_hidden(names: Any) -> None:
    text = repr(names).lower()
    for word in HIDDEN:
        assert word not in text


def test_psycopg(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn, autocommit=True) as conn:
        plausible_count(conn.execute(AGGREGATE).fetchone()[0], dpsql_server)  # type: ignore[index]
        plausible_count(conn.execute(AGGREGATE, prepare=True).fetchone()[0], dpsql_server)  # type: ignore[index]
        with conn.cursor(binary=True) as cur:
            plausible_count(cur.execute(AGGREGATE).fetchone()[0], dpsql_server)  # type: ignore[index]
            plausible_groups(cur.execute(GROUPED).fetchall())
        plausible_groups(conn.execute(GROUPED).fetchall())
        with conn.cursor() as cur:  # server-side binding with a parameter
            row = cur.execute("SELECT count(*) FROM pums WHERE age >= %s", (0,)).fetchone()
            plausible_count(row[0], dpsql_server)  # type: ignore[index]
        with pytest.raises(psycopg.Error) as info:
            conn.execute(RAW)
        assert info.value.sqlstate == REFUSED_SQLSTATE
        assert info.value.diag.message_hint
        tables = {r[0] for r in conn.execute(TABLES_SQL)}
        assert tables == VISIBLE_TABLES
        cols = [r[0] for r in conn.execute(COLUMNS_SQL)]
        assert cols == PUMS_COLUMNS
        info_type = psycopg.types.TypeInfo.fetch(conn, "int4")
        assert info_type is not None and info_type.oid == 23


def test_psycopg_explain(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn, autocommit=True) as conn:
        releases = conn.execute(HISTORY).fetchall()
        dp_text_plan([r[0] for r in conn.execute(EXPLAIN_PRIVATE)])
        pg_text_plan([r[0] for r in conn.execute(EXPLAIN_PUBLIC)])
        cur = conn.execute(EXPLAIN_PRIVATE_JSON)
        assert cur.description is not None and cur.description[0].name == "QUERY PLAN"
        dp_json_plan(cur.fetchone()[0])  # type: ignore[index]
        pg_json_plan(conn.execute(EXPLAIN_PUBLIC_JSON).fetchone()[0])  # type: ignore[index]
        with conn.cursor(binary=True) as cur:
            dp_json_plan(cur.execute(EXPLAIN_PRIVATE_JSON).fetchone()[0])  # type: ignore[index]
        # server-side binding: Parse "... $1", Bind 18 (and prepared: Parse once, Bind twice)
        private, public = (
            q.replace("$1", "%s") for q in (EXPLAIN_PRIVATE_PARAM, EXPLAIN_PUBLIC_PARAM)
        )
        for prepare in (False, True, True):
            dp_text_plan([r[0] for r in conn.execute(private, (18,), prepare=prepare)])
            pg_text_plan([r[0] for r in conn.execute(public, ("N",), prepare=prepare)])
        with pytest.raises(psycopg.Error) as info:
            conn.execute(EXPLAIN_ANALYZE)
        assert info.value.sqlstate == REFUSED_SQLSTATE and info.value.diag.message_hint
        assert conn.execute(HISTORY).fetchall() == releases  # EXPLAIN charged nothing


def test_psycopg_transactions_and_savepoints(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn) as conn:
        with conn.transaction():
            plausible_count(conn.execute(AGGREGATE).fetchone()[0], dpsql_server)  # type: ignore[index]
            with conn.transaction():  # SAVEPOINT / RELEASE
                conn.execute("SELECT 1")
        conn.rollback()


def test_asyncpg(dpsql_server: Server) -> None:
    require("py:asyncpg")
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(dpsql_server.url, ssl=False)
        try:
            plausible_count(await conn.fetchval(AGGREGATE), dpsql_server)
            stmt = await conn.prepare("SELECT count(*) FROM pums WHERE age >= $1")
            plausible_count(await stmt.fetchval(0), dpsql_server)
            plausible_groups(await conn.fetch(GROUPED))  # binary results
            with pytest.raises(asyncpg.PostgresError) as info:
                await conn.fetch(RAW)
            assert info.value.sqlstate == REFUSED_SQLSTATE
            tables = {r[0] for r in await conn.fetch(TABLES_SQL)}
            assert tables == VISIBLE_TABLES
            cols = [r[0] for r in await conn.fetch(COLUMNS_SQL)]
            assert cols == PUMS_COLUMNS
        finally:
            await conn.close()

    asyncio.run(run())


def test_asyncpg_explain(dpsql_server: Server) -> None:
    require("py:asyncpg")
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(dpsql_server.url, ssl=False)
        try:
            releases = await conn.fetch(HISTORY)
            dp_text_plan([r[0] for r in await conn.fetch(EXPLAIN_PRIVATE)])
            pg_text_plan([r[0] for r in await conn.fetch(EXPLAIN_PUBLIC)])
            dp_json_plan(await conn.fetchval(EXPLAIN_PRIVATE_JSON))  # json comes as text
            pg_json_plan(await conn.fetchval(EXPLAIN_PUBLIC_JSON))
            stmt = await conn.prepare(EXPLAIN_PRIVATE_PARAM)  # parameter types from the server
            assert [a.name for a in stmt.get_attributes()] == ["QUERY PLAN"]
            alone = await conn.prepare(EXPLAIN_PRIVATE_PARAM.removeprefix("EXPLAIN "))
            assert stmt.get_parameters() == alone.get_parameters()  # as the statement's own
            for age in (18, 65):
                dp_text_plan([r[0] for r in await stmt.fetch(age)])
            stmt = await conn.prepare(EXPLAIN_PUBLIC_PARAM)
            pg_text_plan([r[0] for r in await stmt.fetch("N")])
            with pytest.raises(asyncpg.PostgresError) as info:
                await conn.fetch(EXPLAIN_ANALYZE)
            assert info.value.sqlstate == REFUSED_SQLSTATE
            assert await conn.fetch(HISTORY) == releases
        finally:
            await conn.close()

    asyncio.run(run())


def test_pg8000(dpsql_server: Server) -> None:
    require("py:pg8000")
    import pg8000.native

    s = dpsql_server
    conn = pg8000.native.Connection(
        s.user, host=s.host, port=s.port, database=s.dbname, password=s.password
    )
    try:
        plausible_count(conn.run(AGGREGATE)[0][0], dpsql_server)
        plausible_count(
            conn.run("SELECT count(*) FROM pums WHERE age >= :a", a=0)[0][0], dpsql_server
        )
        with pytest.raises(pg8000.native.DatabaseError) as info:
            conn.run(RAW)
        assert info.value.args[0]["C"] == REFUSED_SQLSTATE
        assert {r[0] for r in conn.run(TABLES_SQL)} == VISIBLE_TABLES
        dp_text_plan([r[0] for r in conn.run(EXPLAIN_PRIVATE_PARAM.replace("$1", ":a"), a=18)])
        dp_json_plan(conn.run(EXPLAIN_PRIVATE_JSON)[0][0])
        with pytest.raises(pg8000.native.DatabaseError) as info:
            conn.run(EXPLAIN_ANALYZE)
        assert info.value.args[0]["C"] == REFUSED_SQLSTATE
    finally:
        conn.close()


def test_sqlalchemy(dpsql_server: Server) -> None:
    require("py:sqlalchemy")
    import sqlalchemy as sa
    from sqlalchemy import orm

    engine = sa.create_engine(dpsql_server.url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        insp = sa.inspect(engine)
        assert set(insp.get_table_names()) == VISIBLE_TABLES
        cols = [c["name"] for c in insp.get_columns("pums")]
        assert cols == PUMS_COLUMNS
        types = {c["name"]: type(c["type"]).__name__ for c in insp.get_columns("purchases")}
        assert types["amount"] == "NUMERIC" and types["purchased_at"] == "DATE", types
        assert insp.get_pk_constraint("pums")["constrained_columns"] == []
        assert insp.get_foreign_keys("purchases")[0]["referred_table"] == "regions"
        no_hidden(insp.get_indexes("purchases"))
        md = sa.MetaData()
        pums = sa.Table("pums", md, autoload_with=engine)
        with engine.connect() as c:
            plausible_count(
                c.execute(sa.select(sa.func.count()).select_from(pums)).scalar(), dpsql_server
            )
            with pytest.raises(sa.exc.DBAPIError) as info:
                c.execute(sa.select(pums)).all()
            assert info.value.orig.sqlstate == REFUSED_SQLSTATE  # type: ignore[union-attr]
        with engine.connect() as c:  # column discovery (Superset, ORMs): free, no row
            # (a literal LIMIT 0, as Superset and pandas send it, and SQLAlchemy's bound
            # LIMIT $1::INTEGER with 0: classified once its value is bound)
            res = c.execute(sa.text("SELECT * FROM pums LIMIT 0"))
            assert list(res.keys()) == PUMS_COLUMNS and res.all() == []
            res = c.execute(sa.select(pums).limit(0))
            assert list(res.keys()) == PUMS_COLUMNS and res.all() == []
        per_query = sa.create_engine(  # epsilon per connection, as Superset's extra options
            engine.url, connect_args={"options": "-c dpsql.epsilon=0.5"}
        )
        try:
            with per_query.connect() as c:
                assert c.execute(sa.text("SHOW dpsql.epsilon")).scalar() == "0.5"
                plan = "\n".join(c.execute(sa.text("EXPLAIN " + AGGREGATE)).scalars())
                assert "epsilon=0.5" in plan
        finally:
            per_query.dispose()

        class Base(orm.DeclarativeBase):
            pass

        class Region(Base):
            __tablename__ = "regions"
            code = sa.Column(sa.Text, primary_key=True)
            name = sa.Column(sa.Text)

        with orm.Session(engine) as s:
            assert {r.code for r in s.scalars(sa.select(Region))} == {"N", "S", "E", "W", "C"}
            plausible_count(
                s.execute(sa.select(sa.func.count()).select_from(pums)).scalar(), dpsql_server
            )
    finally:
        engine.dispose()


def test_pandas(dpsql_server: Server) -> None:
    require("py:pandas")
    import pandas as pd
    import sqlalchemy as sa

    engine = sa.create_engine(dpsql_server.url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        df = pd.read_sql(AGGREGATE, engine)
        assert df.shape == (1, 1)
        plausible_count(df.iloc[0, 0], dpsql_server)
        with pytest.raises(pd.errors.DatabaseError) as info:  # pandas wraps the driver error
            pd.read_sql(RAW, engine)
        assert sqlstate_in_chain(info.value) == REFUSED_SQLSTATE
        tables = pd.read_sql(TABLES_SQL, engine)
        assert set(tables["table_name"]) == VISIBLE_TABLES
        grouped = pd.read_sql(
            "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex "
            "ORDER BY sex",
            engine,
            dtype={"avg_income": "float64"},
        )
        assert grouped["sex"].tolist() == [0, 1]  # the declared keys
        assert str(grouped["n"].dtype) == "int64" and str(grouped["sex"].dtype) == "int64"
        assert str(grouped["avg_income"].dtype) == "float64"
        empty = pd.read_sql("SELECT * FROM pums LIMIT 0", engine)  # pandas' column discovery
        assert list(empty.columns) == PUMS_COLUMNS and len(empty) == 0
        keys = pd.read_sql("SELECT DISTINCT educ FROM pums ORDER BY educ", engine)
        assert keys["educ"].tolist() == list(range(1, 17))
    finally:
        engine.dispose()


def test_asyncpg_array_parameter(dpsql_server: Server) -> None:
    """asyncpg's documented IN list, ``= ANY($1::text[])`` with a Python list (binary array
    parameter), is an IN list of its values (newcomer22 #13: was 0A000 'ANY is not supported in
    WHERE'); the groups are the listed keys only."""
    require("py:asyncpg")
    import asyncpg

    sql = (
        "SELECT category, count(*) FROM purchases WHERE category = ANY($1::text[]) "
        "GROUP BY category ORDER BY category"
    )

    async def run() -> list[Any]:
        conn = await asyncpg.connect(dpsql_server.url, ssl=False)
        try:
            return list(await conn.fetch(sql, ["books", "travel"]))
        finally:
            await conn.close()

    rows = asyncio.run(run())
    assert [r[0] for r in rows] == ["books", "travel"], rows


def test_sqlalchemy_to_date_parameters(dpsql_server: Server) -> None:
    """SQLAlchemy binds both arguments of ``func.to_date('2025-06-01', 'YYYY-MM-DD')``
    (``TO_DATE(%(to_date_1)s::VARCHAR, %(to_date_2)s::VARCHAR)``): public constants, answered
    as the literal form is (newcomer22 #12: was 0A000 'TO_DATE(...) is not supported')."""
    require("py:sqlalchemy")
    import sqlalchemy as sa

    engine = sa.create_engine(dpsql_server.url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        purchases = sa.Table("purchases", sa.MetaData(), autoload_with=engine)
        since = purchases.c.purchased_at >= sa.func.to_date("2025-06-01", "YYYY-MM-DD")
        with engine.connect() as c:
            n = c.execute(sa.select(sa.func.count()).select_from(purchases).where(since)).scalar()
            assert n is not None and float(n) > 0, n
            plain = sa.text("SELECT count(*) FROM purchases WHERE purchased_at >= TO_DATE(:d, :f)")
            m = c.execute(plain, {"d": "2025-06-01", "f": "YYYY-MM-DD"}).scalar()
            assert m is not None and float(m) > 0, m
    finally:
        engine.dispose()

"""SQL cursors through real drivers: psycopg's server-side cursors (``conn.cursor(name=...)``:
DECLARE, Describe of the cursor's portal, FETCH FORWARD n, CLOSE), SQLAlchemy's
``stream_results=True`` and pandas' ``chunksize`` on it, and the simple protocol's DECLARE /
FETCH / MOVE / CLOSE. A private aggregate is answered (and charged) once, at DECLARE."""

from __future__ import annotations

import psycopg
import pytest

from tests.compat.conftest import Server, require
from tests.compat.test_external_clients import psql

REGIONS = "SELECT code, name FROM regions ORDER BY code"
HISTORY_SQL = "SELECT * FROM dpsql.history"  # the analyst's releases (costs no budget)
GROUPED = "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex ORDER BY sex"


def _releases(conn: psycopg.Connection) -> int:  # type: ignore[type-arg]
    return len(conn.execute(HISTORY_SQL).fetchall())


def test_psycopg_server_side_cursor(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn) as conn:
        every = conn.execute(REGIONS).fetchall()
        conn.commit()
        with conn.cursor(name="regions_c") as cur:  # in a transaction (psycopg's BEGIN)
            cur.execute(REGIONS)
            assert [d.name for d in cur.description or []] == ["code", "name"]
            got = cur.fetchmany(2)
            got += cur.fetchmany(2)
            got += cur.fetchall()
            assert got == every and len(every) == 5
        conn.commit()
        before = _releases(conn)
        with conn.cursor(name="grouped_c") as cur:
            cur.itersize = 1
            cur.execute(GROUPED)
            rows = list(cur)  # FETCH FORWARD 1 until empty
        assert [r[0] for r in rows] == [0, 1] and all(r[1] > 0 for r in rows)
        conn.commit()
        assert _releases(conn) == before + 1  # charged once, at DECLARE
        with conn.cursor(name="param_c") as cur:  # DECLARE with $1 (the extended protocol)
            cur.execute("SELECT code FROM regions WHERE code > %s ORDER BY code", ("M",))
            assert cur.fetchall() == [("N",), ("S",), ("W",)]
        conn.commit()


def test_cursor_outside_a_transaction_block(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info, conn.cursor(name="c") as cur:
            cur.execute(REGIONS)
        assert info.value.sqlstate == "25P01"
        assert info.value.diag.message_primary == (
            "DECLARE CURSOR can only be used in transaction blocks"
        )
        with conn.cursor(name="held", withhold=True) as cur:  # WITH HOLD: allowed, outlives it
            cur.execute(REGIONS)
            assert len(cur.fetchmany(3)) == 3
            conn.execute("SELECT 1")  # another statement (and Sync) between the fetches
            assert len(cur.fetchall()) == 2


def test_simple_protocol_declare_fetch_move_close(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn, cursor_factory=psycopg.ClientCursor) as conn:
        cur = conn.cursor()
        cur.execute("DECLARE c SCROLL CURSOR FOR " + REGIONS)
        assert cur.statusmessage == "DECLARE CURSOR"
        assert cur.execute("FETCH 2 FROM c").fetchall() == [("C", "Central"), ("E", "East")]
        assert cur.statusmessage == "FETCH 2"
        cur.execute("MOVE FORWARD 1 IN c")
        assert cur.statusmessage == "MOVE 1"
        last = cur.execute("FETCH LAST FROM c").fetchall()
        prior = cur.execute("FETCH PRIOR FROM c").fetchall()
        assert len(last) == 1 and len(prior) == 1 and prior[0][0] < last[0][0]
        assert cur.execute("FETCH ALL FROM c").fetchall() == last
        assert cur.statusmessage == "FETCH 1"
        cur.execute("CLOSE c")
        assert cur.statusmessage == "CLOSE CURSOR"
        with pytest.raises(psycopg.Error) as info:
            cur.execute("FETCH 1 FROM c")
        assert info.value.sqlstate == "34000"
        assert info.value.diag.message_primary == 'cursor "c" does not exist'
        conn.rollback()
        cur.execute("DECLARE f NO SCROLL CURSOR FOR " + REGIONS)
        cur.execute("FETCH 2 FROM f")
        with pytest.raises(psycopg.Error) as info:
            cur.execute("FETCH BACKWARD 1 FROM f")
        assert info.value.sqlstate == "55000"
        conn.rollback()
        cur.execute("DECLARE k CURSOR FOR " + REGIONS)
        conn.commit()  # a cursor without HOLD closes with its transaction
        with pytest.raises(psycopg.Error) as info:
            cur.execute("FETCH 1 FROM k")
        assert info.value.sqlstate == "34000"


def test_sqlalchemy_stream_results_and_pandas_chunks(dpsql_server: Server) -> None:
    require("py:sqlalchemy")
    require("py:pandas")
    import pandas as pd
    import sqlalchemy as sa

    engine = sa.create_engine(dpsql_server.url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as c:
            res = c.execution_options(stream_results=True, max_row_buffer=2).execute(
                sa.text(REGIONS)
            )
            assert [r[0] for r in res.partitions(2) for r in r] == ["C", "E", "N", "S", "W"]
        with engine.connect() as c:
            chunks = list(
                pd.read_sql(REGIONS, c.execution_options(stream_results=True), chunksize=2)
            )
            assert [len(ch) for ch in chunks] == [2, 2, 1]
            grouped = pd.concat(
                pd.read_sql(GROUPED, c.execution_options(stream_results=True), chunksize=1)
            )
            assert grouped["sex"].tolist() == [0, 1]
    finally:
        engine.dispose()


def test_psql_fetch_count(dpsql_server: Server) -> None:
    """psql with FETCH_COUNT reads a query through a cursor (BEGIN; DECLARE _psql_cursor NO
    SCROLL CURSOR FOR ...; FETCH FORWARD n ...; CLOSE; COMMIT)."""
    require("psql")
    out = psql(dpsql_server, "-A", "-t", "-v", "FETCH_COUNT=2", "-v", "ON_ERROR_STOP=1",
               "-c", REGIONS, "-c", GROUPED)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[:5] == ["C|Central", "E|East", "N|North", "S|South", "W|West"], out.stdout
    assert [line.split("|")[0] for line in lines[5:]] == ["0", "1"], out.stdout

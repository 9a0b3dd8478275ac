"""Text formats, identifiers and refusals as PostgreSQL gives them, through the wire.

Real engine and PostgreSQL (demo data), libpq (psycopg, text results) and psql. Properties:
a timestamptz that dpsql encodes itself (a private GROUP BY key) is written as PostgreSQL writes
it (``+00``, not Python's ``+00:00``); ``U&"..."`` identifiers name what PostgreSQL resolves them
to; an error about ``~`` names the operator, never sqlglot's ``regexp_like()``; ``COPY`` of a
private table is 42501, in binary 0A000 (``COPY (query) TO STDOUT`` answers:
test_copy_out.py), ``COPY ... FROM`` 25006 and ``DO`` 42501, each with a hint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.server.run import ServerThread
from tests.helpers import EXACT, analyst_dsn, served_engine


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    with served_engine(demo_policy, demo_dsn, noise=EXACT) as srv:
        yield srv


@pytest.fixture
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def _text(conn: psycopg.Connection[Any], sql: str) -> list[tuple[Any, ...]]:
    """Rows as the server's text (no type loaders)."""
    cur = conn.cursor()
    cur.adapters.register_loader("timestamptz", psycopg.types.string.TextLoader)
    cur.adapters.register_loader("timestamp", psycopg.types.string.TextLoader)
    return cur.execute(sql).fetchall()


def test_timestamptz_text_as_postgresql(conn: psycopg.Connection[Any], demo_dsn: str) -> None:
    sql = (
        "SELECT date_trunc('month', purchased_at::timestamptz) AS m, "
        "date_trunc('month', purchased_at::timestamp) AS t, COUNT(*) AS n FROM purchases "
        "GROUP BY 1, 2 ORDER BY 1 LIMIT 3"
    )
    got = [row[:2] for row in _text(conn, sql)]
    with psycopg.connect(demo_dsn, autocommit=True) as direct:
        direct.execute("SET TimeZone = 'UTC'")
        want = _text(
            direct,
            "SELECT DISTINCT date_trunc('month', purchased_at::timestamptz), "
            "date_trunc('month', purchased_at::timestamp) FROM purchases ORDER BY 1 LIMIT 3",
        )
    assert got == want
    assert got[0][0].endswith("+00") and not got[0][0].endswith("+00:00")


def test_unicode_escaped_identifiers(conn: psycopg.Connection[Any], demo_dsn: str) -> None:
    sql = 'SELECT U&"n\\0061me" AS U&"d\\0061t\\+000061" FROM U&"r\\0065gions" ORDER BY 1'
    got = conn.execute(sql)
    with psycopg.connect(demo_dsn) as direct:
        want = direct.execute(sql)
        assert [d.name for d in got.description or []] == [d.name for d in want.description or []]
        assert got.fetchall() == want.fetchall()
    assert conn.execute("SELECT 1 AS U&\"!0064ata\" UESCAPE '!'").description[0].name == "data"  # type: ignore[index]


def test_regex_errors_name_the_operator(conn: psycopg.Connection[Any]) -> None:
    for op in ("~", "~*", "!~"):
        with pytest.raises(psycopg.Error) as e:
            conn.execute(f"SELECT COUNT(*) FROM purchases WHERE category {op} '^b'")
        msg = str(e.value.diag.message_primary)
        assert f"operator {op} " in msg, msg
        assert "regexp" not in msg.lower()


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("COPY purchases TO STDOUT", pe.InsufficientPrivilege),  # a private table's rows
        ("COPY (SELECT COUNT(*) FROM purchases) TO STDOUT WITH BINARY", pe.FeatureNotSupported),
        ("COPY purchases FROM STDIN", pe.ReadOnlySqlTransaction),
        ("DO $$ BEGIN PERFORM 1; END $$", pe.InsufficientPrivilege),
    ],
)
def test_copy_and_do_refusals(conn: psycopg.Connection[Any], sql: str, error: type) -> None:
    with pytest.raises(error) as e:
        conn.execute(sql)
    assert e.value.diag.message_hint
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the session goes on


def test_arrays_of_type_ids_from_the_catalog(conn: psycopg.Connection[Any], demo_dsn: str) -> None:
    """pgcli's function metadata casts catalog columns of type ids to regtype[] (each element is
    guarded like ``x::regtype``); a constant array of object ids stays refused."""
    sql = (
        "SELECT p.proname, COALESCE(proallargtypes::regtype[], proargtypes::regtype[])::text[], "
        "proargtypes::regtype[] FROM pg_catalog.pg_proc p "
        "WHERE p.proname IN ('concat_ws', 'int4pl', 'generate_series') ORDER BY 1, 2"
    )
    got = conn.execute(sql)
    with psycopg.connect(demo_dsn) as direct:
        want = direct.execute(sql)
        assert [d.name for d in got.description or []] == [d.name for d in want.description or []]
        assert got.fetchall() == want.fetchall()
    with pytest.raises(pe.InsufficientPrivilege):
        conn.execute("SELECT '{1259}'::regclass[]")


def test_call_labels_as_postgresql(conn: psycopg.Connection[Any], demo_dsn: str) -> None:
    sql = (
        "SELECT now() IS NOT NULL, now(), current_timestamp, char_length('a'), strpos('ab', 'b'), "
        "substr('abc', 2), ceiling(1.5), upper('a'), x.now FROM (SELECT now()) AS x"
    )
    got = conn.execute(sql)
    with psycopg.connect(demo_dsn) as direct:
        want = direct.execute(sql)
        assert [d.name for d in got.description or []] == [d.name for d in want.description or []]


FLOATS = [1801000.0, -1801000.0, 2.5, 0.1, 1 / 3, 1e15, 123456789012345.0, 1.234567890123456e15,
          0.0001, 1e-05, -2.5e-07, 1e100, 5e-324, 1.7976931348623157e308, 0.0, -0.0, 12345.678,
          float("inf"), float("-inf"), float("nan")]  # fmt: skip


def test_float_text_as_postgresql(conn: psycopg.Connection[Any], demo_dsn: str) -> None:
    """A float8 dpsql encodes itself (an interval end with SET dpsql.show_intervals) is written
    as PostgreSQL writes it: ``1801000``, not Python's ``1801000.0``; the encoder agrees with
    PostgreSQL's own float8 output on every value of FLOATS (exponent edges, -0, specials)."""
    from dpsql.wire.encode import float_text

    with psycopg.connect(demo_dsn, autocommit=True) as direct:
        cur = direct.cursor()
        cur.adapters.register_loader("text", psycopg.types.string.TextLoader)
        want = [r[0] for r in cur.execute("SELECT unnest(%s::float8[])::text", [FLOATS])]
    assert [float_text(x).decode() for x in FLOATS] == want
    conn.execute("SET dpsql.show_intervals = on")
    cur = conn.cursor()
    cur.adapters.register_loader("float8", psycopg.types.string.TextLoader)
    row = cur.execute("SELECT SUM(amount) AS s FROM purchases").fetchone()
    assert row is not None
    low = row[1]
    assert isinstance(low, str) and not low.endswith(".0"), row
    with psycopg.connect(demo_dsn, autocommit=True) as direct:
        again = direct.execute("SELECT %s::float8::text", [float(low)]).fetchone()
    assert again == (low,)

"""An upstream database whose own defaults write values differently from what dpsql tells its
clients (DateStyle, TimeZone, IntervalStyle, bytea_output, extra_float_digits, client_encoding):
dpsql pins them on every connection it opens (dpsql/upstream/settings.py), so clients get what
the ParameterStatus messages promised, and psycopg can still read the ledger's timestamps.

Before the pin, ``DateStyle = 'SQL, DMY'`` made the wire fast path's first connection fail (psycopg
cannot read such a timestamp) and public timestamps reached clients as ``02/01/2020 12:04:05 JST``
while dpsql reported ``DateStyle ISO`` and ``TimeZone UTC``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.upstream.settings import OUTPUT_SETTINGS
from dpsql.wire.setting_values import DEFAULTS
from tests.helpers import analyst_dsn, demo_db_with_defaults, served_engine

ODD = {
    "DateStyle": "SQL, DMY",
    "TimeZone": "Asia/Tokyo",
    "IntervalStyle": "sql_standard",
    "bytea_output": "escape",
    "extra_float_digits": "-3",
    "client_encoding": "LATIN1",
}
VALUES = (
    "SELECT '2020-01-02 03:04:05+00'::timestamptz AS t, '2020-01-02'::date AS d, "
    "1.0::float8 / 3 AS f, '\\x01ff'::bytea AS b, interval '1 day 2 hours' AS i, 'é' AS e"
)
TEXT = ("2020-01-02 03:04:05+00", "2020-01-02", "0.3333333333333333", "\\x01ff",
        "1 day 02:00:00", "é")  # fmt: skip


def test_pinned_values_are_what_the_wire_server_reports() -> None:
    assert dict(OUTPUT_SETTINGS) == {k: DEFAULTS[k] for k, _ in OUTPUT_SETTINGS}


@pytest.fixture(scope="module")
def odd_dsn(make_demo_db: Callable[[str], str]) -> str:
    return demo_db_with_defaults(make_demo_db, "odd", ODD)


def _texts(conn: psycopg.Connection[Any], prepare: bool) -> tuple[str, ...]:
    cur = conn.cursor()
    cur.execute(f"SELECT t::text, d::text, f::text, b::text, i::text, e FROM ({VALUES}) v",
                prepare=prepare)  # fmt: skip
    return tuple(cur.fetchone() or ())


def test_clients_get_the_reported_formats(odd_dsn: str, demo_policy: Any) -> None:
    with (
        Ledger.open(odd_dsn, demo_policy) as ledger,
        served_engine(demo_policy, odd_dsn, ledger=ledger) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        assert conn.execute("SHOW DateStyle").fetchone() == ("ISO, MDY",)
        assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
        for prepare in (False, True, True):  # simple, then prepared (text passed through as is)
            assert _texts(conn, prepare) == TEXT
            row = conn.execute(VALUES, prepare=prepare).fetchone()
            assert row is not None
            assert row[0] == dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
            assert row[1:4] == (dt.date(2020, 1, 2), 1 / 3, b"\x01\xff")
            assert row[4:] == (dt.timedelta(days=1, hours=2), "é")
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            cur.execute(VALUES, prepare=True)
            assert cur.fetchone()[0] == dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.UTC)  # type: ignore[index]
        # a private DP aggregate and the ledger's history (timestamps psycopg must read)
        conn.execute("SET dpsql.epsilon = 0.5")
        assert len(conn.execute("SELECT COUNT(*) FROM purchases").fetchall()) == 1
        history = conn.execute("SELECT * FROM dpsql.history").fetchall()
        assert len(history) == 1
        assert conn.execute("SHOW dpsql.budget").fetchone()

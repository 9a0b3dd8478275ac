"""dpsql.wire.pg_binary writes the binary form PostgreSQL's ``*_send`` functions write, for the
date/time/interval values Python's types can't hold (kept as PostgreSQL's text: PgText).

Each text is PostgreSQL's own output (``SELECT 'value'::type``, in the output settings dpsql pins
upstream), and the expected bytes are PostgreSQL's binary of the same value (a binary cursor whose
loaders keep the raw bytes): compared exactly.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.adapt import Loader
from psycopg.pq import Format

from dpsql.errors import InternalError
from dpsql.upstream.settings import output_statements
from dpsql.wire.pg_binary import special_binary

VALUES = {
    "date": [
        "infinity", "-infinity", "20000-01-01", "5874897-12-31", "0044-03-15 BC",
        "4714-11-24 BC", "0001-01-01", "0001-12-31 BC", "2025-02-28", "2000-01-01",
    ],
    "timestamp": [
        "infinity", "-infinity", "294276-12-31 23:59:59.999999", "12000-06-01 10:20:30.5",
        "0044-03-15 12:00:00 BC", "4714-11-24 00:00:00 BC", "1999-12-31 23:59:59.000001",
    ],
    "timestamptz": [
        "infinity", "-infinity", "12000-01-01 00:00:00+00", "0044-03-15 12:00:00+05:30 BC",
        "2025-01-01 00:00:00-03:30", "294276-12-31 23:59:59.999999+00",
    ],
    "time": ["24:00:00", "00:00:00", "23:59:59.999999", "12:34:56.5"],
    "timetz": ["24:00:00+00", "24:00:00-15:59", "12:00:00+05:30", "00:00:00+15:59"],
    "interval": [
        "178000000 years", "-178000000 years", "2147483647 days", "-2147483648 days",
        "2562047788:00:54.775807", "-2562047788:00:54.775807", "1 year 2 mons 3 days 04:05:06.5",
        "-1 years +2 mons -3 days -04:05:06.000001", "00:00:00", "7 days", "-00:00:00.5",
        "6574365 years",
    ],
}  # fmt: skip
OIDS = {"date": 1082, "timestamp": 1114, "timestamptz": 1184, "time": 1083, "timetz": 1266,
        "interval": 1186}  # fmt: skip


class _Raw(Loader):
    def load(self, data: Any) -> bytes:
        return bytes(data)


class _RawBinary(_Raw):
    format = Format.BINARY


@pytest.fixture(scope="module")
def conn(pg_admin_dsn: str) -> Any:
    with psycopg.connect(pg_admin_dsn, autocommit=True) as c:
        for s in output_statements():
            c.execute(s)
        for t in OIDS:
            c.adapters.register_loader(t, _Raw)
            c.adapters.register_loader(t, _RawBinary)
        yield c


CASES = [(t, v) for t, vs in VALUES.items() for v in vs]


@pytest.mark.parametrize(("type_", "value"), CASES, ids=[f"{t}:{v}" for t, v in CASES])
def test_binary_is_postgresqls(conn: Any, type_: str, value: str) -> None:
    sql = f"SELECT %s::{type_}"
    text = conn.execute(sql, (value,)).fetchone()[0].decode()
    with conn.cursor(binary=True) as cur:
        binary = cur.execute(sql, (value,)).fetchone()[0]
    assert special_binary(OIDS[type_], text) == binary, (text, binary.hex())


def test_a_text_it_cannot_read_is_refused_plainly() -> None:
    with pytest.raises(InternalError, match="cannot be sent in binary format"):
        special_binary(1082, "not a date")


def test_a_value_psycopg_cannot_write_in_binary_is_refused_plainly() -> None:
    """Not "internal error in dpsql": the type, the way out (text format) and that a private
    answer, stored before its rows were sent, is free to ask for again."""
    from dpsql.wire.encode import encoder

    for oid, value in ((1082, "not a date"), (600, (1, 2))):
        with pytest.raises(InternalError) as e:
            encoder(oid, 1)(value)
        assert "cannot be sent in binary format" in e.value.message
        assert e.value.hint is not None and "asking again is free" in e.value.hint

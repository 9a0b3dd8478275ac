"""Verifiers, the login limiter, value encoding and parameter decoding."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from psycopg.adapt import Transformer
from psycopg.pq import Format

from dpsql.errors import InvalidBinaryRepresentation, InvalidTextRepresentation, ProtocolViolation
from dpsql.wire.auth import LoginLimiter, check_password, make_verifier, parse_verifier
from dpsql.wire.encode import decode_param, encoder, result_format
from dpsql.wire.log import fingerprint


def test_verifier_round_trip_and_policy_format() -> None:
    v = make_verifier("pw", iterations=4096)
    parsed = parse_verifier(v)
    assert parsed.iterations == 4096 and len(parsed.stored_key) == 32
    assert check_password(v, "pw") and not check_password(v, "pW")
    with pytest.raises(ValueError):
        parse_verifier("md5abc")
    assert make_verifier("pw") != make_verifier("pw")  # salted


def test_login_limiter() -> None:
    lim = LoginLimiter(max_failures=2, window_s=60, max_per_host=3)
    assert not lim.blocked("a", "h")
    lim.failed("a", "h")
    lim.failed("a", "h")
    assert lim.blocked("a", "h") and not lim.blocked("b", "h2")
    lim.failed("b", "h")
    assert lim.blocked("c", "h")  # the host limit
    lim.succeeded("a")
    assert lim.blocked("a", "h")  # still blocked by host


VALUES = [
    (16, True), (21, -3), (23, 2**31 - 1), (20, -(2**62)), (700, 1.5), (701, 1e300),
    (1700, Decimal("-12.3400")), (25, "é\n'"), (1043, "v"), (1082, dt.date(2000, 2, 29)),
    (1114, dt.datetime(2020, 1, 1, 12, 0, 0, 5)),
    (1184, dt.datetime(2020, 1, 1, tzinfo=dt.UTC)), (17, b"\x00\x01"), (1186, dt.timedelta(days=1, seconds=3)),
    (2950, __import__("uuid").UUID(int=7)), (1007, [1, 2, None]), (1009, ["a", "b c", None]),
]  # fmt: skip


@pytest.mark.parametrize("fmt", [0, 1])
@pytest.mark.parametrize(("oid", "value"), VALUES)
def test_encoder_round_trips_through_psycopg_loaders(oid: int, value: object, fmt: int) -> None:
    data = encoder(oid, fmt)(value)
    loaded = Transformer().get_loader(oid, Format(fmt)).load(data)
    assert loaded == value


def test_encoder_coerces_to_the_column_type() -> None:
    assert encoder(20, 1)(5.0) == (5).to_bytes(8, "big")
    assert encoder(1700, 0)(0.1) == b"0.1"
    assert encoder(701, 0)(Decimal("2.5")) == b"2.5"


def test_decode_param_errors() -> None:
    assert decode_param(b"12", 23, 0, 1) == 12
    assert decode_param(None, 23, 0, 1) is None
    assert decode_param(b"x", 0, 0, 1) == "x"
    with pytest.raises(InvalidTextRepresentation) as e:  # as PostgreSQL: 22P02, its words
        decode_param(b"12x", 23, 0, 2)
    assert e.value.sqlstate == "22P02"
    assert e.value.message == 'invalid input syntax for type integer: "12x"'
    assert e.value.detail == "in parameter $2"
    with pytest.raises(InvalidTextRepresentation) as e:  # no Python exception names (newcomer20)
        decode_param(b"abc", 1700, 0, 1)
    assert e.value.message == 'invalid input syntax for type numeric: "abc"'
    assert "Operation" not in str(e.value.detail)
    with pytest.raises(ProtocolViolation) as p:  # binary without a type: 08P01
        decode_param(b"\x00\x01", 0, 1, 1)
    assert p.value.sqlstate == "08P01"
    with pytest.raises(InvalidBinaryRepresentation) as b:  # as PostgreSQL: 22P03
        decode_param(b"\x00", 23, 1, 1)
    assert b.value.sqlstate == "22P03"
    assert b.value.message == "incorrect binary data format in bind parameter 1"


@pytest.mark.parametrize(
    "text",
    [
        b"2025-06-01",
        b"2025-06-01 +00",  # PgJDBC setDate (type unspecified)
        b"2025-06-01 00:00:00+00",  # PgJDBC setTimestamp on a date column
        b"2025-06-01T23:30:00.000-05:00",  # node-postgres: a JS Date (date_in drops time, zone)
        b"2025-06-01 23:59:59.999",
    ],
)
def test_date_parameter_text_is_read_as_date_in_reads_it(text: bytes) -> None:
    """PostgreSQL's ``'<text>'::date`` is 2025-06-01 for each (checked on PostgreSQL 15);
    psycopg's date loader took the bare date only (newcomer21: every JDBC and node date filter
    was 22P02)."""
    assert decode_param(text, 1082, 0, 1) == dt.date(2025, 6, 1)


def test_date_parameter_text_still_refuses_what_postgresql_refuses() -> None:
    for bad in (b"abc", b"2025-06-01 +00 x", b"June"):
        with pytest.raises(InvalidTextRepresentation) as e:
            decode_param(bad, 1082, 0, 1)
        assert e.value.message == f'invalid input syntax for type date: "{bad.decode()}"'


def test_result_format() -> None:
    assert [result_format((), 3), result_format((1,), 3), result_format((0, 1), 1)] == [0, 1, 1]


def test_fingerprint_hides_literals() -> None:
    a = fingerprint("SELECT count(*) FROM t WHERE name = 'alice' AND age > 30")
    b = fingerprint("select COUNT(*) from t where name = 'bob' and age > 99")
    assert a == b and len(a) == 16
    assert a != fingerprint("SELECT count(*) FROM t WHERE email = 'alice' AND age > 30")

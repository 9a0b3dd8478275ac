"""SUM / AVG of ``EXTRACT(field FROM d)`` and ``date_part('field', d)``: bounded by the field's
calendar range, a property of the function (dpsql/sql/sensitivity.py FIELD_RANGES), not of the
data; and typed as PostgreSQL types them (PostgreSQL 15: EXTRACT is numeric, date_part double
precision; SUM of numeric is numeric, of double precision double precision).

Before, ``SELECT SUM(EXTRACT(month FROM purchased_at)) FROM purchases`` was refused (42501
"column ... has no declared bounds, so SUM over it is unbounded": a timestamp has no numeric
bounds), and date_part's SUM would have been numeric. A private table of one row per person
(R = 1, zero noise, every value inside its field's range): dpsql's answer is PostgreSQL's to the
same text, and so is its column type (RowDescription's OID, beside ``pg_typeof``). A year,
isoyear or epoch is bounded by the column's declared bounds (words31), refused without them.
Deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import cells, unrounded
from tests.owner import exact_private
from tests.policies import PolicyMaker

FIELDS = """
EXTRACT(month FROM t) | date_part('month', t) | EXTRACT(dow FROM d) | date_part('isodow', d)
EXTRACT(hour FROM tz) | EXTRACT(second FROM t) | date_part('doy', t) | EXTRACT(week FROM d)
EXTRACT(quarter FROM tz) | EXTRACT(month FROM t) * 2 | EXTRACT(minute FROM t::date)
"""
OIDS = {"numeric": 1700, "double precision": 701, "bigint": 20, "integer": 23}


def _priv(
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    name: str,
    columns: dict[str, Any],
    day_step: int,
) -> Iterator[tuple[Engine, Any]]:
    """One private table priv(u, t, tz, d) of 400 people, the dates ``day_step`` days apart."""
    with exact_private(
        make_db,
        make_policy,
        name,
        columns,
        "CREATE TABLE priv (u int, t timestamp, tz timestamptz, d date)",
        "INSERT INTO priv SELECT u,"
        " timestamp '2024-01-01' + u * interval '5 days 3 hours 7.25 seconds',"
        " timestamptz '2024-01-01 00:00:00+00' + u * interval '5 days 7 hours',"
        f" date '2024-01-01' + u * {day_step} FROM generate_series(1, 400) u",
    ) as got:
        yield got


@pytest.fixture(scope="module")
def private(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Any]]:
    columns = {"t": {"type": "timestamp"}, "tz": {"type": "timestamptz"}, "d": {"type": "date"}}
    yield from _priv(make_db, make_policy, "extract_sums", columns, day_step=3)


def test_sums_of_fields_as_postgresql(
    private: tuple[Engine, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    unrounded(monkeypatch)
    engine, conn = private
    bad = []
    for e in cells(FIELDS):
        if "minute FROM t::date" in e:
            continue  # (a date has no minute: refused below, as PostgreSQL refuses it)
        for agg in (f"SUM({e})", f"AVG({e})"):
            sql = f"SELECT {agg} FROM priv"
            cur = conn.execute(f"SELECT {agg}, pg_typeof({agg})::text FROM priv")
            value, pg_type = cur.fetchone()
            want = (OIDS[pg_type], type(value).__name__)
            try:
                r = engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
                got_value = r.rows[0][0]
                got: Any = (r.columns[0].type_oid, type(got_value).__name__)
            except DpsqlError as err:
                got, got_value = f"refused {err.sqlstate}: {err}", None
            same = isinstance(got_value, (Decimal, float)) and abs(
                Decimal(str(got_value)) - Decimal(str(value))
            ) <= Decimal("1e-6") * max(1, abs(Decimal(str(value))))
            if got != want or not same:
                bad.append((agg, want, value, got, got_value))
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.parametrize(
    "e", ["EXTRACT(year FROM t)", "EXTRACT(epoch FROM tz)", "EXTRACT(minute FROM t::date)"]
)
def test_fields_the_data_decide_stay_refused(private: tuple[Engine, Any], e: str) -> None:
    """Without declared bounds a year or epoch is refused, and the hint (declare the column's
    bounds) now answers it: test_a_year_or_epoch_of_a_bounded_column_as_postgresql."""
    engine, _ = private
    with pytest.raises(DpsqlError) as refused:
        engine.execute(engine.prepare(f"SELECT SUM({e}) FROM priv"), SessionContext("analyst"))
    if "minute" not in e:
        column = e.split("FROM ")[1].rstrip(")")
        assert f"declare `bounds: [lo, hi]` for {column}" in (refused.value.hint or "")


YEARS = """
EXTRACT(year FROM t) | date_part('year', tz) | EXTRACT(isoyear FROM d) | EXTRACT(year FROM d)
EXTRACT(epoch FROM t) | EXTRACT(epoch FROM tz) | date_part('epoch', d) | EXTRACT(year FROM t) - 2000
"""


@pytest.fixture(scope="module")
def bounded(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Any]]:
    columns = {
        "t": {"type": "timestamp", "bounds": ["2023-06-01T00:00:00", "2031-01-01T00:00:00"]},
        "tz": {"type": "timestamptz", "bounds": ["2023-12-31T00:00:00", "2031-01-01T00:00:00"]},
        "d": {"type": "date", "bounds": ["2024-01-01", "2030-12-31"]},
    }
    yield from _priv(make_db, make_policy, "extract_years", columns, day_step=5)


def test_a_year_or_epoch_of_a_bounded_column_as_postgresql(
    bounded: tuple[Engine, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """words31: EXTRACT(year / isoyear / epoch FROM c) of a date or timestamp column with
    declared bounds is bounded by the field at those bounds (dpsql.sql.sensitivity._at_bounds);
    every value here lies inside them, so dpsql's SUM and AVG (zero noise, R = 1) are
    PostgreSQL's, value and type. Before: refused 42501, 'can't be bounded'."""
    unrounded(monkeypatch)
    engine, conn = bounded
    conn.execute("SET TimeZone = 'UTC'")  # (dpsql's session zone: a timestamptz's year)
    bad = []
    for e in cells(YEARS):
        for agg in (f"SUM({e})", f"AVG({e})"):
            cur = conn.execute(f"SELECT {agg}, pg_typeof({agg})::text FROM priv")
            value, pg_type = cur.fetchone()
            try:
                r = engine.execute(
                    engine.prepare(f"SELECT {agg} FROM priv"), SessionContext(analyst="analyst")
                )
                got: Any = (r.columns[0].type_oid, r.rows[0][0])
            except DpsqlError as err:
                got = f"refused {err.sqlstate}: {err}"
            if (
                not isinstance(got, tuple)
                or got[0] != OIDS[pg_type]
                or abs(Decimal(str(got[1])) - Decimal(str(value)))
                > Decimal("1e-6") * max(1, abs(Decimal(str(value))))
            ):
                bad.append((agg, OIDS[pg_type], value, got))
    assert not bad, "\n".join(map(str, bad))

"""The keys dpsql generates for ``date_trunc`` in a session's time zone are PostgreSQL's own
(:func:`dpsql.upstream.zone.key_texts`), against a real PostgreSQL: around daylight-saving
changes (a skipped hour, a repeated hour, a skipped or repeated midnight), half-hour and
45-minute offsets, POSIX offsets as PgJDBC sends them (``GMT-05:30``) and PostgreSQL names a
numeric zone (``<-05>+05``). Property: for every bucket PostgreSQL produces from instants every 10
minutes over those days, its text is one of dpsql's texts for the bucket's wall-clock time, and
dpsql adds a text PostgreSQL doesn't produce only for a midnight that occurs twice (America/Havana
days: a key with no rows, never a row without its key)."""

from __future__ import annotations

import doctest

import psycopg
import pytest

from dpsql.upstream import zone as zone_module
from dpsql.upstream.zone import key_texts

ZONES = ["America/New_York", "America/Sao_Paulo", "Asia/Kolkata", "Australia/Lord_Howe",
         "Europe/Berlin", "Asia/Kathmandu", "America/Havana", "<-05>+05", "UTC+3", "GMT-05:30"]  # fmt: skip
DAYS = ["2018-10-30", "2025-03-07", "2025-10-24"]  # Sao Paulo's skipped midnight; DST 2025


def test_doctests() -> None:
    assert doctest.testmod(zone_module).failed == 0


@pytest.mark.parametrize("zone", ZONES)
def test_keys_are_postgresqls(pg_admin_dsn: str, zone: str) -> None:
    series = " UNION ".join(
        f"SELECT t FROM generate_series(TIMESTAMPTZ '{d} 00:00+00', "
        f"TIMESTAMPTZ '{d} 00:00+00' + INTERVAL '11 days', INTERVAL '10 minutes') t"
        for d in DAYS
    )
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        rows = conn.execute(
            "SELECT DISTINCT u, date_trunc(u, t)::text, date_trunc(u, t)::timestamp "
            f"FROM ({series}) s, unnest(ARRAY['hour', 'day', 'month']) u"
        ).fetchall()
    extra = []
    for unit, text, wall in rows:
        mine = key_texts(wall, zone)
        assert mine is not None and text in mine, (unit, text, wall, mine)
        extra += [t for t in mine if t != text and (unit, t, wall) not in rows]
    assert not extra or zone == "America/Havana", extra

"""Keys of a timestamp from its declared bounds, in a session's time zone, filtered as BI tools
filter them: exactly the groups PostgreSQL forms in that zone (bi27).

bi26 (f79d4bc) released Metabase's / Tableau's weeks of a timestamp, ``date(d)`` and
``date_trunc`` keys from the declared bounds, checked in UTC. Here, in New York (a clock change
inside the bounds, 2020-03-08 and 2020-11-01), Kolkata (+05:30), Chatham (+13:45 / +12:45, a
clock change on 2020-04-05 and 2020-09-27) and Lord Howe (a half-hour clock change), over one row
per unit every 317 minutes across the declared year (and a few days either side), zero noise:

* every key PostgreSQL forms (over every quarter-hour of the bounds and the microsecond before
  each, under the same filter, in the same zone) is released, no other key is, and each count is
  PostgreSQL's own ``GROUP BY`` count (a Metabase week reads only rows inside the bounds: its
  shift is guarded, dpsql.sql.time_shift);
* filters with an instant: Grafana's ``$__timeFilter`` (``BETWEEN to_timestamp(n) AND
  to_timestamp(m)``), a string with a UTC offset (PgJDBC's ``setTimestamp``), ``TIMESTAMPTZ
  '...'`` and a driver's timestamptz parameter (psycopg over the wire, bound as ``CAST('...' AS
  timestamptz)``). Before: Grafana's range was read as the zone's wall clock, so its first day in
  New York (2020-02-29, from 19:00) and its last in Kolkata, Chatham and Lord Howe (2020-04-01)
  were no key while PostgreSQL had rows in them (those rows missing from the answer); the offsets
  narrowed nothing (a March filter released all 366 days, 335 of them noise over no rows);
* Grafana's time column ``extract(epoch from date_trunc('day', tz))``: the seconds of each day's
  first instant in the zone, printed to the microsecond (``1583020800.000000``). Before: its
  groups came from the data (the demo's 365 days each below the threshold of about 1,041 users:
  no row at all);
* Grafana's ``$__timeGroup(c, '1h')``, ``floor(extract(epoch from c)/3600)*3600``, of a
  timestamp and a timestamptz, under its ``$__timeFilter`` (RFC 3339 strings since Grafana 5,
  ``to_timestamp`` before), PgJDBC's and the timestamptz filter; ``'1d'`` over the whole bounds
  (bi28). Before: their groups came from the data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT, analyst_dsn, served_engine
from tests.policies import PolicyMaker, private_table

LO, HI = "2020-01-01 00:00:00", "2020-12-31 00:00:00"
ZONES = ["America/New_York", "Asia/Kolkata", "Pacific/Chatham", "Australia/Lord_Howe"]
KEYS = {
    "day": "date_trunc('day', {c})",
    "date": "date({c})",
    "metabase week": "CAST((CAST(DATE_TRUNC('week', CAST(({c} + INTERVAL '1 day') AS date)) "
    "AS date) + INTERVAL '-1 day') AS date)",
    "epoch": "extract(epoch from date_trunc('day', {c}))",  # Grafana's time column
    # Grafana's $__timeGroup(c, '1h') / (c, '1d') as its PostgreSQL macro engine writes them
    "timegroup": "floor(extract(epoch from {c})/3600)*3600",
    "timegroup day": "floor(extract(epoch from {c})/86400)*86400",
}
FILTERS = {
    "none": "",
    # 2020-03-01 00:00:00 to 2020-03-31 23:59:59 UTC
    "grafana": "WHERE {c} BETWEEN to_timestamp(1583020800) AND to_timestamp(1585699199)",
    # Grafana's $__timeFilter since 5.x: RFC 3339 strings in UTC
    "grafana rfc3339": "WHERE {c} BETWEEN '2020-03-01T00:00:00Z' AND '2020-03-31T23:59:59.999Z'",
    "jdbc": "WHERE {c} >= '2020-03-01 00:00:00+05:30' AND {c} <= '2020-03-31 02:00:00+05:30'",
    "timestamptz": "WHERE {c} BETWEEN TIMESTAMPTZ '2020-03-08 01:00:00-05' "
    "AND TIMESTAMPTZ '2020-04-05 03:30:00+13'",
}
_KEYS, _FILTERS = (
    ("day", "date", "metabase week", "epoch"),
    ("none", "grafana", "jdbc", "timestamptz"),
)
CASES = [(k, f, "tz") for k in _KEYS for f in _FILTERS if f != "none" or k in ("day", "epoch")]
CASES += [("day", "grafana", "ts"), ("date", "jdbc", "ts"), ("epoch", "timestamptz", "ts")]
# 1h over the whole year: 8,784 keys, above the limit (the notice says so, partition selection)
CASES += [(k, f, c) for c in ("tz", "ts") for k, f in [("timegroup", "grafana rfc3339"),
          ("timegroup", "timestamptz"), ("timegroup day", "none")]]  # fmt: skip
# the timestamptz filter's ends are an hour from a clock change (New York's on 2020-03-08,
# Chatham's and Lord Howe's on 2020-04-05): there a bound moves outward by the change
# (dpsql.sql.zone_bounds), which hourly keys show as one more hour, counted over no rows
OUTWARD = {("timegroup", "timestamptz", "tz"), ("timegroup", "timestamptz", "ts")}


@pytest.fixture(scope="module")
def db(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[tuple[Any, str]]:
    columns = {
        "ts": {"type": "timestamp", "bounds": [LO, HI]},
        "tz": {"type": "timestamptz", "bounds": [LO, HI]},
    }
    pf = make_policy("zonekeys", tables={"public.t": private_table("u", columns)}, public_tables=[])
    dsn = make_db("zonekeys")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer NOT NULL, ts timestamp, tz timestamptz)")
        conn.execute(
            "INSERT INTO t SELECT row_number() OVER (), g AT TIME ZONE 'UTC', g FROM ("
            "SELECT generate_series(TIMESTAMPTZ '2019-12-29 00:00+00', "
            "TIMESTAMPTZ '2021-01-03 00:00+00', INTERVAL '317 minutes') g UNION ALL "
            "SELECT unnest(ARRAY[TIMESTAMPTZ '2020-01-01 00:00+00', "
            "'2019-12-31 23:59:59.999999+00', '2020-12-31 00:00+00', "
            "'2020-12-31 00:00:00.000001+00'])) s"
        )
    yield pf.policy, dsn


@pytest.fixture(scope="module")
def engine(db: tuple[Any, str]) -> Iterator[Engine]:
    e = Engine(db[0], db[1], pool_size=1, noise=EXACT)
    yield e
    e.close()


def _pg(dsn: str, sql: str, zone: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        return conn.execute(sql, params).fetchall()


def _truth(dsn: str, key: str, where: str, c: str, zone: str) -> dict[str, int]:
    """PostgreSQL's groups in ``zone``: its keys over every quarter-hour of the declared bounds
    and the microsecond before each (every zone's offset is a whole quarter-hour), under the
    filter; each with PostgreSQL's own count (a Metabase week: of the rows inside the bounds)."""
    instants = (
        "SELECT g FROM generate_series(TIMESTAMPTZ '2020-01-01 00:00+00', "
        "TIMESTAMPTZ '2020-12-31 00:00+00', INTERVAL '15 minutes') g UNION ALL "
        "SELECT g - INTERVAL '1 microsecond' FROM generate_series(TIMESTAMPTZ "
        "'2020-01-01 00:15+00', TIMESTAMPTZ '2020-12-31 00:00+00', INTERVAL '15 minutes') g"
    )
    col = "g" if c == "tz" else "(g AT TIME ZONE 'UTC')"
    keys = _pg(dsn, f"SELECT DISTINCT {key} FROM (SELECT {col} AS {c} FROM ({instants}) i) x "
               f"{where}", zone)  # fmt: skip
    inside = ""
    if "INTERVAL" in key:  # a guarded shift: the rows inside the bounds
        lo, hi = (f"TIMESTAMP{'TZ' if c == 'tz' else ''} '{v}{'+00' if c == 'tz' else ''}'"
                  for v in (LO, HI))  # fmt: skip
        inside = f"{'AND' if where else 'WHERE'} {c} BETWEEN {lo} AND {hi}"
    counts = dict(_pg(dsn, f"SELECT {key}, COUNT(*) FROM t {where} {inside} GROUP BY 1", zone))
    return {str(k): int(counts.get(k, 0)) for (k,) in keys}


@pytest.mark.parametrize("zone", ZONES)
def test_keys_are_postgresqls_groups(engine: Engine, db: tuple[Any, str], zone: str) -> None:
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), settings={"TimeZone": zone})
    for name, filt, c in CASES:
        key, where = KEYS[name].format(c=c), FILTERS[filt].format(c=c)
        p = engine.prepare(f"SELECT {key} AS k, COUNT(*) FROM t {where} GROUP BY 1")
        assert not p.analysis.needs_selection  # type: ignore[union-attr]
        got = {str(k): int(n) for k, n in engine.execute(p, s).rows}
        truth = _truth(db[1], key, where, c, zone)
        if (name, filt, c) in OUTWARD:  # a key more at an end, over no rows, never one less
            extra = {k: got[k] for k in got.keys() - truth.keys()}
            ends = (min(map(int, truth)) - 3600, max(map(int, truth)) + 3600)
            assert len(extra) <= 2 and all(int(k) in ends and n == 0 for k, n in extra.items())
            got = {k: n for k, n in got.items() if k in truth}
        assert len(truth) > 1 and got == truth, (name, filt, c, zone, got.keys() ^ truth.keys())


def test_driver_timestamptz_parameters(db: tuple[Any, str]) -> None:
    """Over the wire: psycopg binds an aware datetime as a timestamptz parameter, a string as an
    untyped one (PgJDBC's ``setTimestamp`` sends its text with the JVM's offset): in Kolkata the
    keys are the range's 31 days, each with PostgreSQL's count (0 where it has no rows)."""
    zone = "Asia/Kolkata"
    kolkata = ZoneInfo(zone)
    first, last = datetime(2020, 3, 1, tzinfo=kolkata), datetime(2020, 3, 31, 2, tzinfo=kolkata)
    sql = "SELECT date(tz) AS k, COUNT(*) FROM t WHERE tz >= %s AND tz <= %s GROUP BY 1"
    with served_engine(db[0], db[1], noise=EXACT) as srv:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            conn.execute(f"SET TIME ZONE '{zone}'")
            for params in ((first, last), (first.isoformat(" "), "2020-03-31 02:00:00+05:30")):
                got = {str(k): int(n) for k, n in conn.execute(sql, params).fetchall()}
                truth = {str(k): int(n) for k, n in _pg(db[1], sql, zone, params)}
                assert sorted(got) == [f"2020-03-{d:02d}" for d in range(1, 32)], params
                assert {k: n for k, n in got.items() if n or k in truth} == truth, params


# Grafana's panel query as its PostgreSQL data source sends it: $__timeGroupAlias(c, '5m') and
# $__timeFilter(c) expanded by pkg/tsdb/grafana-postgresql-datasource/macros.go (the interval's
# seconds printed by Go's %v: 300; 30 days as 2.592e+06)
GRAFANA = """SELECT
  floor(extract(epoch from {c})/{n})*{n} AS "time",
  count(*) AS "value"
FROM t
{where}
GROUP BY 1
ORDER BY 1"""
SIX_HOURS = "WHERE\n  {c} BETWEEN '2020-03-01T00:00:00Z' AND '2020-03-01T05:59:59.999Z'"


def test_grafana_time_group_over_the_wire(db: tuple[Any, str]) -> None:
    """Over the wire, the statement text Grafana sends: '5m' buckets of a timestamptz in Kolkata
    under a six-hour $__timeFilter are its 72 buckets, each with PostgreSQL's count (0 where it
    has none: it forms no group there); '30d' (``2.592e+06``) buckets of a timestamp over its
    whole bounds are the 13 buckets of 2020, each PostgreSQL's. Before: groups from the data."""
    zone = "Asia/Kolkata"
    start = 1583020800  # 2020-03-01 00:00 UTC
    month = 2592000
    first, last = (int(datetime.fromisoformat(v + "+00:00").timestamp()) // month for v in (LO, HI))
    cases = [
        (GRAFANA.format(c="tz", n=300, where=SIX_HOURS.format(c="tz")), range(start, start + 21600, 300)),
        (GRAFANA.format(c="ts", n="2.592e+06", where=""), range(first * month, last * month + 1, month)),
    ]  # fmt: skip
    with served_engine(db[0], db[1], noise=EXACT) as srv:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            conn.execute(f"SET TIME ZONE '{zone}'")
            for sql, keys in cases:
                got = {int(k): int(n) for k, n in conn.execute(sql.encode()).fetchall()}
                truth = {int(k): int(n) for k, n in _pg(db[1], sql, zone)}
                assert sorted(got) == list(keys), sql
                assert {k: n for k, n in got.items() if n or k in truth} == truth, sql


def test_grafana_time_group_past_the_limit_says_what_to_write(engine: Engine) -> None:
    """'5m' buckets over the whole declared range are 105,121, past the limit of keys: the notice
    names the number and what brings it under the limit (Grafana's time range, a longer
    interval); the groups then come from the data, charged, as before."""
    s = SessionContext(analyst="analyst", epsilon=Fraction(1))
    p = engine.prepare(GRAFANA.format(c="ts", n=300, where=""))
    assert p.analysis.needs_selection  # type: ignore[union-attr]
    words = " ".join(engine.execute(p, s).notices)
    assert "the range of ts holds 105,121 of them (one per 300 seconds), above the limit" in words
    assert "a narrower range in the WHERE clause or a coarser unit" in words

"""The session's time zone (``SET TIME ZONE``, the ``TimeZone`` startup parameter) applies to
the upstream statements as on PostgreSQL (newcomer 21's finding 32), against a real PostgreSQL.

Properties, each compared with PostgreSQL's own answer in the same zone on the same rows:
- ``date_trunc`` buckets of a date and of a timestamptz are computed and labelled in the zone:
  the same keys (text) and, on one row per unit with zero noise, the same counts, including
  rows PostgreSQL puts in another month than UTC would (the last hours of a month), and the
  generated (declared) keys are the zone's months, nothing from the data;
- ``now()::date``-style casts and ``::text`` of a timestamptz carry the zone's offset;
- a free repeat never hands back an answer computed in another zone: the same statement in
  New York after UTC is a new release (its own labels), and again in New York a free repeat.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from fractions import Fraction
from zoneinfo import ZoneInfo

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.policy.load import parse_policy
from dpsql.session import SessionContext
from tests.helpers import EXACT

POLICY_TEXT = """
version: 1
defaults: {epsilon: 1.0, max_epsilon: 10.0, delta: 1.0e-6}
analysts:
  a: {budget: {epsilon: 100}}
tables:
  public.ev:
    privacy_unit: uid
    max_rows_per_unit: 1
    max_groups_per_unit: 1
    columns:
      uid: {type: integer, identifier: true}
      d: {type: date, bounds: [2024-01-01, 2024-12-31]}
      tz: {type: timestamptz, bounds: [2024-01-01 00:00:00+00:00, 2024-12-31 00:00:00+00:00]}
      kind: {type: text, keys: [a, b]}
"""

NY = "America/New_York"


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("zones")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ev (uid integer NOT NULL, d date, tz timestamptz, kind text)")
        # one row per unit; 300 units in the first hours (UTC) of each month from March: in New
        # York those instants are the previous month's last evening
        conn.execute(
            "INSERT INTO ev SELECT u, DATE '2024-03-01' + (u % 200), "
            "TIMESTAMPTZ '2024-03-01 02:00:00+00' + ((u % 6) * INTERVAL '1 month') "
            "+ (u % 7) * INTERVAL '10 minutes', CASE WHEN u % 2 = 0 THEN 'a' ELSE 'b' END "
            "FROM generate_series(1, 1800) u"
        )
    return dsn


@pytest.fixture(scope="module")
def quiet(dsn: str) -> Iterator[Engine]:
    e = Engine(parse_policy(POLICY_TEXT), dsn, pool_size=1, noise=EXACT)
    yield e
    e.close()


def _ask(engine: Engine, sql: str, zone: str) -> list[tuple[object, ...]]:
    s = SessionContext(analyst="a", epsilon=Fraction(5), settings={"TimeZone": zone})
    return engine.execute(engine.prepare(sql, "a"), s).rows


def _pg(dsn: str, sql: str, zone: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        return conn.execute(sql).fetchall()


@pytest.mark.parametrize("zone", [NY, "Asia/Kolkata"])
@pytest.mark.parametrize("col", ["d", "tz"])
def test_month_buckets_are_the_zones(quiet: Engine, dsn: str, zone: str, col: str) -> None:
    sql = f"SELECT date_trunc('month', {col})::text AS m, COUNT(*) FROM ev GROUP BY 1 ORDER BY 1"
    got = {str(k): int(str(n)) for k, n in _ask(quiet, sql, zone)}
    truth = {str(k): int(str(n)) for k, n in _pg(dsn, sql, zone)}
    assert truth and set(truth) <= set(got), (got, truth)  # every month with rows, its label
    assert {k: got[k] for k in truth} == truth  # zero noise, one row per unit: exact
    # the declared months (generated in the zone), nothing else: the rest count 0
    assert all(got[k] == 0 for k in set(got) - set(truth))
    assert all(k.endswith(("-05", "-04", "+05:30")) for k in got), got


def test_month_bucket_values_are_the_zones_instants(quiet: Engine, dsn: str) -> None:
    sql = "SELECT date_trunc('month', d) AS m, COUNT(*) FROM ev GROUP BY 1 ORDER BY 1"
    got = [r[0] for r in _ask(quiet, sql, NY)]
    truth = [r[0] for r in _pg(dsn, sql, NY)]
    assert set(truth) <= set(got) and len(got) == 12
    first = got[0]
    assert isinstance(first, datetime) and first == datetime(2024, 1, 1, tzinfo=ZoneInfo(NY))


def test_casts_and_extract_in_the_zone(quiet: Engine, dsn: str) -> None:
    for sql in (
        "SELECT CAST(tz AS date) AS day, COUNT(*) FROM ev WHERE kind = 'a' GROUP BY 1 ORDER BY 1",
        "SELECT EXTRACT(hour FROM tz) AS h, COUNT(*) FROM ev GROUP BY 1 ORDER BY 1",
    ):
        got = dict(_ask(quiet, sql, NY))
        truth = dict(_pg(dsn, sql, NY))
        assert truth and {k: got.get(k) for k in truth} == truth, sql
        assert all(got[k] == 0 for k in set(got) - set(truth)), sql  # declared keys: no rows
    (now,) = _ask(quiet, "SELECT now()::text AS t", NY)[0]
    assert str(now).endswith(("-05", "-04")), now


def test_a_repeat_never_crosses_zones(dsn: str) -> None:
    policy = parse_policy(POLICY_TEXT)
    ledger = Ledger.open(dsn, policy, schema=f"dpsql_tz{uuid.uuid4().hex[:8]}")
    engine = Engine(policy, dsn, ledger, pool_size=1)
    try:
        sql = "SELECT date_trunc('month', d) AS m, COUNT(*) FROM ev GROUP BY 1 ORDER BY 1"

        def run(zone: str) -> tuple[str, bool]:
            s = SessionContext(analyst="a", epsilon=Fraction(1), settings={"TimeZone": zone})
            res = engine.execute(engine.prepare(sql, "a"), s)
            return str(res.rows[0][0]), res.cached

        utc_label, _ = run("UTC")
        ny_label, ny_cached = run(NY)
        assert not ny_cached and ny_label != utc_label  # computed again, in New York
        assert ny_label.startswith("2024-01-01 00:00:00") and ny_label.endswith("-05:00")
        again, cached = run(NY)
        assert cached and again == ny_label
        # a statement whose answer the zone doesn't change stays a repeat across zones
        plain = "SELECT kind, COUNT(*) FROM ev GROUP BY kind"
        s_utc = SessionContext(analyst="a", epsilon=Fraction(1))
        engine.execute(engine.prepare(plain, "a"), s_utc)
        s_ny = SessionContext(analyst="a", epsilon=Fraction(1), settings={"TimeZone": NY})
        assert engine.execute(engine.prepare(plain, "a"), s_ny).cached
    finally:
        engine.close()
        ledger.close()

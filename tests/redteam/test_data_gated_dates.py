"""Data-gated errors of dates a timestamp can't hold: the outcome must not depend on one row.

A date column reaches 5874897 AD and 4714-11-24 BC; a timestamp only 294276 AD, and a
timestamptz's earliest instant is 4714-11-24 BC at midnight UTC. PostgreSQL converts a date to a
timestamp for ``CAST(d AS timestamp)``, ``CAST(d AS timestamptz)``, ``date_trunc`` and
``to_char`` (they take timestamps), and the conversion raised 22008 for such a date: before
dpsql.sql.rewrite.total_dates.within_timestamps, ``WHERE CAST(d AS timestamp) > ...`` was
answered on a database whose unit 1 has an ordinary date and failed (22000) on its neighbour
where unit 1's date is 5874897-12-31 (or 4714-11-24 BC) -- a noiseless bit, and ``CASE WHEN x >
50 THEN CAST(d AS timestamp) END`` gates it on any other column. Each probe runs on the three
databases (ordinary, latest and earliest date for unit 1); the outcome class must be the same.
Deterministic: no noise is involved in the outcome class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table
from tests.redteam.test_data_gated_errors import outcome

UNIT_1 = {  # unit 1's date and timestamp in each neighbouring database
    "ordinary": ("2020-01-01", "2020-01-01 10:00"),
    "latest": ("5874897-12-31", "294276-12-31 23:59:59"),
    "earliest": ("4714-11-24 BC", "4714-11-24 00:00:00 BC"),
}

PROBES = {
    "cast to timestamp": "SELECT COUNT(*) FROM t WHERE CAST(d AS timestamp) > TIMESTAMP '2000-01-01'",
    "cast to timestamptz": (
        "SELECT COUNT(*) FROM t WHERE CAST(d AS timestamptz) > TIMESTAMPTZ '2000-01-01'"
    ),
    "gated cast": (
        "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN CAST(d AS timestamp) "
        "ELSE TIMESTAMP '2000-01-01' END > TIMESTAMP '1999-01-01'"
    ),
    "date_trunc": "SELECT COUNT(*) FROM t WHERE date_trunc('month', d) > TIMESTAMP '2000-01-01'",
    "to_char": "SELECT COUNT(*) FROM t WHERE to_char(d, 'YYYY') > '2000'",
    "timestamp to timestamptz": (
        "SELECT COUNT(*) FROM t WHERE CAST(ts AS timestamptz) > TIMESTAMPTZ '2000-01-01'"
    ),
    "date_trunc of a timestamp": (
        "SELECT COUNT(*) FROM t WHERE date_trunc('year', ts) > TIMESTAMP '2000-01-01'"
    ),
    "in a measure": "SELECT SUM(CASE WHEN CAST(d AS timestamp) > TIMESTAMP '2000-01-01' THEN x END) FROM t",
    "in a FILTER": (
        "SELECT COUNT(*) FILTER (WHERE date_trunc('day', d) > TIMESTAMP '2000-01-01') FROM t"
    ),
}


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[dict[str, Engine]]:
    columns = {
        "x": {"type": "numeric", "bounds": [0, 100]},
        "d": {"type": "date"},
        "ts": {"type": "timestamp"},
    }
    pf = make_policy(
        "gateddates", tables={"public.t": private_table("u", columns)}, public_tables=[]
    )
    engines = {}
    for name, (d, ts) in UNIT_1.items():
        dsn = make_db("gateddates")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (u integer NOT NULL, x numeric, d date, ts timestamp)")
            conn.execute(
                "INSERT INTO t SELECT u, 5, DATE '2020-01-01', TIMESTAMP '2020-01-01 10:00' "
                "FROM generate_series(2, 40) u"
            )
            conn.execute("INSERT INTO t VALUES (1, 90, %s::date, %s::timestamp)", (d, ts))
        engines[name] = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    yield engines
    for e in engines.values():
        e.close()


@pytest.mark.parametrize("name", sorted(PROBES))
def test_outcome_does_not_depend_on_one_date(neighbours: dict[str, Engine], name: str) -> None:
    got = {db: outcome(e, PROBES[name]) for db, e in neighbours.items()}
    assert set(got.values()) == {"answered"}, got


def test_dates_in_range_keep_their_values(neighbours: dict[str, Engine]) -> None:
    """The guard moves only dates a timestamp can't hold: the ordinary database's count of
    rows after 2000 is all 40 rows (noise off)."""
    from dpsql.session import SessionContext

    e = neighbours["ordinary"]
    sql = PROBES["cast to timestamp"]
    assert int(e.execute(e.prepare(sql), SessionContext(analyst="analyst")).rows[0][0]) == 40

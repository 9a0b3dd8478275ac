"""A GROUP BY key that moves a date by a constant must not fail by the rows (BI tools' weeks).

Metabase's week starting on Sunday adds ``INTERVAL '1 day'`` to the date, Tableau's subtracts
``EXTRACT(DOW FROM d) * INTERVAL '1 DAY'``: PostgreSQL raises 22008 (timestamp out of range) for a
date past 294276 AD or near 4713 BC, and only when a row holds one, so an answer on one database
and an error on its neighbour with one more person would be a free bit. dpsql evaluates such a
shift only for rows inside the column's declared bounds (dpsql.sql.time_shift: ``CASE WHEN d
BETWEEN lo AND hi THEN ... END``; outside, NULL, which is no key). Each probe runs on neighbouring
databases that differ in unit 1's values only (ordinary, the latest and earliest dates and
timestamps PostgreSQL holds, +-infinity); the outcome must be "answered" on every one, and the
keys are the bounds' (no partition selection), the same on every one. Deterministic (zero noise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.owner import owner_db
from tests.policies import PolicyMaker, private_table
from tests.redteam.test_data_gated_errors import outcome

UNIT_1 = {  # unit 1's date, timestamp, timestamptz in each neighbouring database
    "ordinary": ("2020-03-04", "2020-03-04 10:00", "2020-03-04 10:00+00"),
    "latest": ("5874897-12-31", "294276-12-31 23:59:59", "294276-12-31 23:59:59+00"),
    "earliest": ("4714-11-24 BC", "4714-11-24 00:00:00 BC", "4714-11-24 00:00:00+00 BC"),
    "infinity": ("infinity", "infinity", "infinity"),
    "-infinity": ("-infinity", "-infinity", "-infinity"),
}

METABASE_WEEK = (
    "CAST((CAST(DATE_TRUNC('week', CAST(({c} + INTERVAL '1 day') AS date)) AS date) "
    "+ INTERVAL '-1 day') AS date)"
)
TABLEAU_WEEK = (
    "CAST((DATE_TRUNC('DAY', CAST({c} AS DATE)) + (-EXTRACT(DOW FROM {c}) * INTERVAL '1 DAY')) "
    "AS DATE)"
)
KEYS = {
    "metabase week": METABASE_WEEK,
    "tableau week": TABLEAU_WEEK,
    "a century later": "CAST({c} + INTERVAL '100 years' AS date)",
    "a century earlier": "CAST({c} - INTERVAL '100 years' AS date)",
    "days times a field": "CAST({c} - EXTRACT(doy FROM {c}) * INTERVAL '5 years' AS date)",
}
PROBES = {
    f"{name} of {c}": f"SELECT {key.format(c=c)} AS k, COUNT(*) FROM t GROUP BY 1"
    for name, key in KEYS.items()
    for c in ("d", "ts", "tz")
}
PROBES["date minus days"] = "SELECT d - 36525 AS k, COUNT(*) FROM t GROUP BY 1"
PROBES["gated by another column"] = (
    "SELECT CASE WHEN x > 50 THEN CAST(d + INTERVAL '1 day' AS date) END AS k, COUNT(*) "
    "FROM t GROUP BY 1"
)


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[dict[str, Engine]]:
    columns = {
        "x": {"type": "numeric", "bounds": [0, 100]},
        "d": {"type": "date", "bounds": ["2020-01-01", "2020-12-31"]},
        "ts": {"type": "timestamp", "bounds": ["2020-01-01 00:00:00", "2020-12-31 00:00:00"]},
        "tz": {"type": "timestamptz", "bounds": ["2020-01-01 00:00:00", "2020-12-31 00:00:00"]},
    }
    pf = make_policy(
        "shiftkeys", tables={"public.t": private_table("u", columns)}, public_tables=[]
    )
    engines = {}
    for name, (d, ts, tz) in UNIT_1.items():
        dsn = owner_db(
            make_db,
            "shiftkeys",
            "CREATE TABLE t (u integer NOT NULL, x numeric, d date, ts timestamp, tz timestamptz)",
            "INSERT INTO t SELECT u, 5, DATE '2020-01-01' + u * 7, "
            "TIMESTAMP '2020-01-01 10:00' + u * INTERVAL '7 days', "
            "TIMESTAMPTZ '2020-01-01 10:00+00' + u * INTERVAL '7 days' "
            "FROM generate_series(2, 40) u",
            ("INSERT INTO t VALUES (1, 90, %s::date, %s::timestamp, %s::timestamptz)", (d, ts, tz)),
        )
        engines[name] = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    yield engines
    for e in engines.values():
        e.close()


@pytest.mark.parametrize("name", sorted(PROBES))
def test_outcome_does_not_depend_on_one_date(neighbours: dict[str, Engine], name: str) -> None:
    got = {db: outcome(e, PROBES[name]) for db, e in neighbours.items()}
    assert set(got.values()) == {"answered"}, got


@pytest.mark.parametrize(
    "name",
    [
        "metabase week of d",
        "tableau week of d",
        "metabase week of ts",
        "tableau week of ts",
        "metabase week of tz",
        "tableau week of tz",
    ],  # fmt: skip
)
def test_a_weeks_keys_come_from_the_bounds(neighbours: dict[str, Engine], name: str) -> None:
    """The weeks of a bounded date are the bounds' (the 53 Sundays from 2019-12-29 to
    2020-12-27, each released with noise, none selected from the data), the same keys on every
    neighbour: unit 1's date outside the bounds is in none of them. Of a timestamp column too
    (bi26: they came from the data, 39 of 53 weeks on these neighbours): the key moves it by
    whole days and reads it through a day or longer, the same at every time of a day."""
    session = SessionContext(analyst="analyst", epsilon=Fraction(1))
    keys = {}
    for db, e in neighbours.items():
        p = e.prepare(PROBES[name])
        assert not p.analysis.needs_selection  # type: ignore[union-attr]
        keys[db] = [str(r[0]) for r in e.execute(p, session).rows]
    first = keys["ordinary"]
    assert all(k == first for k in keys.values()), keys
    assert first[0] == "2019-12-29" and first[-1] == "2020-12-27" and len(first) == 53


def test_shifts_past_the_limit_are_refused(neighbours: dict[str, Engine]) -> None:
    """A shift dpsql can't bound (an interval times an unbounded number, a public column's
    date, years past the limit) is refused before anything is read: the 0A000 on every
    neighbour, with words that say what is supported."""
    from dpsql.errors import FeatureNotSupported

    e = neighbours["ordinary"]
    for sql in (
        "SELECT CAST(d + x * INTERVAL '1 day' AS date), COUNT(*) FROM t GROUP BY 1",
        "SELECT CAST(d + EXTRACT(doy FROM d) * INTERVAL '100 years' AS date), COUNT(*) "
        "FROM t GROUP BY 1",
        "SELECT CAST(d + (ts - ts) AS date), COUNT(*) FROM t GROUP BY 1",
    ):
        with pytest.raises(FeatureNotSupported) as got:
            e.prepare(sql)
        assert got.value.hint, sql


@pytest.mark.parametrize(
    "key",
    [
        "d",
        "CAST(d AS date)",
        "d::date",
        "CAST(ts AS date)",
        "ts::date",
        "CAST(tz AS date)",
        "date(d)",
        "date(ts)",
        "date(tz)",
    ],  # fmt: skip
)
def test_a_days_keys_come_from_the_bounds(neighbours: dict[str, Engine], key: str) -> None:
    """Metabase's day (``CAST(d AS date)``, for a date column the bare column; ``date(d)``, its
    function form) of a date or
    timestamp column with declared bounds releases the 366 days of the bounds (2020 is a leap
    year), none selected from the data, the same keys on every neighbour (unit 1's extreme
    dates are in none of them)."""
    session = SessionContext(analyst="analyst", epsilon=Fraction(1))
    sql = f"SELECT {key} AS k, COUNT(*) FROM t GROUP BY 1"
    keys = {}
    for db, e in neighbours.items():
        p = e.prepare(sql)
        assert not p.analysis.needs_selection  # type: ignore[union-attr]
        keys[db] = [str(r[0]) for r in e.execute(p, session).rows]
    first = keys["ordinary"]
    assert all(k == first for k in keys.values()), keys
    assert first[0] == "2020-01-01" and first[-1] == "2020-12-31" and len(first) == 366


# keys over a timestamp column: (key, PostgreSQL's own keys over every hour of the bounds)
TIME_KEYS = [
    "date_trunc('week', {c} + interval '1 day') - interval '1 day'",  # Metabase's week, no casts
    "(DATE_TRUNC('DAY', {c}) + (-EXTRACT(DOW FROM {c}) * INTERVAL '1 DAY'))",
    "CAST({c} + INTERVAL '1 month' AS date)",
    "date_trunc('month', {c} - INTERVAL '1 year')",
]


@pytest.mark.parametrize("c", ["ts", "tz"])
@pytest.mark.parametrize("key", TIME_KEYS)
def test_a_timestamps_shifted_keys_are_postgresqls(
    neighbours: dict[str, Engine], key: str, c: str
) -> None:
    """The keys of a shifted timestamp are the values PostgreSQL computes for the key over every
    hour of the declared bounds (and the last microsecond of each day), none selected from the
    data, the same on every neighbour (zero noise)."""
    sql = f"SELECT {key.format(c=c)} AS k, COUNT(*) FROM t GROUP BY 1"
    session = SessionContext(analyst="analyst", epsilon=Fraction(1))
    keys = {}
    for db, e in neighbours.items():
        p = e.prepare(sql)
        assert not p.analysis.needs_selection  # type: ignore[union-attr]
        keys[db] = sorted(str(r[0]) for r in e.execute(p, session).rows)
    first = keys["ordinary"]
    assert all(k == first for k in keys.values()), keys
    e = neighbours["ordinary"]
    truth = e.backend.run_own(  # PostgreSQL's own keys (the bounds: 2020-01-01 to 2020-12-31 00:00)
        f"SELECT DISTINCT {key.format(c=c)} FROM (SELECT g::{'timestamptz' if c == 'tz' else 'timestamp'} "
        f"AS {c} FROM (SELECT generate_series(timestamp '2020-01-01', timestamp '2020-12-30', "
        f"interval '1 hour') g UNION ALL SELECT timestamp '2020-12-31' UNION ALL "
        f"SELECT generate_series(timestamp '2020-01-01 23:59:59.999999', "
        f"timestamp '2020-12-30 23:59:59.999999', interval '1 day')) h) x"
    )
    assert first == sorted(str(r[0]) for r in truth.rows)


@pytest.mark.parametrize(
    "key",
    [
        "{c} + interval '1 day'",
        "date_trunc('hour', {c} + interval '1 day')",
        "date_trunc('week', {c} + interval '1 hour')",
    ],  # fmt: skip
)
def test_a_time_of_day_in_the_key_leaves_it_to_the_data(
    neighbours: dict[str, Engine], key: str
) -> None:
    """A key that a time of day moves (an hour's shift, a truncation to the hour, the moved
    timestamp itself) is not enumerated: its groups are selected from the data, as before."""
    p = neighbours["ordinary"].prepare(
        f"SELECT {key.format(c='ts')} AS k, COUNT(*) FROM t GROUP BY 1"
    )
    assert p.analysis.needs_selection  # type: ignore[union-attr]

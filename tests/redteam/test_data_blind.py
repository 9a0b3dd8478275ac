"""Nothing but the noise source's draws may carry private data into an answer.

With a data-blind noise source (:class:`Blind`: every additive release the same constant, every
declared group kept, every quantile and mode the first candidate, every ``auto`` bound the same
bucket or the guard's fallback) the released values no longer depend on the data at all. So two
neighbouring databases (D and D' = D plus one person's 50 rows, with extreme values, in a group
that is empty in D) must then give the same answer in every respect the analyst can see: the rows
(values, interval columns, which rows), the notices, the SQLSTATE and words of a refusal, the
epsilon charged and the releases recorded. A difference is a path from the data to the analyst
that no mechanism noises: a count in a notice computed from the rows, a row kept or a NULL
decided by a raw value, an error raised by one person's row, a charge that depends on the data.

The statements use declared keys only (a key read from the data is a candidate set that partition
selection thresholds; the blind source keeps every candidate, so those legitimately differ) and
cover the flat path (grouped COUNT / SUM / AVG, STDDEV, MIN / MAX, quantiles, mode, COUNT(DISTINCT
unit), date keys, ROLLUP, HAVING / ORDER BY / LIMIT over noisy values, a join to a public table)
and the tree path (UNION ALL of leaves, scalar subqueries), with ``auto`` contribution bounds both
chosen (a bucket) and fallen back to the fixed defaults (the guard), intervals shown. The broken
twin (a source whose additive noise is zero: the data flows into the values) must be told apart
on the same neighbours, else the comparison could not fail.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.dp.bounds import Selection
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.policies import PolicyMaker, private_table


class Blind:
    """A noise source whose every draw ignores the data (see the module)."""

    def __init__(self, bucket: int | None) -> None:
        self.bucket = bucket  # the ``auto`` bound chosen; None: the guard's fallback

    def add(self, mech: Laplace | Gaussian, values: np.ndarray) -> np.ndarray:
        return np.full(np.shape(values), 5.0)

    def keep(self, selection: PartitionSelection, unit_counts: np.ndarray) -> np.ndarray:
        return np.ones(np.shape(unit_counts), dtype=bool)

    def pick(self, mech: Quantile, utilities: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(utilities)[0], dtype=np.int64)

    def mode(self, mech: Mode, counts: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(counts)[0], dtype=np.int64)

    def bound(self, selection: Selection, counts: np.ndarray) -> int:
        return len(counts) if self.bucket is None else min(self.bucket, len(counts) - 1)


class Leaky(Blind):
    """The broken twin: additive releases are the exact values (no noise)."""

    def add(self, mech: Laplace | Gaussian, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)


SETUP = """
CREATE TABLE regions (code text, n numeric);
INSERT INTO regions VALUES ('N', 2), ('S', 3), ('E', 0);
CREATE TABLE t (u integer NOT NULL, region text, x numeric, y numeric, d date, k integer,
  q integer, ts timestamp, tz timestamptz);
INSERT INTO t SELECT u % 40, CASE WHEN u % 2 = 0 THEN 'N' ELSE 'S' END, u % 7, (u % 5) - 2,
  DATE '2025-01-01' + (u % 30), u % 3, 1 + u % 5, TIMESTAMP '2025-01-01 05:00' + (u % 30) * INTERVAL
  '1 day', TIMESTAMPTZ '2025-01-01 05:00+00' + (u % 30) * INTERVAL '1 day'
  FROM generate_series(1, 120) u;
"""
# one more person: 50 rows, extreme values, in region E (empty in D), in June (empty in D)
# (keys from bounds: q at 10, none in D, past its bounds and NULL; times late in a day, in June, and
# past the bounds)
PERSON = """INSERT INTO t SELECT 999, 'E', 10, -10, DATE '2025-06-01', 1,
  (ARRAY[10, 11, NULL])[1 + i % 3], TIMESTAMP '2025-06-01 23:59:59.999' + (i % 3) * INTERVAL '1 year',
  TIMESTAMPTZ '2025-06-01 23:30+00' + (i % 3) * INTERVAL '1 year' FROM generate_series(1, 50) i"""
STATEMENTS = [
    "SELECT COUNT(*) FROM t",
    "SELECT region, COUNT(*), SUM(y), AVG(x) FROM t GROUP BY region",
    "SELECT region, k, COUNT(*), SUM(x) FROM t GROUP BY region, k",
    "SELECT AVG(y), STDDEV(x), MIN(x), MAX(y) FROM t WHERE region = 'E'",
    "SELECT region, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t GROUP BY region",
    "SELECT region, mode() WITHIN GROUP (ORDER BY k), COUNT(DISTINCT u) FROM t GROUP BY region",
    "SELECT date_trunc('month', d) m, COUNT(*) FROM t GROUP BY 1",
    "SELECT region, COUNT(*) FROM t GROUP BY ROLLUP (region)",
    "SELECT region, COUNT(*) FROM t GROUP BY region HAVING AVG(y) < 0 ORDER BY SUM(x) DESC LIMIT 2",
    "SELECT region, SUM(x / NULLIF(y + 10, 0)) FROM t JOIN regions r ON r.code = t.region "
    "GROUP BY region",
    "SELECT 'all', COUNT(*) FROM t UNION ALL SELECT region, SUM(y) FROM t GROUP BY region",
    "SELECT (SELECT COUNT(*) FROM t WHERE k = 1) a, (SELECT AVG(x) FROM t WHERE region = 'E') b",
    # keys from the declared bounds (bi26 f79d4bc): a bare bounded integer, date(d), the weeks and
    # months of a timestamp and a timestamptz; a MEDIAN by them (acc26 ee01d54)
    "SELECT q, COUNT(*), SUM(x) FROM t GROUP BY q",
    "SELECT q, AVG(y) FROM t WHERE q > 6 GROUP BY q ORDER BY COUNT(*) DESC LIMIT 3",
    "SELECT date(d), COUNT(*) FROM t WHERE date(d) BETWEEN '2025-05-28' AND '2025-06-03' GROUP BY 1",
    "SELECT date_trunc('week', ts + interval '1 day') - interval '1 day' AS w, COUNT(*), SUM(y) "
    "FROM t GROUP BY 1",
    "SELECT CAST(tz + interval '1 month' AS date) AS m, COUNT(*) FROM t GROUP BY 1",
    "SELECT q, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t WHERE q <= 3 GROUP BY q",
    # Grafana's time column (bi27 728f086): the epoch of each day / week of the bounds
    "SELECT extract(epoch from date_trunc('day', tz)) AS time, COUNT(*) FROM t "
    "WHERE tz >= '2025-05-30' AND tz < '2025-06-03' GROUP BY 1 ORDER BY 1",
    "SELECT extract(epoch from date_trunc('week', ts)) AS time, SUM(x) FROM t GROUP BY 1",
    # cuts by noisy values (cut27's words on them): over a wrapper / CTE, by an expression, over
    # grouping sets, over a UNION of leaves, a series limit's leaf (appended: the indices above
    # are the bucket and leaky cases')
    "SELECT region, n FROM (SELECT region, COUNT(*) AS n FROM t GROUP BY region) s "
    "ORDER BY n DESC LIMIT 1",
    "WITH c AS (SELECT region, SUM(x) AS s, COUNT(*) AS n FROM t GROUP BY region) SELECT region, "
    "s / n FROM c WHERE s / n > 4 ORDER BY CASE WHEN n > 30 THEN s / n END DESC NULLS LAST LIMIT 1",
    "SELECT region, COUNT(*) FROM t GROUP BY ROLLUP (region) HAVING COUNT(*) > 20 "
    "ORDER BY 2 DESC LIMIT 2",
    "SELECT region, COUNT(*) AS n FROM t GROUP BY region HAVING COUNT(*) > 20 UNION ALL "
    "SELECT region, SUM(x) FROM t GROUP BY region ORDER BY n DESC LIMIT 2",
    "SELECT region, SUM(x) FROM t JOIN (SELECT region AS r FROM t GROUP BY region "
    "ORDER BY SUM(y) DESC LIMIT 1) s ON t.region = s.r GROUP BY region",
    "SELECT * FROM (SELECT region, SUM(y) AS s, rank() OVER (ORDER BY SUM(y) DESC) AS r FROM t "
    "GROUP BY region) w WHERE r <= 1",
    "SELECT * FROM (SELECT region, k, COUNT(*) AS n, row_number() OVER (PARTITION BY region "
    "ORDER BY COUNT(*) DESC) AS r FROM t GROUP BY region, k) w WHERE r <= 1",
    # Grafana's $__timeGroupAlias(c, '1h') under $__timeFilter and (ts, '1d') over the bounds
    # (bi28): buckets of the range, the added person's late-evening hour among them
    'SELECT floor(extract(epoch from tz)/3600)*3600 AS "time", count(*) AS "value" FROM t WHERE '
    "tz BETWEEN '2025-06-01T20:00:00Z' AND '2025-06-02T03:59:59.999Z' GROUP BY 1 ORDER BY 1",
    'SELECT floor(extract(epoch from ts)/86400)*86400 AS "time", SUM(x) FROM t GROUP BY 1',
]
_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC|release \d+")


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[list[tuple[str, Any, Engine, Ledger]]]:
    """(source name, database, engine, ledger) for D and D' under each source."""
    columns: dict[str, dict[str, Any]] = {
        "region": {"type": "text", "keys": ["N", "S", "E"]},
        "x": {"type": "numeric", "bounds": [0, 10]},
        "y": {"type": "numeric", "bounds": [-10, 10]},
        "d": {"type": "date", "bounds": ["2025-01-01", "2025-12-31"]},
        "k": {"type": "integer", "keys": [0, 1, 2]},
        "q": {"type": "integer", "bounds": [1, 10]},
        "ts": {"type": "timestamp", "bounds": ["2025-01-01 00:00:00", "2025-12-31 00:00:00"]},
        "tz": {"type": "timestamptz", "bounds": ["2025-01-01 00:00:00", "2025-12-31 00:00:00"]},
    }
    pf = make_policy(  # rows and groups per unit: auto (chosen from the data, or the fallback)
        "blind",
        tables={"public.t": private_table("u", columns, rows=None, groups=None)},
        public_tables=["public.regions"],
    )
    sources = {"fallback": Blind(None), "bucket": Blind(2), "leaky": Leaky(None)}
    made = []
    for db, person in (("D", False), ("D'", True)):
        dsn = make_db("blind")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SETUP)
            if person:
                conn.execute(PERSON)
            conn.execute("ANALYZE")
        for name, source in sources.items():
            led = Ledger.open(dsn, pf.policy, schema=f"dpsql_bl{uuid.uuid4().hex[:8]}")
            made.append((name, db, Engine(pf.policy, dsn, led, noise=source, pool_size=1), led))
    yield made
    for _, _, engine, led in made:
        engine.close()
        led.close()


def seen(engine: Engine, ledger: Ledger, sql: str, zone: str = "UTC") -> tuple[Any, ...]:
    """Everything the analyst sees of ``sql``: the rows, notices and charge, or the refusal's
    SQLSTATE and words; and the releases it recorded (release ids and times left out)."""
    before = len(ledger.history("analyst"))
    session = SessionContext(
        "analyst", Fraction(1), show_intervals=True, settings={"TimeZone": zone}
    )
    try:
        res = engine.execute(engine.prepare(sql, "analyst"), session)
        got: tuple[Any, ...] = (
            [tuple(r) for r in res.rows],
            [_STAMP.sub("_", n) for n in res.notices],
            res.epsilon_spent,
        )
    except DpsqlError as e:
        got = (e.sqlstate, e.message, e.detail, e.hint)
    return (*got, len(ledger.history("analyst")) - before)


def _pair(
    neighbours: list[tuple[str, Any, Engine, Ledger]], source: str, sql: str, zone: str = "UTC"
) -> list[Any]:
    return [seen(e, led, sql, zone) for name, _, e, led in neighbours if name == source]


CASES = [("fallback", sql) for sql in STATEMENTS] + [
    ("bucket", STATEMENTS[i])
    for i in (1, 4, 8, 10, 12, 15, 17)  # a bound chosen: the flat and tree paths
]
ZONE = "America/New_York"  # the session's zone moves a timestamptz's days and months
ZONED = [
    STATEMENTS[16],
    "SELECT date(tz) AS day, COUNT(*) FROM t WHERE tz < '2025-01-08' GROUP BY 1",
]


@pytest.mark.parametrize(("source", "sql"), CASES)
def test_neighbours_see_the_same_when_the_noise_ignores_the_data(
    neighbours: list[tuple[str, Any, Engine, Ledger]], source: str, sql: str
) -> None:
    d, d2 = _pair(neighbours, source, sql)
    assert d == d2


@pytest.mark.parametrize("sql", ZONED)
def test_neighbours_see_the_same_in_another_time_zone(
    neighbours: list[tuple[str, Any, Engine, Ledger]], sql: str
) -> None:
    d, d2 = _pair(neighbours, "fallback", sql, ZONE)
    assert d == d2
    assert d[0] != _pair(neighbours, "fallback", sql)[0][0]  # the zone moved the keys


@pytest.mark.parametrize("sql", [STATEMENTS[1], STATEMENTS[10], STATEMENTS[12]])
def test_the_comparison_tells_a_leaky_source_apart(
    neighbours: list[tuple[str, Any, Engine, Ledger]], sql: str
) -> None:
    d, d2 = _pair(neighbours, "leaky", sql)
    assert d != d2


def test_the_cut_statements_are_answered(
    neighbours: list[tuple[str, Any, Engine, Ledger]],
) -> None:
    """The cuts' statements (the last seven) are answered, not refused: a refusal would compare
    equal on the neighbours and test nothing."""
    for sql in STATEMENTS[-7:]:
        got = _pair(neighbours, "fallback", sql)[0]
        assert isinstance(got[0], list), (sql, got)

"""A public table's column converted where the conversion can fail must not fail by the rows.

PostgreSQL compares a NUMERIC with a float by converting it to ``double precision`` (there is no
NUMERIC-float operator), and gives COALESCE / GREATEST / LEAST / CASE one common type (a date
beside ``now()`` becomes a timestamp with time zone): a NUMERIC beyond 1.8e308, or a date past
294276 AD, then fails (22003, 22008), and so does a correlation ``r.n = t.f`` with a float. A
private column's value is bounded first (dpsql.sql.rewrite.float_safe, total_dates), but the policy
gives no type for a public table's columns. The public table's rows are public, yet PostgreSQL
evaluates a condition on them in a join or an IN / EXISTS subquery only when a private row reaches
it: ``WHERE x > 5 AND region IN (SELECT r.code FROM regions r WHERE r.n = 1.5::float8)`` was
answered on a database where no row has x > 5 and failed on its neighbour with one more person
whose x is 9 (review24; charged both times, but the outcome is a noiseless bit about that person).
Now refused before any charge on both; comparisons PostgreSQL makes without converting (a date with
now(), a NUMERIC with a plain number) stay answered. Neighbouring databases, deterministic (zero
noise).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from tests.helpers import EXACT, outcome_and_charges
from tests.policies import PolicyMaker, private_table

IN = "SELECT COUNT(*) FROM t WHERE x > 5 AND region IN (SELECT r.code FROM regions r WHERE {})"
JOIN = "SELECT {} FROM t JOIN regions r ON r.code = t.region WHERE t.x > 5{}"
REFUSED = [
    IN.format("r.n = 1.5::float8"),
    IN.format("r.n IN (1.5::real, 2)"),
    IN.format("COALESCE(r.d, now()) > now()"),
    "SELECT COUNT(*) FROM t WHERE x > 5 AND EXISTS "
    "(SELECT 1 FROM regions r WHERE r.code = t.region AND GREATEST(r.d, now()) > now())",
    "SELECT COUNT(*) FROM t WHERE x > 5 AND CAST(x AS float8) IN (SELECT r.n FROM regions r)",
    # a correlation: the outer side a float
    "SELECT COUNT(*) FROM t WHERE x > 5 AND EXISTS (SELECT 1 FROM regions r WHERE r.n = t.f)",
    "SELECT COUNT(*) FROM t WHERE x > 5 AND EXISTS "
    "(SELECT 1 FROM regions r WHERE CAST(t.x AS float8) = r.n)",
    JOIN.format("COUNT(*)", " AND r.n BETWEEN 1.5::float8 AND 2"),
    JOIN.format("SUM(CASE WHEN r.n = t.f THEN 1 ELSE 0 END)", ""),
]
ANSWERED = [
    IN.format("r.n = 1.5"),
    IN.format("r.d > now() AND r.d IN (current_date, now())"),
    IN.format("COALESCE(r.code, 'x') = 'N'"),
    "SELECT COUNT(*) FROM t WHERE x > 5 AND EXISTS "
    "(SELECT 1 FROM regions r WHERE r.code = t.region AND r.n = t.x)",
    JOIN.format("COUNT(*)", " AND r.n > 1 AND r.d < DATE '2030-01-01'"),
]


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[list[tuple[Engine, Ledger]]]:
    columns = {
        "region": {"type": "text"},
        "x": {"type": "numeric", "bounds": [0, 10]},
        "f": {"type": "float8", "bounds": [0, 10]},
    }
    pf = make_policy(
        "pubconv",
        tables={"public.t": private_table("u", columns)},
        public_tables=["public.regions"],
    )
    made = []
    for extra in (False, True):  # neighbours: one more person, with x = 9
        dsn = make_db("pubconv")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE regions (code text, d date, n numeric)")
            # public values beyond a float's and a timestamp's range
            conn.execute("INSERT INTO regions VALUES ('N', '300000-01-01', 1e400), ('S', NULL, 2)")
            conn.execute("CREATE TABLE t (u integer NOT NULL, region text, x numeric, f float8)")
            conn.execute("INSERT INTO t SELECT u, 'N', 1, 1 FROM generate_series(1, 50) u")
            if extra:
                conn.execute("INSERT INTO t VALUES (999, 'N', 9, 9)")
        led = Ledger.open(dsn, pf.policy, schema=f"dpsql_pc{uuid.uuid4().hex[:8]}")
        made.append((Engine(pf.policy, dsn, led, noise=EXACT, pool_size=1), led))
    yield made
    for engine, led in made:
        engine.close()
        led.close()


@pytest.mark.parametrize("sql", REFUSED)
def test_a_conversion_that_can_fail_is_refused_before_the_data(
    neighbours: list[tuple[Engine, Ledger]], sql: str
) -> None:
    assert [outcome_and_charges(e, led, sql) for e, led in neighbours] == [
        ("0A000", 0),
        ("0A000", 0),
    ]


@pytest.mark.parametrize("sql", ANSWERED)
def test_comparisons_without_a_conversion_are_answered(
    neighbours: list[tuple[Engine, Ledger]], sql: str
) -> None:
    assert [outcome_and_charges(e, led, sql) for e, led in neighbours] == [
        ("answered", 1),
        ("answered", 1),
    ]

"""A pattern match over a nondeterministic collation must not fail depending on the rows.

PostgreSQL (before 18) raises 0A000 "nondeterministic collations are not supported for LIKE"
(substring searches, regular expressions) when it evaluates such an operator on a row, not
when it plans it. ``SELECT COUNT(*) FROM t WHERE x > 5 AND name LIKE 'A%'`` over a table whose
``name`` is case-insensitive was answered (charged) on a database where no row has x > 5 and
failed (0A000, refunded: free) on its neighbour with one more person whose x is 9: a noiseless
bit about one person (review23). Now it is refused before any charge on both, from the catalog
alone. Neighbouring databases, deterministic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from fractions import Fraction

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import UnsupportedSql
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

STATEMENTS = [
    "SELECT COUNT(*) FROM t WHERE x > 5 AND name LIKE 'A%'",
    "SELECT SUM(CASE WHEN name ILIKE 'z%' THEN 1 ELSE 0 END) FROM t WHERE x > 5",
    "SELECT COUNT(*) FROM t WHERE x > 5 AND strpos(name, 'z') > 0",
]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_a_pattern_match_over_a_nondeterministic_collation_is_refused_before_the_data(
    make_db: Callable[[str], str], make_policy: PolicyMaker, sql: str
) -> None:
    columns = {"name": {"type": "text"}, "x": {"type": "numeric", "bounds": [0, 10]}}
    pf = make_policy("ndsearch", tables={"public.t": private_table("u", columns)}, public_tables=[])
    outcomes = []
    for extra in (False, True):  # neighbours: one more person, with x = 9
        dsn = make_db("ndsearch")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', "
                "deterministic = false)"
            )
            conn.execute("CREATE TABLE t (u integer NOT NULL, name text COLLATE ci, x numeric)")
            conn.execute("INSERT INTO t SELECT u, 'a', 1 FROM generate_series(1, 50) u")
            if extra:
                conn.execute("INSERT INTO t VALUES (999, 'zz', 9)")
        led = Ledger.open(dsn, pf.policy, schema=f"dpsql_nd{uuid.uuid4().hex[:8]}")
        engine = Engine(pf.policy, dsn, led, noise=EXACT, pool_size=1)
        try:
            with pytest.raises(UnsupportedSql) as got:
                engine.execute(
                    engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1))
                )
            outcomes.append((got.value.sqlstate, led.history("analyst")))
        finally:
            engine.close()
            led.close()
    assert outcomes == [("0A000", []), ("0A000", [])], outcomes  # the same, nothing charged


SUBQUERIES = [
    "SELECT COUNT(*) FROM t WHERE x > 5 AND region IN "
    "(SELECT r.code FROM regions r WHERE r.name LIKE 'N%')",
    "SELECT COUNT(*) FROM t WHERE x > 5 AND EXISTS "
    "(SELECT 1 FROM regions r WHERE r.code = t.region AND r.name LIKE 'N%')",
    "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 5 THEN region NOT IN "
    "(SELECT r.code FROM public.regions r WHERE r.name ILIKE 'n%') END",
]


def test_a_pattern_match_in_a_public_subquery_is_refused_before_the_data(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> None:
    """The same over a public table's case-insensitive column in an IN / EXISTS subquery
    (review24): PostgreSQL runs the subquery only when a private row reaches it, so each
    statement was answered (charged) where no row has x > 5 and failed (0A000, refunded: free)
    on the neighbour with one more person whose x is 9. The subquery's table is now read from
    the catalog too: refused before any charge on both."""
    columns = {"region": {"type": "text"}, "x": {"type": "numeric", "bounds": [0, 10]}}
    pf = make_policy(
        "ndsub",
        tables={"public.t": private_table("u", columns)},
        public_tables=["public.regions"],
    )
    outcomes: dict[str, list[tuple[str, list[object]]]] = {sql: [] for sql in SUBQUERIES}
    for extra in (False, True):  # neighbours: one more person, with x = 9
        dsn = make_db("ndsub")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', "
                "deterministic = false)"
            )
            conn.execute("CREATE TABLE regions (code text, name text COLLATE ci)")
            conn.execute("INSERT INTO regions VALUES ('N', 'North'), ('S', 'South')")
            conn.execute("CREATE TABLE t (u integer NOT NULL, region text, x numeric)")
            conn.execute("INSERT INTO t SELECT u, 'N', 1 FROM generate_series(1, 50) u")
            if extra:
                conn.execute("INSERT INTO t VALUES (999, 'N', 9)")
        led = Ledger.open(dsn, pf.policy, schema=f"dpsql_nd{uuid.uuid4().hex[:8]}")
        engine = Engine(pf.policy, dsn, led, noise=EXACT, pool_size=1)
        try:
            for sql in SUBQUERIES:
                with pytest.raises(UnsupportedSql) as got:
                    engine.execute(
                        engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1))
                    )
                outcomes[sql].append((got.value.sqlstate, list(led.history("analyst"))))
        finally:
            engine.close()
            led.close()
    for sql, seen in outcomes.items():
        assert seen == [("0A000", []), ("0A000", [])], (sql, seen)  # the same, nothing charged

"""dpsql.* settings are scoped as PostgreSQL scopes every setting (one mechanism with
statement_timeout and TimeZone): SET LOCAL lasts until its block ends, COMMIT included; SET LOCAL
outside a block warns (25P01) and changes nothing; any SET in a block its ROLLBACK undoes.

Was: ``BEGIN; SET LOCAL dpsql.epsilon = 2.5; COMMIT`` left 2.5 for the session's later queries
(charged 2.5), as did SET LOCAL outside a block. Real engine and ledger, psycopg through the wire
server, demo data; deterministic (settings and charges, not noise).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine

PRIVATE = "SELECT COUNT(*) FROM pums WHERE race = 3"


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[tuple[ServerThread, Ledger]]:
    ledger = Ledger.open(demo_dsn, demo_policy, schema=f"dpsql_sl{uuid.uuid4().hex[:8]}")
    try:
        with served_engine(demo_policy, demo_dsn, ledger=ledger) as srv:
            yield srv, ledger
    finally:
        ledger.close()


@pytest.fixture
def conn(served: tuple[ServerThread, Ledger]) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served[0].port), autocommit=True) as c:
        yield c


def _show(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


def _spent(ledger: Ledger) -> Fraction:
    return max(Fraction(s.epsilon_spent) for s in ledger.remaining("analyst"))


def test_set_local_ends_with_commit(
    conn: psycopg.Connection[Any], served: tuple[ServerThread, Ledger]
) -> None:
    ledger = served[1]
    conn.execute("SET dpsql.epsilon = 0.25")
    conn.execute("BEGIN")
    conn.execute("SET LOCAL dpsql.epsilon = 2.5")
    assert _show(conn, "dpsql.epsilon") == "2.5"
    conn.execute("COMMIT")
    assert _show(conn, "dpsql.epsilon") == "0.25"
    before = _spent(ledger)
    conn.execute(f"{PRIVATE} AND age > 40").fetchall()
    assert _spent(ledger) - before == Fraction(1, 4)  # charged the session's 0.25, not 2.5
    conn.execute("BEGIN")
    conn.execute("SET LOCAL dpsql.epsilon = 0.12")
    conn.execute("ROLLBACK")
    assert _show(conn, "dpsql.epsilon") == "0.25"


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("dpsql.epsilon", "1.5", "1.5"),
        ("dpsql.mechanism", "gaussian", "gaussian"),
        ("dpsql.show_intervals", "on", "on"),
        ("dpsql.confidence", "0.9", "0.9"),
        ("statement_timeout", "5000", "5s"),  # shown as PostgreSQL shows 5000 ms
    ],
)
def test_every_setting_one_rule(
    conn: psycopg.Connection[Any], name: str, value: str, shown: str
) -> None:
    start = _show(conn, name)
    assert start != shown
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(f"{d.sqlstate} {d.message_primary}"))
    conn.execute(f"SET LOCAL {name} = {value}")  # outside a block: a warning, no effect
    assert notices == ["25P01 SET LOCAL can only be used in transaction blocks"]
    assert _show(conn, name) == start
    for end in ("COMMIT", "ROLLBACK"):
        conn.execute("BEGIN")
        conn.execute(f"SET LOCAL {name} = {value}")
        assert _show(conn, name) == shown
        conn.execute(end)
        assert _show(conn, name) == start
    conn.execute("BEGIN")  # a plain SET in a block: undone by ROLLBACK, kept by COMMIT
    conn.execute(f"SET {name} = {value}")
    conn.execute("ROLLBACK")
    assert _show(conn, name) == start
    conn.execute("BEGIN")
    conn.execute(f"SET LOCAL {name} = {value}")
    conn.execute(f"SET {name} = {value}")  # a plain SET after SET LOCAL outlives the block
    conn.execute("COMMIT")
    assert _show(conn, name) == shown
    conn.execute(f"RESET {name}")
    assert _show(conn, name) == start


def test_a_bad_value_is_refused_outside_a_block_too(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("SET LOCAL dpsql.epsilon = -1")
    assert _show(conn, "dpsql.epsilon") == "1"  # the policy's default_epsilon (was "default")

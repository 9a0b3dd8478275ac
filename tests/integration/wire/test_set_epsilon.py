"""SET dpsql.epsilon checks the policy's per-query range when it is applied, not only at query time.

Real engine, real PostgreSQL (demo data), psycopg through the wire server. Properties: a value
above the analyst's max_epsilon or below its min_epsilon is refused at SET with 22023 (the engine's
message and hint), the previous value stays, the session keeps working (also inside a transaction
block, which the refusal fails as PostgreSQL does), and a value in range is used by the next query.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine

USER = PASSWORD = "analyst"
PRIVATE = "SELECT count(*) AS n FROM pums"


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    analysts = dict(demo_policy.analysts)  # analyst: max_epsilon 5 (demo), min_epsilon 0.25 here
    analysts[USER] = analysts[USER].model_copy(update={"min_epsilon": 0.25})
    policy = demo_policy.model_copy(update={"analysts": analysts})
    with served_engine(policy, demo_dsn) as srv:
        yield srv


@pytest.fixture
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port, USER, PASSWORD), autocommit=True) as c:
        yield c


def _show(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW dpsql.epsilon").fetchone()
    assert row is not None
    return str(row[0])


def test_above_the_maximum_is_refused_at_set(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET dpsql.epsilon = 0.5")
    with pytest.raises(pe.InvalidParameterValue) as e:
        conn.execute("SET dpsql.epsilon = 50")
    assert e.value.sqlstate == "22023"
    assert str(e.value.diag.message_primary) == (
        '50 is outside the valid range for parameter "dpsql.epsilon" (0.25 .. 5)'
    )
    assert e.value.diag.message_hint == (
        "SET dpsql.epsilon to a value between 0.25 and 5 (smaller is more private and noisier)"
    )
    assert _show(conn) == "0.5"  # the previous value stays
    assert conn.execute(PRIVATE).fetchone() is not None  # the session still works
    conn.execute("SET dpsql.epsilon TO 5")  # the maximum itself is allowed
    assert _show(conn) == "5"


def test_below_the_analyst_minimum_is_refused_at_set(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(pe.InvalidParameterValue) as e:
        conn.execute("SET dpsql.epsilon = 0.01")  # above defaults.min_epsilon, below the analyst's
    assert str(e.value.diag.message_primary) == (
        '0.01 is outside the valid range for parameter "dpsql.epsilon" (0.25 .. 5)'
    )
    assert "minimum is 0.25" in str(e.value.diag.message_detail)
    assert e.value.diag.message_hint == (
        "SET dpsql.epsilon to a value between 0.25 and 5 (smaller is more private and noisier)"
    )
    assert _show(conn) == "1"  # the analyst's default_epsilon (was "default")
    conn.execute("SET dpsql.epsilon = 0.25")  # the minimum itself is allowed
    assert _show(conn) == "0.25"
    assert conn.execute("EXPLAIN " + PRIVATE).fetchall()[0][0].find("epsilon=0.25") >= 0
    with pytest.raises(pe.InvalidParameterValue):
        conn.execute("SET dpsql.epsilon = 0")  # still refused by the syntax check
    assert _show(conn) == "0.25"


def test_refusal_in_a_transaction_block(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET dpsql.epsilon = 1")
    conn.execute("BEGIN")
    conn.execute("SET dpsql.epsilon = 2")
    with pytest.raises(pe.InvalidParameterValue):
        conn.execute("SET LOCAL dpsql.epsilon = 1e-6")
    with pytest.raises(pe.InFailedSqlTransaction):
        conn.execute("SELECT 1")
    conn.execute("ROLLBACK")
    assert _show(conn) == "1"
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_reset_and_default_still_work(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET dpsql.epsilon = 3")
    conn.execute("SET dpsql.epsilon TO DEFAULT")
    assert _show(conn) == "1"
    conn.execute("SET dpsql.epsilon = 3")
    conn.execute("RESET dpsql.epsilon")
    assert _show(conn) == "1"


def test_show_says_the_value_the_next_statement_takes(conn: psycopg.Connection[Any]) -> None:
    """SHOW (and SHOW ALL) of a dpsql setting the session has not set say the policy's value,
    as PostgreSQL shows a setting's value (they said ``default``): the analyst's default_epsilon
    (what EXPLAIN and the charge use), the policy's delta and confidence; RESET returns to them."""
    want = {"dpsql.epsilon": "1", "dpsql.delta": "1e-06", "dpsql.confidence": "0.95"}
    for name, value in want.items():
        row = conn.execute(f"SHOW {name}").fetchone()
        assert row == (value,), (name, row)
    shown = {r[0]: r[1] for r in conn.execute("SHOW ALL").fetchall()}
    assert {k: shown[k] for k in want} == want
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + PRIVATE).fetchall())
    assert "epsilon=1," in plan or "epsilon=1\n" in plan or "epsilon=1 " in plan, plan
    conn.execute("SET dpsql.confidence = 0.9")
    conn.execute("SET dpsql.epsilon = 2")
    conn.execute("RESET dpsql.confidence")
    conn.execute("SET dpsql.epsilon TO DEFAULT")
    assert conn.execute("SHOW dpsql.confidence").fetchone() == ("0.95",)
    assert _show(conn) == "1"


@pytest.mark.parametrize("value", ["0", "-1", "1e-9", "10", "5.0000000001"])
def test_one_range_in_every_refusal(conn: psycopg.Connection[Any], value: str) -> None:
    """Zero, a value below the minimum and one above the maximum get the same words, the
    policy's one range in PostgreSQL's shape, the value as written (was: 'give a value > 0', then
    'below the policy's per-query minimum', then 'must be > 0 and <= 5'; 5.0000000001 was
    printed '5')."""
    with pytest.raises(pe.InvalidParameterValue) as e:
        conn.execute(f"SET dpsql.epsilon = {value}")
    assert e.value.diag.message_primary == (
        f'{value} is outside the valid range for parameter "dpsql.epsilon" (0.25 .. 5)'
    )
    assert e.value.diag.message_hint == (
        "SET dpsql.epsilon to a value between 0.25 and 5 (smaller is more private and noisier)"
    )


@pytest.mark.parametrize("name", ["dpsql.history", "dpsql.budget_left"])
def test_unknown_setting_names_budget_and_history(conn: psycopg.Connection[Any], name: str) -> None:
    with pytest.raises(pe.UndefinedObject) as e:
        conn.execute(f"SHOW {name}")
    hint = str(e.value.diag.message_hint)
    assert "SHOW dpsql.budget" in hint and "SELECT * FROM dpsql.history" in hint, hint

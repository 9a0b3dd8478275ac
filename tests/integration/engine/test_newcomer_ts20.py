"""A newcomer's findings (session 20): date/time arithmetic over a private column, ORDER BY
positions beyond the select list, COUNT(DISTINCT) of a column with a small declared domain.

Deterministic: refusals' words and SQLSTATEs, and a clamp that holds whatever the noise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine, notices_of
from tests.policies import PolicyMaker


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy, demo_dsn, "dpsql_ts20") as e:
        yield e


def _refusal(engine: Engine, sql: str) -> DpsqlError:
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    return e.value


def _spent(engine: Engine) -> list[object]:
    assert engine.ledger is not None
    return [s.epsilon_spent for s in engine.ledger.remaining("analyst")]


@pytest.mark.parametrize(
    "where",
    [
        "purchased_at::timestamp + INTERVAL '1 day' > now()",
        "purchased_at::timestamp + INTERVAL '1 day' * quantity > now()",
        "purchased_at::timestamp - INTERVAL '1 day' > now()",
        "now() - purchased_at::timestamp > INTERVAL '1 day'",
        "purchased_at + 1 > current_date",
        "CAST(purchased_at AS date) - DATE '2025-01-01' > 30",
        "INTERVAL '1 day' * quantity > INTERVAL '3 days'",
    ],
)
def test_time_arithmetic_over_a_column_refused_in_own_words(engine: Engine, where: str) -> None:
    """Date/time arithmetic with a private column (was: a cast of the timestamp to NUMERIC in
    the rewritten SQL, PostgreSQL's planning error 42000): refused before anything runs, in
    dpsql's words, with a hint that compares the column with a constant; nothing charged."""
    before = _spent(engine)
    e = _refusal(engine, f"SELECT COUNT(*) FROM purchases WHERE {where}")
    assert e.sqlstate == "0A000", e
    assert "date/time arithmetic" in e.message and "not supported" in e.message, e
    assert "planning" not in e.message and "DECIMAL" not in str(e), e
    assert e.hint is not None, e
    if "purchased_at" in where:
        assert "WHERE purchased_at > now() - INTERVAL '1 day'" in e.hint, e
    assert _spent(engine) == before


def test_the_hints_statement_is_answered(engine: Engine) -> None:
    """The refusal's hint (the constant moved to the other side) is a statement that runs."""
    assert notices_of(
        engine, "SELECT COUNT(*) FROM purchases WHERE purchased_at > now() - INTERVAL '1 day'"
    )


@pytest.mark.parametrize(
    ("sql", "k", "width"),
    [
        ("SELECT COUNT(*) FROM purchases ORDER BY 5", 5, 1),
        ("SELECT category, COUNT(*) FROM purchases GROUP BY category ORDER BY 1, 3 DESC", 3, 2),
        ("SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1 ORDER BY 0", 0, 2),
    ],
)
def test_order_by_position_beyond_the_select_list(
    engine: Engine, sql: str, k: int, width: int
) -> None:
    """PostgreSQL's words and SQLSTATE 42P10, nothing charged (was: silently ignored)."""
    before = _spent(engine)
    e = _refusal(engine, sql)
    assert e.sqlstate == "42P10", e
    assert e.message == f"ORDER BY position {k} is not in select list", e
    assert e.hint is not None and f"positions run from 1 to {width}" in e.hint
    assert _spent(engine) == before


def test_order_by_positions_in_range_still_sort(engine: Engine) -> None:
    notices_of(engine, "SELECT category, COUNT(*) FROM purchases GROUP BY 1 ORDER BY 2 DESC, 1")


def test_count_distinct_clamped_to_the_declared_domain(engine: Engine) -> None:
    """age is an integer declared within [0, 100]: at most 101 distinct values. The answer
    and its interval are clamped to 101 (quantity, [1, 10], was 89 [0, 227]: an interval far
    beyond what the policy allows; its 10 values are now counted per key), and the notice says
    so whenever the answer is clamped (with noise ±3.5 only when it comes near 101;
    test_count_distinct_cap_states_the_declared_range_premise makes it act every time). The
    ends must hold whatever the noise."""
    sql = "SELECT COUNT(DISTINCT age) FROM pums"
    prepared = engine.prepare(sql, "analyst")
    result = engine.execute(prepared, SessionContext("analyst", Fraction(1)))
    value = result.rows[0][0]
    assert result.intervals is not None
    iv = result.intervals[0][0]
    assert iv is not None and isinstance(value, int), (value, iv)
    assert 0 <= value <= 101 and 0 <= iv[0] <= iv[1] <= 101, (value, iv)
    notes = [n for n in result.notices if "clamped to at most 101" in n]
    assert notes or value < 101, (value, iv, result.notices)  # (an open end shows 101)


def test_count_distinct_of_keys_at_most_the_keys(engine: Engine) -> None:
    sql = "SELECT COUNT(DISTINCT category) FROM purchases"
    result = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    value = result.rows[0][0]
    assert isinstance(value, int) and 0 <= value <= 5, value
    assert result.intervals is not None
    iv = result.intervals[0][0]
    assert iv is None or 0 <= iv[0] <= iv[1] <= 5, iv


def test_count_distinct_cap_states_the_declared_range_premise(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> None:
    """review21: an integer column's bounds are a declaration, not a constraint: COUNT(DISTINCT)
    counts the values outside them too. 80 distinct values under bounds [1, 40]: the answer is
    clamped to 40, and the notice must say that this assumes every value lies in the range (it
    said 'that upper end holds whatever the bounds left out': a confident bar around a wrong
    number). Deterministic: the zero-noise source releases 80, always above the cap (bounds
    [1, 40]: more values than are counted per key, derived_keys.COUNT_KEYS_MAX)."""
    import psycopg

    from dpsql.engine import Engine
    from tests.helpers import EXACT
    from tests.policies import private_table

    dsn = make_db("cdcap")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t AS SELECT u, u AS q FROM generate_series(1, 80) u")
    columns = {"q": {"type": "integer", "bounds": [1, 40]}}
    pf = make_policy("cdcap", tables={"public.t": private_table("u", columns)}, public_tables=[])
    e = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    try:
        sql = "SELECT COUNT(DISTINCT q) FROM t"
        result = e.execute(e.prepare(sql), SessionContext("analyst", Fraction(1)))
    finally:
        e.close()
    assert result.rows[0][0] == 40, result.rows
    notes = [n for n in result.notices if "clamped to at most 40" in n]
    assert len(notes) == 1, result.notices
    assert "It assumes every value lies in that range" in notes[0], notes[0]
    assert "holds" not in notes[0], notes[0]

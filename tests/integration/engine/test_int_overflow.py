"""An integer expression whose declared bounds can pass its type's range is refused before it
runs (dpsql/sql/int_overflow.py): 22003, the user's expression, the way out (a cast to bigint).

``SUM(q * 100000000)`` of an ``integer`` q with bounds [0, 100]: PostgreSQL computes the product
in integer and raises 22003 on a row with q >= 22, answers on data without one. dpsql refuses
it whatever the data, with PostgreSQL's SQLSTATE (before, it answered from a computation
PostgreSQL would not have finished, or would have failed mid-run on some data: a row deciding
an error). The bigint form answers as PostgreSQL does. One row per person, zero noise.
Deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import NumericValueOutOfRange
from tests.helpers import unrounded
from tests.owner import dpsql_rows, exact_private
from tests.policies import PolicyMaker


@pytest.fixture(scope="module")
def private(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Any]]:
    columns = {
        "q": {"type": "integer", "bounds": [0, 100]},
        "low": {"type": "integer", "bounds": [0, 20]},  # its rows (0..10) never pass the range
        "s": {"type": "smallint", "bounds": [0, 100]},
    }
    with exact_private(
        make_db,
        make_policy,
        "int_overflow",
        columns,
        "CREATE TABLE priv (u int, q int, low int, s smallint)",
        "INSERT INTO priv SELECT u, u % 101, u % 11, u % 101 FROM generate_series(1, 400) u",
    ) as got:
        yield got


@pytest.mark.parametrize(
    "e",
    ["q * 100000000", "low * 200000000 - 5", "-(q * 30000000)", "s * s * s", "(q + 1) * 50000000"],
)
def test_refused_before_running(private: tuple[Engine, Any], e: str) -> None:
    engine, conn = private
    sql = f"SELECT SUM({e}) FROM priv"
    if e.startswith(("q", "-", "s", "(")):  # PostgreSQL fails on these rows
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            conn.execute(sql)
    with pytest.raises(NumericValueOutOfRange) as got:
        dpsql_rows(engine, sql)
    err = got.value
    assert err.sqlstate == "22003"
    assert "beyond the range of" in str(err) and "bigint" in (err.hint or "")
    assert str(err).startswith(f"SUM({e}): ")


@pytest.mark.parametrize(
    "e", ["q::bigint * 100000000", "CAST(low AS bigint) * 100000000 - 5", "q * 1000", "s * 100"]
)
def test_within_range_answers_as_postgresql(
    private: tuple[Engine, Any], monkeypatch: pytest.MonkeyPatch, e: str
) -> None:
    unrounded(monkeypatch)
    engine, conn = private
    sql = f"SELECT SUM({e}) FROM priv"
    want = conn.execute(sql).fetchone()[0]
    assert dpsql_rows(engine, sql)[0][0] == want


@pytest.mark.parametrize(
    ("sql", "written", "wider"),
    [
        # a key's values are of its type: PostgreSQL fails on a row with q >= 22; dpsql read the
        # rows, charged, then failed converting the key 2200000000 to integer (redteam31)
        (
            "SELECT q * 100000000 AS k, COUNT(*) FROM priv GROUP BY 1",
            "GROUP BY q * 100000000",
            "bigint",
        ),
        (
            "SELECT COUNT(*) FROM priv GROUP BY q::bigint * 100000000000000000",
            "GROUP BY q::bigint * 100000000000000000",
            "numeric",
        ),
        # row level, past bigint: computed clamped to bigint's range, the condition was false on
        # every row (COUNT 0) where q >= 93 passes it in exact arithmetic and PostgreSQL fails
        (
            "SELECT COUNT(*) FROM priv WHERE q::bigint * 100000000000000000 > 9223372036854775807",
            "WHERE q::bigint * 100000000000000000 > 9223372036854775807",
            "numeric",
        ),
        (
            "SELECT COUNT(q * 1000000000 * 1000000000) FROM priv",
            "COUNT(q * 1000000000 * 1000000000)",
            "numeric",
        ),
        (
            "SELECT SUM(CASE WHEN q::bigint * 100000000000000000 > 0 THEN 1 ELSE 0 END) FROM priv",
            "SUM(CASE WHEN q::bigint * 100000000000000000 > 0 THEN 1 ELSE 0 END)",
            "numeric",
        ),
    ],
)
def test_keys_and_conditions_past_the_range_are_refused(
    private: tuple[Engine, Any], sql: str, written: str, wider: str
) -> None:
    """A GROUP BY key past its type's range, and a row-level part past bigint's, are refused
    before running with the user's words; PostgreSQL fails on the same text over these rows."""
    engine, conn = private
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        conn.execute(sql)
    with pytest.raises(NumericValueOutOfRange) as got:
        dpsql_rows(engine, sql)
    err = got.value
    assert err.sqlstate == "22003" and str(err).startswith(f"{written}: "), str(err)
    assert f"cast to {wider} before the arithmetic" in (err.hint or ""), err.hint


def test_a_condition_within_bigint_answers_exactly(
    private: tuple[Engine, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row-level integer part past integer's range but within bigint's is computed exactly
    (dpsql.sql.rewrite.make_total), as the bigint form PostgreSQL runs."""
    unrounded(monkeypatch)
    engine, conn = private
    want = conn.execute("SELECT COUNT(*) FROM priv WHERE q::bigint * 100000000 > 5000000000")
    got = dpsql_rows(engine, "SELECT COUNT(*) FROM priv WHERE q * 100000000 > 5000000000")
    assert got[0][0] == want.fetchone()[0]

"""A repeat runs under the catalog as it is when it runs, not as an earlier execution read it.

Each private statement reads the catalog state of its tables when it is planned (the catalog
token, the one-row-per-unit proof, the CHECK constraints that prove bounds:
dpsql.execute.unique_units.catalog_state). docs/architecture.md ("The catalog state in the
private query's message") proposes planning a repeat from the state its last execution read and
comparing it after the query instead. Whatever saves that read, a change made between two
executions must leave the second with the outcome a fresh engine gives after it: a column
switched to a case-insensitive collation (a text key would print one unit's own spelling), a
key column's type changed, the unique key that proved one row per unit dropped (rows added
since: the unbounded SQL would let one unit count many times), a CHECK that proved the bounds
dropped (a value outside added: read unclamped).

The broken twin (each engine reuses the state its first execution of a statement read) is told
apart on three: the collation (its text-key check passes on the stale token, the token read
after the query refuses, 55000, where a fresh engine refuses before reading anything, 0A000),
the type (SQL written for an integer key on a text column: XX000) and the dropped key (the proof
read again before the query is gone: 55000, where a fresh engine answers with the rows bounded).
The dropped CHECK is caught today by that same re-read before the query (the column is clamped
again), so the twin answers as a fresh engine there; an implementation that skipped it would
answer 1,010,000 instead of 10,100. Zero-noise source (EXACT), no ledger; each unit in one group,
so nothing depends on the ranking's salt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.execute import planning, unique_units
from dpsql.session import SessionContext
from tests.helpers import EXACT, case_insensitive_collation
from tests.policies import PolicyMaker, private_table

V = {"type": "numeric", "bounds": [0, 100], "clamp": "bounds"}

# name: (the table's definition and rows, the statement, the DDL between its two executions)
CASES: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "collation": (
        (
            "CREATE TABLE coll (pid integer, name text)",
            "INSERT INTO coll VALUES (0, 'Secret')",
            "INSERT INTO coll SELECT i, 'secret' FROM generate_series(1, 200) i",
        ),
        "SELECT name, COUNT(*) FROM coll GROUP BY name",
        ("ALTER TABLE coll ALTER COLUMN name TYPE text COLLATE ci",),
    ),
    "type": (
        (
            "CREATE TABLE typed (pid integer, g integer, v numeric)",
            "INSERT INTO typed SELECT i, 1 + i % 2, 50 FROM generate_series(1, 100) i",
        ),
        "SELECT g, COUNT(*), SUM(v) FROM typed GROUP BY g",
        ("ALTER TABLE typed ALTER COLUMN g TYPE text USING g::text",),
    ),
    "unique-key-dropped": (
        (
            "CREATE TABLE keyed (pid integer PRIMARY KEY, v numeric)",
            "INSERT INTO keyed SELECT i, 100 FROM generate_series(1, 100) i",
        ),
        "SELECT COUNT(*), SUM(v) FROM keyed",
        (
            "ALTER TABLE keyed DROP CONSTRAINT keyed_pkey",
            "INSERT INTO keyed SELECT 1, 100 FROM generate_series(1, 50)",
        ),
    ),
    "check-dropped": (
        (
            "CREATE TABLE checked (pid integer, v numeric CONSTRAINT checked_v "
            "CHECK (v >= 0 AND v <= 100))",
            "INSERT INTO checked SELECT i, 100 FROM generate_series(1, 100) i",
        ),
        "SELECT SUM(v) FROM checked",
        (
            "ALTER TABLE checked DROP CONSTRAINT checked_v",
            "INSERT INTO checked VALUES (101, 1000000)",
        ),
    ),
}
TABLES = {
    "public.coll": private_table("pid", {"name": {"type": "text"}}),
    "public.typed": private_table("pid", {"g": {"type": "integer", "keys": [1, 2]}, "v": V}),
    "public.keyed": private_table("pid", {"v": V}),
    "public.checked": private_table("pid", {"v": V}),
}


@pytest.fixture(scope="module")
def db(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[tuple[Any, str]]:
    pf = make_policy(
        "repeatstate",
        base={"version": 1},
        tables=TABLES,
        analysts={"a": {"budget": {"epsilon": 10000, "delta": 0.5}}},
    )
    dsn = make_db("repeatstate")
    with psycopg.connect(dsn, autocommit=True) as conn:
        case_insensitive_collation(conn)
    yield pf, dsn


def _outcome(e: Engine, p: Any) -> tuple[Any, ...]:
    """What the analyst sees: the rows and notices, or the refusal's SQLSTATE and words."""
    try:
        r = e.execute(p, SessionContext(analyst="a"))
    except DpsqlError as err:
        return ("refused", err.sqlstate, str(err))
    return ("answered", sorted(map(repr, r.rows)), r.notices)


def _second_and_fresh(pf: Any, dsn: str, case: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The second execution of the case's statement in an engine that ran it once before the
    case's DDL, and its first execution in a fresh engine after it."""
    setup, sql, ddl = CASES[case]
    table = setup[0].split()[2]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        for d in setup:
            conn.execute(d)
    e = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    try:
        p = e.prepare(sql)
        first = _outcome(e, p)
        assert first[0] == "answered", first
        with psycopg.connect(dsn, autocommit=True) as conn:
            for d in ddl:
                conn.execute(d)
        second = _outcome(e, p)
    finally:
        e.close()
    fresh_engine = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    try:
        fresh = _outcome(fresh_engine, fresh_engine.prepare(sql))
    finally:
        fresh_engine.close()
    return second, fresh


@pytest.mark.parametrize("case", list(CASES))
def test_a_repeat_after_a_catalog_change_answers_as_a_fresh_engine(
    db: tuple[Any, str], case: str
) -> None:
    second, fresh = _second_and_fresh(*db, case)
    assert second == fresh


@pytest.fixture
def stale_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken twin: the catalog state an engine's first execution of a statement read,
    reused by its later ones (a fresh engine reads its own)."""
    seen: dict[tuple[int, str], unique_units.CatalogState] = {}
    real, real_probed = planning.catalog_state, planning.catalog_state_probed

    def kept(backend: Any, a: Any, state: unique_units.CatalogState) -> unique_units.CatalogState:
        return seen.setdefault((id(backend), unique_units._state_text(a)[0]), state)

    def stale(backend: Any, a: Any) -> unique_units.CatalogState:
        return kept(backend, a, real(backend, a))

    def stale_probed(backend: Any, a: Any, probe: str) -> tuple[Any, Any]:
        state, got = real_probed(backend, a, probe)
        return kept(backend, a, state), got

    monkeypatch.setattr(planning, "catalog_state", stale)
    monkeypatch.setattr(planning, "catalog_state_probed", stale_probed)


@pytest.mark.parametrize("case", ["collation", "type", "unique-key-dropped"])
def test_the_twin_that_reuses_the_state_is_told_apart(
    db: tuple[Any, str], case: str, stale_state: None
) -> None:
    second, fresh = _second_and_fresh(*db, case)
    assert second != fresh, second

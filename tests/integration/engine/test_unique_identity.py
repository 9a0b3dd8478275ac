"""The catalog's proof of one row per unit is compared by identity, not as a yes/no
(dpsql.execute.unique_units.UNIQUE_UNIT_SQL): the table's and the unique index's oids and the
``xmin`` of their catalog rows and of the unit column's.

Deterministic properties of the engine's refusals and of the ledger (no noisy output is
asserted on), on a real PostgreSQL, each change made in the window the engine cannot close with
a lock (after the check just before the private query, undone before the check just after it):

* the privacy review's sequence: the key dropped, a unit given a second row, the query reads
  it unbounded, the row deleted and the key created again: the check after the query saw "one
  row per unit" again and released the answer; refused now (55000), nothing released. The same
  for a NOT NULL unit column with a UNIQUE index whose NOT NULL is dropped (rows with no unit
  loaded) and set again, for the unique index dropped and created again, for an inheritance
  child added (with a second row of a unit) and dropped again, and for the window around the
  ``auto`` bounds' histogram query;
* the budget of a refused statement stays charged (55000 is not a refundable class: the
  private query ran), as for the CHECK proof (dcf6a41);
* maintenance that does not touch the proof (VACUUM, ANALYZE, VACUUM FREEZE, an index on another
  column created and dropped, new units inserted) in both windows is not refused; DDL that
  writes the table's ``pg_class`` row (a CHECK constraint added, a GRANT) is (55000: run it
  again), the next run is answered;
* the key dropped and created again between two executions: the next one plans under the new
  identity and is answered (a plan memoized under the old one is not reused).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import ObjectNotInPrerequisiteState
from dpsql.execute.prepared import PrivateQuery
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from tests.policies import build_policy

COLUMNS = {
    "uid": {"type": "integer", "identifier": True},
    "g": {"type": "text", "keys": ["a", "b"]},
    "v": {"type": "numeric", "bounds": [0, 10000]},  # clamp: auto (the default)
}
POLICY = build_policy(
    base={},
    version=1,
    dataset="uident",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={f"public.{t}": {"privacy_unit": "uid", "columns": COLUMNS} for t in ("pk", "uq")},
    analysts={"analyst": {"budget": {"epsilon": 1000, "delta": 0.1}}},
)
UNITS = 500
SESSION = SessionContext("analyst", Fraction(1))

# (table, change made after the check before the query, its undoing before the check after it)
SEQUENCES = {
    "key dropped and added again": (
        "pk",
        [
            "ALTER TABLE pk DROP CONSTRAINT pk_pkey",
            "INSERT INTO pk SELECT 0, 'a', 1 FROM generate_series(1, 100)",
        ],
        [
            "DELETE FROM pk WHERE uid = 0 AND ctid <> (SELECT min(ctid) FROM pk WHERE uid = 0)",
            "ALTER TABLE pk ADD CONSTRAINT pk_pkey PRIMARY KEY (uid)",
        ],
    ),
    "unique index dropped and created again": (
        "uq",
        [
            "DROP INDEX uq_uid",
            "INSERT INTO uq SELECT 0, 'a', 1 FROM generate_series(1, 100)",
        ],
        [
            "DELETE FROM uq WHERE uid = 0 AND ctid <> (SELECT min(ctid) FROM uq WHERE uid = 0)",
            "CREATE UNIQUE INDEX uq_uid ON uq (uid)",
        ],
    ),
    "NOT NULL dropped and set again": (
        "uq",
        [
            "ALTER TABLE uq ALTER COLUMN uid DROP NOT NULL",
            "INSERT INTO uq SELECT NULL, 'a', 1 FROM generate_series(1, 100)",
        ],
        ["DELETE FROM uq WHERE uid IS NULL", "ALTER TABLE uq ALTER COLUMN uid SET NOT NULL"],
    ),
    "inheritance child added and dropped": (
        "pk",
        [
            "CREATE TABLE pk_child () INHERITS (pk)",
            "INSERT INTO pk_child SELECT 0, 'a', 1 FROM generate_series(1, 100)",
        ],
        # ANALYZE clears the parent's relhassubclass once it has no child left
        ["DROP TABLE pk_child", "ANALYZE pk"],
    ),
}


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("uident")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pk (uid integer PRIMARY KEY, g text, v numeric)")
        conn.execute("CREATE TABLE uq (uid integer NOT NULL, g text, v numeric)")
        conn.execute("CREATE UNIQUE INDEX uq_uid ON uq (uid)")
        for table in ("pk", "uq"):
            conn.execute(
                f"INSERT INTO {table} SELECT u, CASE WHEN u % 3 = 0 THEN 'b' ELSE 'a' END, "
                f"u % 50 FROM generate_series(0, {UNITS - 1}) u"
            )
    return dsn


@pytest.fixture
def charged(dsn: str) -> Iterator[tuple[Engine, Ledger]]:
    policy = POLICY
    ledger = Ledger.open(dsn, policy, schema=f"dpsql_ui{uuid.uuid4().hex[:8]}")
    engine = Engine(policy, dsn, ledger, pool_size=2)
    yield engine, ledger
    engine.close()
    ledger.close()


def _run(dsn: str, statements: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)  # type: ignore[arg-type]


def _spent(ledger: Ledger) -> Fraction:
    return sum((Fraction(h.epsilon) for h in ledger.history("analyst")), Fraction(0))


def _answer(engine: Engine, sql: str) -> Any:
    return engine.execute(engine.prepare(sql, "analyst"), SESSION)


def _unique_again(engine: Engine, table: str) -> None:
    """The proof holds again (a new identity): the next statement is planned under it and
    answered."""
    p = engine.prepare(f"SELECT COUNT(*) FROM {table}", "analyst")
    assert isinstance(p, PrivateQuery)
    assert engine.plan(p, SESSION).analysis.unique_unit  # type: ignore[union-attr]
    assert _answer(engine, f"SELECT COUNT(*) FROM {table}").rows


@pytest.mark.parametrize("sequence", list(SEQUENCES))
def test_made_again_while_the_query_runs_refuses(
    charged: tuple[Engine, Ledger], dsn: str, monkeypatch: pytest.MonkeyPatch, sequence: str
) -> None:
    """The privacy review's sequence: the check before the query passes; the proof is broken and
    a unit given many rows (the query reads them unbounded: COUNT(*) under a sensitivity of one
    row); the rows go and the proof is made again before the check after the query, which sees
    one row per unit again. Refused (55000) all the same: the proof's identity is another.
    (Before this commit that check was a yes/no and the answer was released.)"""
    import dpsql.execute.unique_units as unique_units

    engine, ledger = charged
    table, change, undo = SEQUENCES[sequence]
    checked, after = engine.checked_sql, unique_units.still_proven
    ran: list[str] = []

    def change_after_check(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        got = checked(prepared, a)  # the check before the query passes
        assert (
            a.unique_unit and a.unique_proof_id and "GROUP BY _dp_unit" not in got[0]
        )  # unbounded
        _run(dsn, change)
        ran.append("changed")
        return got

    def undo_then_check(backend: Any, a: Analysis, token: str = "", rows: Any = None) -> None:
        # the product reads this check in the query's own round trip and transaction (no DDL
        # can come between the two); read again here, after the DDL: the wider window
        _run(dsn, undo)  # one row per unit again, shown by a key of another identity
        ran.append("undone")
        after(backend, a, token)

    monkeypatch.setattr(engine, "checked_sql", change_after_check)
    monkeypatch.setattr(unique_units, "still_proven", undo_then_check)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="while the statement ran") as e:
            _answer(engine, f"SELECT COUNT(*) FROM {table}")
    finally:
        monkeypatch.undo()
        if ran == ["changed"]:
            _run(dsn, undo)
    assert ran == ["changed", "undone"]
    assert e.value.sqlstate == "55000"
    assert "dropped or changed" in str(e.value) and e.value.hint == "run the statement again"
    # the private query ran: its charge stays (as for the CHECK proof; 55 is not refundable)
    assert _spent(ledger) == 1
    _unique_again(engine, table)


def test_made_again_around_the_bounds_histogram_refuses(
    charged: tuple[Engine, Ledger], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same window around the query that counts units per bucket to choose an ``auto``
    clamp (its SQL reads each unit's value off its one row: a unit with 100 rows would count
    100 times)."""
    import dpsql.execute.auto_bounds as auto_bounds

    engine, _ = charged
    table, change, undo = SEQUENCES["key dropped and added again"]
    check = auto_bounds.still_unique
    ran: list[str] = []

    def around(backend: Any, a: Analysis, when: str) -> None:
        if not ran:
            check(backend, a, when)  # before the histogram query: passes
            _run(dsn, change)
            ran.append("changed")
        else:
            _run(dsn, undo)
            ran.append("undone")
            check(backend, a, when)

    monkeypatch.setattr(auto_bounds, "still_unique", around)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="bounds were being chosen"):
            _answer(engine, f"SELECT SUM(v) FROM {table}")
    finally:
        monkeypatch.undo()
        if ran == ["changed"]:
            _run(dsn, undo)
    assert ran == ["changed", "undone"]
    _unique_again(engine, table)


MAINTENANCE = {
    "VACUUM": (["VACUUM pk"], ["VACUUM pk"]),
    "ANALYZE": (["ANALYZE pk"], ["ANALYZE pk"]),
    "VACUUM ANALYZE, FREEZE": (["VACUUM (ANALYZE) pk"], ["VACUUM (FREEZE) pk"]),
    "another index": (["CREATE INDEX pk_g ON pk (g)"], ["DROP INDEX pk_g"]),
    "new units": (
        [f"INSERT INTO pk VALUES ({UNITS}, 'a', 1)"],
        [f"DELETE FROM pk WHERE uid = {UNITS}", "VACUUM pk"],
    ),
}


@pytest.mark.parametrize("maintenance", list(MAINTENANCE))
def test_maintenance_in_the_windows_is_not_refused(
    charged: tuple[Engine, Ledger], dsn: str, monkeypatch: pytest.MonkeyPatch, maintenance: str
) -> None:
    """VACUUM and ANALYZE update ``pg_class`` in place (its ``xmin`` stays): run between the
    plan and the check before the query, and between the query and the check after it, the
    statement is answered under the plan's proof."""
    import dpsql.execute.unique_units as unique_units

    engine, _ = charged
    before, after_query = MAINTENANCE[maintenance]
    checked, after = engine.checked_sql, unique_units.still_proven
    seen: list[Analysis] = []

    def before_check(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        _run(dsn, before)
        seen.append(a)
        return checked(prepared, a)

    def before_after(backend: Any, a: Analysis, token: str = "", rows: Any = None) -> None:
        # the product reads this check in the query's own round trip and transaction (no DDL
        # can come between the two); read again here, after the DDL: the wider window
        _run(dsn, after_query)
        after(backend, a, token)

    monkeypatch.setattr(engine, "checked_sql", before_check)
    monkeypatch.setattr(unique_units, "still_proven", before_after)
    try:
        r = _answer(engine, "SELECT COUNT(*) FROM pk")
    finally:
        monkeypatch.undo()
    assert r.rows and len(seen) == 1 and seen[0].unique_unit


@pytest.mark.parametrize(
    "ddl", ["ALTER TABLE pk ADD CONSTRAINT pk_v CHECK (v >= 0)", "GRANT SELECT ON pk TO PUBLIC"]
)
def test_ddl_on_the_table_in_the_window_refuses(
    charged: tuple[Engine, Ledger], dsn: str, monkeypatch: pytest.MonkeyPatch, ddl: str
) -> None:
    """The cost of the table's ``pg_class`` row in the identity (it is what shows an inheritance
    child added and dropped again): other DDL that writes that row, between the plan and the
    check before the query, refuses the statement too (55000: run it again), and the next run
    is answered."""
    engine, _ = charged
    checked = engine.checked_sql

    def ddl_first(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        _run(dsn, [ddl])
        return checked(prepared, a)

    monkeypatch.setattr(engine, "checked_sql", ddl_first)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="while the statement was being"):
            _answer(engine, "SELECT COUNT(*) FROM pk")
    finally:
        monkeypatch.undo()
        _unique_again(engine, "pk")
        _run(
            dsn,
            ["ALTER TABLE pk DROP CONSTRAINT IF EXISTS pk_v", "REVOKE SELECT ON pk FROM PUBLIC"],
        )


def test_made_again_between_executions_plans_again(
    charged: tuple[Engine, Ledger], dsn: str
) -> None:
    """The key dropped and created again between two executions of one prepared statement: the
    second plans under the new identity and is answered (no stale plan refused forever)."""
    engine, _ = charged
    p = engine.prepare("SELECT COUNT(*) FROM pk", "analyst")
    assert isinstance(p, PrivateQuery)
    first = engine.plan(p, SESSION).analysis  # type: ignore[union-attr]
    assert engine.execute(p, SessionContext("analyst", Fraction(1, 2))).rows
    _run(dsn, ["ALTER TABLE pk DROP CONSTRAINT pk_pkey", "ALTER TABLE pk ADD PRIMARY KEY (uid)"])
    second = engine.plan(p, SESSION).analysis  # type: ignore[union-attr]
    assert first.unique_unit and second.unique_unit
    assert first.unique_proof_id != second.unique_proof_id
    assert engine.execute(p, SessionContext("analyst", Fraction(3, 4))).rows

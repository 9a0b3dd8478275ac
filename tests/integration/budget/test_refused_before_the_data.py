"""A refusal dpsql decides before anything runs on the private rows costs nothing.

The catalog's proof of one row per unit (a primary key on the privacy unit) is read again just
before the private query runs (:meth:`dpsql.engine.Engine.checked_sql`, and before the ``auto``
bounds' histogram query: :func:`dpsql.execute.auto_bounds.histograms`). DDL on the table between
the plan and that check refuses the statement (55000, "run the statement again"). The budget
was reserved by then; before, the reservation stayed charged (class 55 is not refundable), so
the analyst paid for an answer never computed. The refusal is read from the catalog alone, so
it is refunded now (:func:`dpsql.budget.records.before_the_data`): the ledger's budgets are
as they were, and the history shows the release refunded. The same refusal *after* the query ran
(tests/integration/engine/test_unique_identity.py) stays charged.

Deterministic: no noisy value is asserted on, only the ledger's totals.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from tests.policies import build_policy, private_table

BASE = {
    "version": 1,
    "dataset": "before",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    "analysts": {"analyst": {"budget": {"epsilon": 1000, "delta": 0.1}}},
}
G = {"type": "text", "keys": ["a", "b"]}
V = {"type": "numeric", "bounds": [0, 10000]}
# the table pk with fixed bounds (1 row, 1 group, v clamped to its bounds) or auto ones
POLICIES = {
    "fixed": build_policy(
        base=BASE,
        tables={"public.pk": private_table("uid", {"g": G, "v": {**V, "clamp": "bounds"}})},
    ),
    "auto": build_policy(
        base=BASE,
        tables={"public.pk": private_table("uid", {"g": G, "v": V}, rows="auto", groups="auto")},
    ),
}


SESSION = SessionContext("analyst", Fraction(1))
DDL = "GRANT SELECT ON pk TO PUBLIC"  # writes the table's pg_class row: another identity
UNDO = "REVOKE SELECT ON pk FROM PUBLIC"


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("before")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pk (uid integer PRIMARY KEY, g text, v numeric)")
        conn.execute(
            "INSERT INTO pk SELECT u, CASE WHEN u % 3 = 0 THEN 'b' ELSE 'a' END, u % 50 "
            "FROM generate_series(0, 499) u"
        )
    return dsn


@contextmanager
def _engine(dsn: str, bounds: str) -> Iterator[tuple[Engine, Ledger]]:
    policy = POLICIES[bounds]
    ledger = Ledger.open(dsn, policy, schema=f"dpsql_bd{uuid.uuid4().hex[:8]}")
    engine = Engine(policy, dsn, ledger, pool_size=2)
    try:
        yield engine, ledger
    finally:
        engine.close()
        ledger.close()


@pytest.fixture(params=["fixed", "auto"])
def charged(dsn: str, request: pytest.FixtureRequest) -> Iterator[tuple[Engine, Ledger]]:
    with _engine(dsn, request.param) as got:
        yield got


def _run(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def _budgets(engine: Engine) -> list[tuple[object, ...]]:
    sql = "SELECT budget, name, epsilon_spent, delta_spent, rho_spent, releases FROM dpsql.budget"
    return engine.execute(engine.prepare(sql, "analyst"), SESSION).rows


def _states(ledger: Ledger) -> list[str]:
    return [h.state for h in ledger.history("analyst")]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM pk",
        "SELECT g, SUM(v) FROM pk GROUP BY g",
    ],
    ids=["count", "grouped sum"],
)
def test_refused_before_the_query_is_refunded(
    charged: tuple[Engine, Ledger], dsn: str, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    """DDL between the plan and the check just before the private query: 55000, and every
    reservation of the statement (with ``auto`` bounds: the bound choices' and the answer's)
    refunded, unless something was read (an ``auto`` bound chosen before the check: its
    histogram ran, so it stays charged, and only the answer is refunded)."""
    engine, ledger = charged
    before = _budgets(engine)
    checked = engine.checked_sql
    ran: list[Analysis] = []

    def ddl_first(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        if not ran:
            _run(dsn, DDL)
        ran.append(a)
        return checked(prepared, a)

    monkeypatch.setattr(engine, "checked_sql", ddl_first)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="being planned") as e:
            engine.execute(engine.prepare(sql, "analyst"), SESSION)
    finally:
        monkeypatch.undo()
        _run(dsn, UNDO)
    assert e.value.sqlstate == "55000" and e.value.hint == "run the statement again"
    states = _states(ledger)
    chose = [h for h in ledger.history("analyst") if h.mechanism == "auto_bound"]
    if not chose:  # nothing read at all: the ledger's budgets are as they were
        assert _budgets(engine) == before, (before, states)
        assert states and set(states) == {"refunded"}, states
    else:  # the bound choices read the rows (their histogram ran): those stay charged
        assert {h.state for h in chose} == {"committed"}
        assert {h.state for h in ledger.history("analyst") if h not in chose} == {"refunded"}
    # and the statement is answered when run again
    assert engine.execute(engine.prepare(sql, "analyst"), SESSION).rows


def test_refused_before_the_bounds_histogram_is_refunded(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check before the ``auto`` bounds' histogram query (the first query of the
    statement to read rows): refused there, nothing was read, and the statement's reservations
    (the bound choices' and the answer's, reserved together) are all refunded."""
    import dpsql.execute.auto_bounds as auto_bounds

    check = auto_bounds.still_unique
    calls: list[str] = []

    def ddl_first(backend: Any, a: Analysis, when: str) -> None:
        if not calls:
            _run(dsn, DDL)
        calls.append(when)
        check(backend, a, when)

    with _engine(dsn, "auto") as (engine, ledger):
        before = _budgets(engine)
        monkeypatch.setattr(auto_bounds, "still_unique", ddl_first)
        try:
            with pytest.raises(ObjectNotInPrerequisiteState, match="being planned"):
                engine.execute(engine.prepare("SELECT SUM(v) FROM pk", "analyst"), SESSION)
        finally:
            monkeypatch.undo()
            _run(dsn, UNDO)
        assert calls == ["while contribution bounds were being planned"]
        assert _budgets(engine) == before
        states = _states(ledger)
        assert len(states) >= 2 and set(states) == {"refunded"}, states


def test_a_failure_after_the_rows_were_read_is_committed(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side: a failure after the private query read the rows (here a bug injected in
    the release step) is charged, and the reservation is committed, not left open (an open one
    looks like a crash to ``dpsql budget reconcile``, whose ``--refund`` would make the failure
    a free probe); the error says the budget stays spent."""
    import dpsql.execute.private as private
    from dpsql.errors import InternalError

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise InternalError("injected: the release step failed")

    with _engine(dsn, "fixed") as (engine, ledger):
        monkeypatch.setattr(private, "release_measured", broken)
        try:
            with pytest.raises(InternalError) as e:
                engine.execute(engine.prepare("SELECT COUNT(*) FROM pk", "analyst"), SESSION)
        finally:
            monkeypatch.undo()
        assert _states(ledger) == ["committed"]
        assert "stays spent" in (e.value.detail or "")

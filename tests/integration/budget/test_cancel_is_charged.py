"""A cancelled private query stays charged, and the analyst is told so, plainly.

Whether and when a private query is cancelled can depend on the private rows (how long it runs
does), so a cancel is never refunded (docs/budget.md, "Crash safety"): whoever cancels it.
Three ways, on a private table that is a view sleeping 50 ms per row (100 rows, 5 s; nothing
else in the statement reads a row, the bounds are fixed):

* the policy's ``statement_timeout_ms`` (1 s) runs out;
* the client's CancelRequest through the wire (psycopg's ``cancel_safe``) while it runs;
* an administrator's ``pg_cancel_backend`` of the upstream query.

Each: SQLSTATE 57014 in PostgreSQL's words for its cause ("canceling statement due to user
request" / "... statement timeout"), the release committed in the ledger (``dpsql.history``: ``committed``,
the statement's epsilon spent), and the error's text says the budget was spent and why.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, served_engine, slow_db
from tests.policies import PolicyMaker, private_table

SQL = "SELECT SUM(x) FROM slow"
SPENT = "privacy budget"  # what the error's text must speak of


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    return slow_db(make_db, "cancel")


X = {"x": {"type": "numeric", "bounds": [0, 10], "clamp": "bounds"}}
DEFAULTS = {"epsilon": 1.0, "max_epsilon": 5.0, "delta": 1e-6}


def _history(ledger: Ledger) -> list[tuple[str, Fraction]]:
    return [(h.state, Fraction(h.epsilon)) for h in ledger.history("analyst")]


def _said(e: Any) -> str:
    return " ".join(str(x) for x in (getattr(e, "message", e), e.detail, e.hint) if x)


def _policy(make_policy: PolicyMaker, timeout_ms: int) -> Any:
    """The view ``slow`` private (fixed bounds), statements stopped after ``timeout_ms``."""
    tables = {"public.slow": private_table("u", X)}
    defaults = {**DEFAULTS, "statement_timeout_ms": timeout_ms}
    return make_policy("cancel", tables=tables, public_tables=[], defaults=defaults).policy


@pytest.fixture
def ledger(dsn: str, make_policy: PolicyMaker) -> Iterator[Callable[[Any], Ledger]]:
    opened: list[Ledger] = []

    def open_(policy: Any) -> Ledger:
        led = Ledger.open(dsn, policy, schema=f"dpsql_cx{uuid.uuid4().hex[:8]}")
        opened.append(led)
        return led

    yield open_
    for led in opened:
        led.close()


@pytest.fixture
def engine_of(
    dsn: str, ledger: Callable[[Any], Ledger]
) -> Iterator[Callable[[Any], tuple[Engine, Ledger]]]:
    """An engine over ``dsn`` under a policy, with a ledger of its own; closed at the end."""
    engines: list[Engine] = []

    def make(policy: Any) -> tuple[Engine, Ledger]:
        led = ledger(policy)
        engines.append(Engine(policy, dsn, led, pool_size=2))
        return engines[-1], led

    yield make
    for e in engines:
        e.close()


def test_statement_timeout_is_charged_and_said(
    make_policy: PolicyMaker, engine_of: Callable[[Any], tuple[Engine, Ledger]]
) -> None:
    engine, led = engine_of(_policy(make_policy, 1000))
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare(SQL, "analyst"), SessionContext("analyst"))
    assert e.value.sqlstate == "57014"
    assert e.value.message == "canceling statement due to statement timeout"  # PostgreSQL's
    assert e.value.hint is not None and "statement_timeout_ms" in e.value.hint
    assert _history(led) == [("committed", Fraction(1))]
    assert SPENT in _said(e.value), _said(e.value)


def _when_running(dsn: str) -> int:
    """The upstream backend running the private query over the view, once it reads rows."""
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                # only the private query reads the view's rows (pg_sleep in slowly())
                "SELECT pid FROM pg_stat_activity WHERE state = 'active' "
                "AND application_name = 'dpsql' AND wait_event = 'PgSleep'"
            ).fetchone()
            if row is not None:
                return int(row[0])
            time.sleep(0.05)
    raise AssertionError("the private query never ran")


def _cancelled_by_admin(
    engine: Engine, sql: str, dsn: str, first: Callable[[], bool] = lambda: True
) -> DpsqlError:
    """Run ``sql`` as the analyst in a thread; once ``first()`` holds and its upstream query
    reads rows, cancel that query as an administrator (``pg_cancel_backend``). The statement
    fails with 57014 and its words say the budget was spent: that error."""
    got: list[BaseException] = []

    def run() -> None:
        try:
            engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst"))
        except BaseException as e:
            got.append(e)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 60  # (a guard, not a measurement)
    while time.monotonic() < deadline and not first():
        time.sleep(0.05)
    pid = _when_running(dsn)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
    t.join(60)
    assert not t.is_alive()
    assert len(got) == 1 and isinstance(got[0], DpsqlError), got
    assert got[0].sqlstate == "57014"
    assert SPENT in _said(got[0]), _said(got[0])
    return got[0]


def test_admin_cancel_is_charged_and_said(
    dsn: str, make_policy: PolicyMaker, engine_of: Callable[[Any], tuple[Engine, Ledger]]
) -> None:
    engine, led = engine_of(_policy(make_policy, 60_000))
    err = _cancelled_by_admin(engine, SQL, dsn)
    assert err.message == "canceling statement due to user request"  # as PostgreSQL says
    assert _history(led) == [("committed", Fraction(1))]


def test_client_cancel_is_charged_and_said(
    dsn: str, make_policy: PolicyMaker, ledger: Callable[[Any], Ledger]
) -> None:
    policy = _policy(make_policy, 60_000)
    led = ledger(policy)
    with (
        served_engine(policy, dsn, ledger=led) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        got: list[BaseException] = []

        def run() -> None:
            try:
                conn.execute(SQL)
            except BaseException as e:
                got.append(e)

        t = threading.Thread(target=run)
        t.start()
        _when_running(dsn)
        conn.cancel_safe()
        t.join(60)
        assert not t.is_alive()
        assert len(got) == 1 and isinstance(got[0], psycopg.Error), got
        err = got[0]
        assert err.sqlstate == "57014"
        said = " ".join(x or "" for x in (err.diag.message_primary, err.diag.message_detail,
                                           err.diag.message_hint))  # fmt: skip
        assert SPENT in said, said
        # PostgreSQL's words for a cancel (was "... user request or statement timeout", with a
        # hint to raise the timeout), the hint about what the cancel costs
        assert err.diag.message_primary == "canceling statement due to user request"
        assert "cancel does not give its budget back" in str(err.diag.message_hint)
        assert _history(led) == [("committed", Fraction(1))]


def test_history_tells_a_failed_release_from_an_answered_one(
    make_policy: PolicyMaker, engine_of: Callable[[Any], tuple[Engine, Ledger]]
) -> None:
    """``dpsql.history``'s ``outcome``: a release charged for a query that then timed out is
    ``canceled or timed out (SQLSTATE 57014): charged``, an answered one ``answered`` (both
    were ``committed`` with nothing else to tell them apart: newcomer20)."""
    engine, _ = engine_of(_policy(make_policy, 1000))
    s = SessionContext("analyst")
    with pytest.raises(DpsqlError):
        engine.execute(engine.prepare(SQL, "analyst"), s)
    engine.execute(engine.prepare("SELECT COUNT(*) FROM slow WHERE false", "analyst"), s)
    view = engine.execute(engine.prepare("SELECT state, outcome FROM dpsql.history"), s)
    assert view.rows == [
        ("committed", "answered"),
        ("committed", "canceled or timed out (SQLSTATE 57014): charged"),
    ]


def _history_rows(ledger: Ledger) -> list[tuple[str, str, str | None]]:
    return [(h.mechanism, h.state, h.outcome) for h in ledger.history("analyst")]


def test_a_cancelled_statements_chosen_bounds_are_reused_by_its_retry(
    dsn: str, make_policy: PolicyMaker, engine_of: Callable[[Any], tuple[Engine, Ledger]]
) -> None:
    """newcomer21 #8: a statement with ``auto`` bounds cancelled while its answer runs has
    already chosen its bounds (a release, charged, in dpsql.history): its retry reuses them
    free and pays only for its answer (was: ``auto_bound`` charged again on every retry). Here
    (20 units) the choice falls back to the default (the guard's noisy count said too few),
    which was not stored at all; it is now, for a statement at the same epsilon. The cancel
    itself stays charged (the whole statement's epsilon), and says so."""
    policy = make_policy(
        "cancelauto",
        tables={"public.slow20": private_table("u", X, rows="auto")},
        public_tables=[],
        defaults={**DEFAULTS, "statement_timeout_ms": 60_000},
    ).policy
    engine, led = engine_of(policy)
    sql = "SELECT SUM(x) FROM slow20"

    def bounds_chosen() -> bool:  # then the answer's query is the one that reads rows
        return any(m == "auto_bound" and s == "committed" for m, s, _ in _history_rows(led))

    _cancelled_by_admin(engine, sql, dsn, first=bounds_chosen)
    cancelled = _history_rows(led)
    explain = engine.execute(engine.prepare(f"EXPLAIN {sql}", "analyst"), SessionContext("analyst"))
    plan = "\n".join(str(r[0]) for r in explain.rows)
    assert "reused free" in plan and "when the statement runs" not in plan, plan
    retry = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst"))
    bounds = [r for r in cancelled if r[0] == "auto_bound"]
    assert bounds and all(s == "committed" for _, s, _ in bounds), cancelled
    answers = [r for r in cancelled if r[0] != "auto_bound"]
    assert [(s, o) for _, s, o in answers] == [
        ("committed", "canceled or timed out (SQLSTATE 57014): charged")
    ], cancelled
    after = _history_rows(led)
    assert [r for r in after if r[0] == "auto_bound"] == bounds, after  # reused, not chosen again
    assert len(after) == len(cancelled) + 1 and after[0][1:] == ("committed", "answered"), after
    assert any("(reused free)" in n for n in retry.notices), retry.notices

"""Stopping a running statement from another of the analyst's sessions, as Superset SQL Lab's
Stop does it (newcomer21 #38).

Superset's PostgresEngineSpec reads ``SELECT pg_backend_pid()`` on the SQL Lab connection before
the query (get_cancel_query_id), and Stop runs, on another connection,
``SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid='<that pid>'``
(cancel_query), succeeding whenever that does not raise. Through dpsql ``pg_stat_activity`` was
empty and the statement ran on (charged) while Stop said it was done. Now the analyst's own
sessions are rows of ``pg_stat_activity`` and the call ends that session's statement; another
analyst's sessions are neither listed nor signalled.

Real wire server, psycopg sessions, PostgreSQL; a private table that is a view sleeping 50 ms a
row (100 rows: 5 s). Deterministic: the statement stopped is an error instead of its answer.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.wire.auth import make_verifier
from tests.helpers import analyst_dsn, served_engine, slow_db
from tests.policies import DocArgs, PolicyMaker, build_policy, demo_doc, private_table

SLOW = "SELECT SUM(x) FROM slow"


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    return slow_db(make_db, "stop")


SLOW_TABLE = private_table("u", {"x": {"type": "numeric", "bounds": [0, 10], "clamp": "bounds"}})
STOP: DocArgs = {
    "tables": {"public.slow": SLOW_TABLE, "public.slow20": SLOW_TABLE},
    "public_tables": [],
    "analysts": {
        "analyst": demo_doc()["analysts"]["analyst"],
        "bob": {"credential": make_verifier("bob"), "budget": {"epsilon": 100}},
    },
}


@pytest.fixture(scope="module")
def port(dsn: str) -> Iterator[int]:
    with served_engine(build_policy(**STOP), dsn) as srv:
        yield srv.port


def _running(conn: psycopg.Connection[Any], pid: int) -> None:
    """Wait until session ``pid`` runs a statement, as seen in (dpsql's) pg_stat_activity."""
    deadline = time.monotonic() + 60  # (a guard, not a measurement)
    while time.monotonic() < deadline:
        row = conn.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        if row is not None and row[0] == "active":
            return
        time.sleep(0.05)
    raise AssertionError(f"session {pid} never showed as active")


def _in_thread(conn: psycopg.Connection[Any], sql: str) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(conn.execute(sql).fetchall())
        except BaseException as e:
            got.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, got


def test_superset_sql_lab_stop_ends_the_running_statement(port: int) -> None:
    """Superset's two statements, verbatim: the SQL Lab session's statement ends (57P01, its
    connection closed, as PostgreSQL's pg_terminate_backend) and Stop's row is true (was: no
    row, the statement ran to its end)."""
    with (
        psycopg.connect(analyst_dsn(port), autocommit=True) as lab,
        psycopg.connect(analyst_dsn(port), autocommit=True) as stop,
    ):
        pid = lab.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        rows = stop.execute("SELECT pid, usename, state, backend_type FROM pg_stat_activity")
        listed = {r[0]: r[1:] for r in rows.fetchall()}
        assert listed[pid] == ("analyst", "idle", "client backend"), listed
        assert len(listed) == 2  # the analyst's two sessions, nothing else
        t, got = _in_thread(lab, SLOW)
        _running(stop, pid)
        done = stop.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid='{pid}'"
        ).fetchall()
        t.join(60)
        assert done == [(True,)]
        assert not t.is_alive() and len(got) == 1
        assert isinstance(got[0], psycopg.Error), got  # not the answer: the statement stopped
        assert got[0].sqlstate in ("57P01", None), got[0]  # None: the connection closed first
        assert lab.closed or lab.broken
        assert pid not in {r[0] for r in stop.execute("SELECT pid FROM pg_stat_activity")}


def test_cancel_backend_of_an_own_session_cancels_its_statement(port: int) -> None:
    """pg_cancel_backend of another of the analyst's sessions cancels its running statement
    (57014, the session goes on), as PostgreSQL's (was: false, nothing cancelled)."""
    with (
        psycopg.connect(analyst_dsn(port), autocommit=True) as a,
        psycopg.connect(analyst_dsn(port), autocommit=True) as b,
    ):
        pid = a.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        t, got = _in_thread(a, SLOW)
        _running(b, pid)
        assert b.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone() == (True,)
        t.join(60)
        assert not t.is_alive() and len(got) == 1
        assert isinstance(got[0], psycopg.errors.QueryCanceled), got
        assert a.execute("SELECT 1").fetchone() == (1,)  # the session goes on


def test_a_cancel_before_the_query_is_sent_takes_effect(dsn: str) -> None:
    """A cancel that reaches a statement before its upstream query is sent (Stop while the engine
    plans, waits for a pooled connection, or is between two queries: under load the test above
    cancelled there 2 times in 6) ends it with 57014 and never runs the query (was: the cancel
    went to the idle connection, PostgreSQL dropped it, and the statement ran, 1 s here, and
    answered; a terminated session's statement ran on and was charged, holding its connection
    and the in-flight slot of its identical statements). Engine level, a real PostgreSQL."""
    from fractions import Fraction

    from dpsql.engine import Engine
    from dpsql.errors import QueryCanceled
    from dpsql.execute.backend import CancelToken
    from dpsql.session import SessionContext

    engine = Engine(build_policy(**STOP), dsn, pool_size=1)
    try:
        token = CancelToken()
        token.cancel()  # before any connection is attached
        prepared = engine.prepare("SELECT SUM(x) FROM slow20", "analyst")
        with pytest.raises(QueryCanceled, match="canceling statement due to user request"):
            engine.execute(prepared, SessionContext("analyst", Fraction(1)), (), token)
    finally:
        engine.close()


def test_another_analysts_sessions_are_not_listed_nor_signalled(port: int) -> None:
    """bob sees only his own session and can't stop the analyst's statement, which answers."""
    bob_dsn = analyst_dsn(port, "bob", "bob")
    with (
        psycopg.connect(analyst_dsn(port), autocommit=True) as a,
        psycopg.connect(analyst_dsn(port), autocommit=True) as watch,
        psycopg.connect(bob_dsn, autocommit=True) as bob,
    ):
        pid = a.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        own = bob.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        t, got = _in_thread(a, "SELECT SUM(x) FROM slow20")
        _running(watch, pid)
        seen = [r[0] for r in bob.execute("SELECT pid FROM pg_stat_activity").fetchall()]
        assert seen == [own]
        assert (
            bob.execute(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid='{pid}'"
            ).fetchall()
            == []
        )
        assert bob.execute(
            "SELECT pg_cancel_backend(%s), pg_terminate_backend(%s)", (pid, pid)
        ).fetchone() == (False, False)
        t.join(60)
        assert len(got) == 1 and isinstance(got[0], list), got  # answered, not stopped


@pytest.fixture(scope="module")
def workers(dsn: str, make_policy: PolicyMaker) -> Iterator[str]:
    """``dpsql serve --workers 2`` on the module's database: the analyst's DSN."""
    from tests.helpers import db_name, start_serve

    proc, port = start_serve(["--policy", str(make_policy("stop", **STOP).path), "--upstream", dsn,
                              "--workers", "2"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield analyst_dsn(port).replace("dbname=demo", f"dbname={db_name(dsn)}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def _spread(dsn: str, each: int) -> list[psycopg.Connection[Any]]:
    """Sessions until each of the 2 workers holds ``each`` (the kernel picks the worker; a
    session's pid mod 2 is its worker's number)."""
    conns: list[psycopg.Connection[Any]] = []
    deadline = time.monotonic() + 60  # (a guard: the second worker may still be starting)
    while time.monotonic() < deadline:
        c = psycopg.connect(dsn, autocommit=True)
        if sum(k.info.backend_pid % 2 == c.info.backend_pid % 2 for k in conns) < each:
            conns.append(c)
        else:  # that worker has its share: keep within the analyst's session limit
            c.close()
            time.sleep(0.05)
        if len(conns) == 2 * each:
            return conns
    for c in conns:
        c.close()
    raise AssertionError("the kernel never gave the second worker a session")


def _upstream_running(dsn: str) -> None:
    """Until the private query reads the view's rows upstream (pg_sleep in slowly())."""
    deadline = time.monotonic() + 60  # (a guard, not a measurement)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE state = 'active' AND wait_event = 'PgSleep'"
            ).fetchone():
                return
            time.sleep(0.05)
    raise AssertionError("the private query never ran")


def test_superset_stop_across_worker_processes(dsn: str, workers: str) -> None:
    """``dpsql serve --workers 2``: SQL Lab's connection and Stop's may land on different
    worker processes (the kernel spreads them). The other worker's sessions of the analyst are
    listed (state NULL: unknown there) and Superset's Stop reaches the statement through the
    relay; another analyst's are not listed."""
    conns = _spread(workers, 1)
    try:
        lab = conns[-1]
        stop = next(c for c in conns if c.info.backend_pid % 2 != lab.info.backend_pid % 2)
        pid = lab.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        listed = dict(stop.execute("SELECT pid, usename FROM pg_stat_activity").fetchall())
        assert listed == {c.info.backend_pid: "analyst" for c in conns}, listed
        bob_dsn = workers.replace("user=analyst password=analyst", "user=bob password=bob")
        conns.append(bob := psycopg.connect(bob_dsn, autocommit=True))
        seen = [r[0] for r in bob.execute("SELECT pid FROM pg_stat_activity").fetchall()]
        assert seen == [bob.info.backend_pid]  # another analyst's, on either worker: not listed
        others = [c.info.backend_pid for c in conns[:-1]]
        signals = [f"pg_cancel_backend({p}), pg_terminate_backend({p})" for p in others]
        row = bob.execute(f"SELECT {', '.join(signals)}").fetchone()
        assert row is not None and not any(row)  # and not signalled
        assert lab.execute("SELECT 1").fetchone() == (1,)
        t, got = _in_thread(lab, SLOW)
        _upstream_running(dsn)
        done = stop.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid='{pid}'"
        ).fetchall()
        t.join(60)
        assert done == [(True,)]
        assert not t.is_alive() and len(got) == 1 and isinstance(got[0], psycopg.Error), got
    finally:
        for c in conns:
            c.close()


def test_identical_statements_on_two_workers_are_charged_once(workers: str) -> None:
    """newcomer21 #28 with ``dpsql serve --workers 2``: four sessions of a dashboard spread by
    the kernel over both workers run one statement at once; the in-flight slot now holds across
    the worker processes (dpsql.execute.in_flight.SharedSlots), so one release is charged and the
    three others are free repeats (was: one release per worker, each charged). The statement
    reads a 1-second view, so all four arrive while the first runs."""
    sql = "SELECT SUM(x) FROM slow20 WHERE x >= 0"
    conns = _spread(workers, 2)
    try:
        tiles = [c for c in conns if c.info.backend_pid % 2 == 0][:2]
        tiles += [c for c in conns if c.info.backend_pid % 2 == 1][:2]
        barrier = threading.Barrier(len(tiles))
        answers: list[Any] = [None] * len(tiles)

        def run(i: int) -> None:
            barrier.wait()
            answers[i] = tiles[i].execute(sql).fetchall()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(tiles))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        rows = tiles[0].execute("SELECT statement, state FROM dpsql.history").fetchall()
        states = sorted(state for text, state in rows if text == sql)
    finally:
        for c in conns:
            c.close()
    assert all(a is not None and a == answers[0] for a in answers), answers
    assert states == ["committed", "repeat", "repeat", "repeat"], states

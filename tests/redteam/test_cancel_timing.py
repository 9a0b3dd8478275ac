"""A client's cancel must not read the run time that timing padding hides (review22).

With ``timing: {min_ms: M}`` every private answer is delivered M ms after its statement arrived
whatever its run time below M (docs/timing.md), so the moment says nothing of the rows. But a
CancelRequest the analyst sends at a moment T of its choosing cut the upstream query short when
it was still running, and was a no-op when it had ended: 57014 or the answer, the bit "ran longer
than T" (any T, below the padding's grid), for the statement's epsilon (at least min_epsilon). The
client's own ``statement_timeout`` is not applied to private queries for this very reason; a
cancel was the same oracle, and a client that hung up at T left it in ``dpsql.history`` (the
outcome column: canceled or answered) and in the repeat store (a free repeat or not).

Now a client's cancel (or its going away) takes effect at the padded statement's next delivery
moment: what it can tell is what the delivery moment already tells. Deterministic: a view that
sleeps per row (a query's run time that the data decides), no noise in the outcome.
"""

from __future__ import annotations

import signal
import socket
import subprocess
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
from dpsql.execute.backend import CancelToken
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, served_engine
from tests.policies import PolicyMaker, private_table

MIN_MS = 4000  # every private answer is delivered 4 s after its statement arrived


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    """quick: a plain table; slowish: 40 rows of 30 ms each (1.2 s, below MIN_MS); slower: 200
    rows (6 s, past MIN_MS)."""
    dsn = make_db("canceltiming")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE quick (u integer NOT NULL, x numeric)")
        conn.execute("INSERT INTO quick SELECT u, u % 7 FROM generate_series(1, 10) u")
        conn.execute("CREATE TABLE t200 AS SELECT u, (u % 7)::numeric AS x "
                     "FROM generate_series(1, 200) u")  # fmt: skip
        conn.execute(  # volatile: run for each row read
            "CREATE FUNCTION slowly(v numeric) RETURNS numeric VOLATILE LANGUAGE sql "
            "AS 'SELECT pg_sleep(0.03); SELECT v'"
        )
        conn.execute("CREATE VIEW slower AS SELECT u, slowly(x) AS x FROM t200")
        conn.execute("CREATE VIEW slowish AS SELECT u, slowly(x) AS x FROM t200 WHERE u <= 40")
    return dsn


@pytest.fixture(scope="module")
def served(dsn: str, make_policy: PolicyMaker) -> Iterator[tuple[Any, Ledger, str]]:
    columns = {"x": {"type": "numeric", "bounds": [0, 10], "clamp": "bounds"}}
    table = private_table("u", columns, rows=1, groups=1)
    policy = make_policy(
        "canceltiming",
        tables={f"public.{t}": table for t in ("quick", "slowish", "slower")},
        public_tables=[],
        timing={"min_ms": MIN_MS},
    ).policy
    led = Ledger.open(dsn, policy, schema=f"dpsql_ct{uuid.uuid4().hex[:8]}")
    try:
        with served_engine(policy, dsn, ledger=led) as srv:
            yield srv, led, dsn
    finally:
        led.close()


def _cancelled_at(
    port: int, sql: str, then: Callable[[psycopg.Connection[Any]], None], wait: float
) -> str:
    """Run ``sql`` on a fresh connection and call ``then`` on it ``wait`` s later: the
    statement's outcome, 'answered' or its SQLSTATE."""
    with psycopg.connect(analyst_dsn(port), autocommit=True) as conn:
        timer = threading.Timer(wait, then, (conn,))
        timer.start()
        try:
            conn.execute(sql).fetchall()
            return "answered"
        except psycopg.Error as e:
            return e.sqlstate or "?"
        finally:
            timer.cancel()
            timer.join()


def test_a_cancel_tells_nothing_the_padding_hides(served: tuple[Any, Ledger, str]) -> None:
    """A cancel sent while a statement runs takes effect at its delivery moment, never before:
    its outcome says only whether the work had ended by then, which the delivery moment shows
    anyway. Three statements, each cancelled once the slowish one is seen reading its rows
    (pg_sleep: before its work can have ended): quick (no sleep), slowish (1.2 s) and slower (6
    s, past MIN_MS = 4 s). Read from the server's own record, the ledger (each release's
    ``settled_at`` and SQLSTATE, PostgreSQL's clock, the client's too): every statement is
    answered, or cancelled (57014) no earlier than MIN_MS after it was sent; the client's outcome
    is the ledger's. slower, whose work cannot end before its moment, is cancelled there.
    Before review22's defence, and in its broken twin (the cancel applied at once), slowish was
    cancelled at once, 57014 well before its moment, while quick was answered. Only lower bounds
    on time: load can make a statement miss its moment (then it is cancelled there, as its
    delivery would have shown), never make a cancel come early."""
    srv, led, dsn = served
    tables = {"quick": "quick", "slowish": "slowish WHERE x > -1", "slower": "slower"}
    texts = {t: f"SELECT SUM(x) FROM {src}" for t, src in tables.items()}
    outcome: dict[str, str] = {}
    took: dict[str, float] = {}
    sent: dict[str, float] = {}
    running = threading.Event()

    def cancel_when_running(c: psycopg.Connection[Any]) -> None:
        running.wait(60)
        c.cancel_safe()

    def run(table: str) -> None:
        sent[table], t0 = time.time(), time.monotonic()
        outcome[table] = _cancelled_at(srv.port, texts[table], cancel_when_running, 0)
        took[table] = time.monotonic() - t0

    threads = [threading.Thread(target=run, args=(t,)) for t in texts]
    for th in threads:
        th.start()
    try:
        _when_running(dsn, "slowish")
    finally:
        running.set()
    for th in threads:
        th.join(120)
    settled = _settled(led, texts)
    for t in texts:
        state, at = settled[t]
        assert outcome[t] == state, (t, outcome, settled)  # the client got what was recorded
        if state == "57014":  # cut at its delivery moment, never before (a lower bound)
            assert at >= sent[t] + MIN_MS / 1000, (t, round(at - sent[t], 3), outcome)
            assert took[t] >= MIN_MS / 1000, (t, took)
    assert outcome["slower"] == "57014", outcome  # (6 s of pg_sleep: past its moment)


def _settled(led: Ledger, texts: dict[str, str]) -> dict[str, tuple[str, float]]:
    """Per statement, its release's outcome as the ledger settled it ('answered' or the
    SQLSTATE) and when (epoch seconds, PostgreSQL's clock_timestamp)."""
    with led.connection() as conn:
        rows = conn.execute(
            led.q(
                "SELECT r.statement, f.sqlstate, extract(epoch FROM r.settled_at)::float8"
                " FROM {s}.release AS r LEFT JOIN {s}.release_failure AS f"
                " ON f.release_id = r.id WHERE r.state = 'committed'"
            )
        ).fetchall()
    by_text = {text: (failed or "answered", float(at)) for text, failed, at in rows}
    return {t: by_text[sql] for t, sql in texts.items()}


def test_a_client_gone_mid_statement_leaves_no_trace_of_its_run_time(
    served: tuple[Any, Ledger, str],
) -> None:
    """A client that hangs up while a statement of 1.2 s runs (below MIN_MS): its release is
    answered and stored as if it had stayed (before: cancelled at once, 'canceled or timed out'
    in dpsql.history, while a quick statement's hang-up left 'answered')."""
    srv, led, dsn = served

    def hang_up(conn: psycopg.Connection[Any]) -> None:
        _when_running(dsn)
        sock = socket.socket(fileno=conn.pgconn.socket)  # the client's own socket: cut it
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()

    sql = "SELECT SUM(x) FROM slowish"
    outcome = _cancelled_at(srv.port, sql, hang_up, 0)
    assert outcome != "answered"  # (the client is gone)
    deadline = time.monotonic() + 60  # the statement ends without the client: wait for it
    while time.monotonic() < deadline:
        done = [h for h in led.history("analyst") if h.statement == sql and h.state != "reserved"]
        if done:
            break
        time.sleep(0.1)
    assert [h.outcome for h in done] == ["answered"], done


def _when_running(dsn: str, view: str = "") -> None:
    """Once the private query over a sleeping view (``view``, or any) reads its rows (pg_sleep
    in slowly())."""
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE state = 'active' "
                "AND application_name = 'dpsql' AND wait_event = 'PgSleep' AND query LIKE %s",
                (f"%{view}%",),
            ).fetchone():
                return
            time.sleep(0.02)
    raise AssertionError("the private query never ran")


QUANTUM_MS = 1000


def test_a_statement_waiting_for_an_identical_one_goes_on_at_its_delivery_moment(
    dsn: str, make_policy: PolicyMaker
) -> None:
    """With ``timing: {quantum_ms: 1000}`` a statement of 1.2 s is delivered at 2 s: its padding
    shows 'between 1 and 2 s'. The same analyst's identical statements sent while it ran wait
    for its release and answer from it (free repeats), each padded on its own grid, from its
    own arrival: their wait ended when the first statement's work ended, so a few of them at
    staggered moments read that moment to a fraction of the quantum. Now a waiter goes on at
    the first statement's delivery moment, never before it. Engine level (the session's
    padding comes after): the first statement's arrival is the anchor its token carries, as
    the wire session sets it; each waiter's execute returns no earlier than 2 s after it (its
    work, 1.2 s of pg_sleep, ends after its arrival: the first grid moment after that is at
    2 s; a lower bound that load cannot break). Before: returned at the end of the first's
    work, about 1.3 s."""
    columns = {"x": {"type": "numeric", "bounds": [0, 10], "clamp": "bounds"}}
    policy = make_policy(
        "waitertiming",
        tables={"public.slowish": private_table("u", columns, rows=1, groups=1)},
        public_tables=[],
        timing={"quantum_ms": QUANTUM_MS},
    ).policy
    led = Ledger.open(dsn, policy, schema=f"dpsql_wt{uuid.uuid4().hex[:8]}")
    engine = Engine(policy, dsn, led, pool_size=4)
    sql = "SELECT SUM(x) FROM slowish WHERE x >= 0"
    returned: dict[int, float] = {}
    try:
        # the checks before the charge (types, catalog) once, at another epsilon (another key)
        engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))

        def run(i: int, token: CancelToken) -> None:
            session = SessionContext("analyst", Fraction(1, 2))
            engine.execute(engine.prepare(sql, "analyst"), session, (), token)
            returned[i] = time.monotonic()

        first = CancelToken()
        first.pad_start_ns = time.monotonic_ns()
        anchor = first.pad_start_ns / 1e9
        threads = [threading.Thread(target=run, args=(0, first))]
        threads[0].start()
        _when_running(dsn)  # the first statement reads its rows
        for i in (1, 2, 3):  # staggered by a third of the quantum
            token = CancelToken()
            token.pad_start_ns = time.monotonic_ns()
            threads.append(threading.Thread(target=run, args=(i, token)))
            threads[-1].start()
            time.sleep(QUANTUM_MS / 3000)
        for th in threads:
            th.join(120)
    finally:
        engine.close()
        led.close()
    assert sorted(returned) == [0, 1, 2, 3], returned
    boundary = anchor + 2 * QUANTUM_MS / 1000  # the first's delivery moment
    early = {i: round(boundary - t, 3) for i, t in returned.items() if i and t < boundary}
    assert not early, early  # (seconds before the first statement's delivery moment)


def test_a_waiter_on_another_worker_goes_on_at_the_holders_delivery_moment(
    dsn: str, make_policy: PolicyMaker
) -> None:
    """The same with ``dpsql serve --workers 2`` (review23): the identical statement in flight
    is on another worker process (execute.in_flight.SharedSlots), and a waiter there ended its
    wait when the holder's work ended (it saw the shared entry free), not at the holder's
    delivery moment: padded on its own grid, started when the analyst chose, it read that
    moment finer than the quantum. Now the holder leaves its delivery moment in the shared entry
    and the waiter goes on then. Wire level, real server: the holder's 1.2 s statement was sent
    at ``sent`` (client clock, before it arrived), so it is delivered at ``sent + 2 s`` or later;
    the waiter, sent at ``sent + 0.8 s`` on the other worker, must not answer before that (a
    lower bound that load cannot break). Before: it answered at ``sent + 1.8 s``, 0.2 s early
    (its own grid's first moment after the holder's work ended)."""
    from tests.helpers import db_name, start_serve

    columns = {"x": {"type": "numeric", "bounds": [0, 10], "clamp": "bounds"}}
    pf = make_policy(
        "waiterworkers",
        tables={"public.slowish": private_table("u", columns, rows=1, groups=1)},
        public_tables=[],
        timing={"quantum_ms": QUANTUM_MS},
    )
    proc, port = start_serve(["--policy", str(pf.path), "--upstream", dsn, "--workers", "2"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    sql = "SELECT SUM(x) FROM slowish WHERE x >= 1"
    conns: list[psycopg.Connection[Any]] = []
    returned: dict[int, float] = {}
    try:
        dsn_a = analyst_dsn(port).replace("dbname=demo", f"dbname={db_name(dsn)}")
        deadline = time.monotonic() + 60  # (a guard: the kernel picks the worker)
        while time.monotonic() < deadline:  # one session per worker, the others closed
            c = psycopg.connect(dsn_a, autocommit=True)
            if c.info.backend_pid % 2 in {d.info.backend_pid % 2 for d in conns}:
                c.close()  # (not held: sessions per analyst are limited across the workers)
                continue
            conns.append(c)
            if len(conns) == 2:
                break
        pair = [next(c for c in conns if c.info.backend_pid % 2 == w) for w in (0, 1)]

        def run(i: int) -> None:
            pair[i].execute(sql).fetchall()
            returned[i] = time.monotonic()

        sent = time.monotonic()
        threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        threads[0].start()
        _when_running(dsn)  # the holder reads its rows
        time.sleep(max(0.0, sent + 0.8 - time.monotonic()))
        threads[1].start()
        for th in threads:
            th.join(120)
        rows = pair[0].execute("SELECT statement, state FROM dpsql.history").fetchall()
        states = sorted(state for text, state in rows if text == sql)
    finally:
        for c in conns:
            c.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert sorted(returned) == [0, 1], returned
    assert states == ["committed", "repeat"], states  # (the waiter answered from the holder's)
    boundary = sent + 2 * QUANTUM_MS / 1000  # the holder's delivery moment or before
    assert returned[1] >= boundary, (round(returned[0] - sent, 3), round(returned[1] - sent, 3))

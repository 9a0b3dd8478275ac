"""``dpsql serve --workers 2``: two processes on one port (SO_REUSEPORT) sharing the ledger.

Many clients at once never overspend a budget, the session limits and failed-login limits are
global across the workers, both workers take connections, and SIGTERM to the parent shuts everything down gracefully.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.wire import messages as m
from dpsql.wire.auth import make_verifier
from tests.helpers import db_name, start_serve
from tests.policies import PolicyMaker, private_table
from tests.wire_support import RawClient

BUDGET, EPSILON, CLIENTS = 2.0, 0.25, 24


@pytest.fixture(scope="module")
def setup(make_db: Callable[[str], str], make_policy: PolicyMaker) -> tuple[str, Path]:
    upstream = make_db("wire_workers")
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid int, v int); INSERT INTO t SELECT g, g % 50 FROM "
                     "generate_series(1, 2000) g")  # fmt: skip
    table = private_table(
        "uid", {"v": {"type": "integer", "bounds": [0, 50]}}, rows=None, groups=None
    )
    pf = make_policy(
        "workers",
        base={"version": 1},
        tables={"t": table},
        analysts={"zoe": {"credential": make_verifier("pw"), "budget": {"epsilon": BUDGET}}},
    )
    return upstream, pf.path


class Served:
    def __init__(self, upstream: str, policy: Path, *extra: str) -> None:
        self.upstream = upstream
        self.log = tempfile.TemporaryFile("w+")
        self.proc, self.port = start_serve(
            ["--policy", str(policy), "--upstream", upstream, "--workers", "2",
             "--shutdown-grace", "5", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while self.logs().count("listening on") < 2:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.logs()
            time.sleep(0.1)
        self.dsn = (
            f"host=127.0.0.1 port={self.port} user=zoe password=pw dbname={db_name(upstream)}"
        )

    def logs(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(40)


def _wait_running(upstream: str, text: str, n: int, done: list[Any]) -> None:
    """Until n statements containing ``text`` run upstream (or one has ended): fixed sleeps let a
    loaded machine stop or cancel before the queries had been sent."""
    deadline = time.monotonic() + 20
    with psycopg.connect(upstream, autocommit=True) as conn:
        while not done and time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query ILIKE %s "
                "AND pid <> pg_backend_pid()",
                (f"%{text}%",),
            ).fetchone()
            if row and row[0] >= n:
                return
            time.sleep(0.01)


@pytest.fixture
def served(setup: tuple[str, Path], request: pytest.FixtureRequest) -> Iterator[Served]:
    s = Served(*setup, *getattr(request, "param", ()))
    yield s
    s.stop()
    s.log.close()


@pytest.mark.parametrize("served", [("--max-sessions-per-analyst", "40")], indirect=True)
def test_many_clients_never_overspend(served: Served) -> None:
    conns = [psycopg.connect(served.dsn, autocommit=True) for _ in range(CLIENTS)]
    outcomes: list[str] = []
    start = threading.Barrier(CLIENTS)

    def ask(i: int, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SET dpsql.epsilon = {EPSILON}")
        start.wait()
        try:  # distinct statements: none is a free repeat of another
            conn.execute(f"SELECT COUNT(*) FROM t WHERE v >= {i}").fetchall()
            outcomes.append("ok")
        except pe.Error as e:
            outcomes.append(e.sqlstate or "?")

    threads = [threading.Thread(target=ask, args=(i, c)) for i, c in enumerate(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with conns[0].cursor() as cur:
        spent = cur.execute("SELECT * FROM dpsql.budget").fetchall()
    for c in conns:
        c.close()
    assert sorted(set(outcomes)) == ["53400", "ok"], outcomes
    assert outcomes.count("ok") == int(BUDGET / EPSILON)
    assert spent, "dpsql.budget answered nothing"
    workers = set(re.findall(r"session opened analyst=zoe .* worker=(\d)", served.logs()))
    assert workers == {"0", "1"}  # P(all 24+ sessions on one worker) < 1e-6 with fair hashing


@pytest.mark.parametrize("served", [("--max-sessions-per-analyst", "3")], indirect=True)
def test_session_limit_is_global(served: Served) -> None:
    opened, refused = [], 0
    for _ in range(12):
        try:
            opened.append(psycopg.connect(served.dsn, autocommit=True))
        except psycopg.OperationalError as e:
            assert "too many connections" in str(e)
            refused += 1
    assert len(opened) == 3 and refused == 9
    opened.pop().close()
    # a freed slot is usable again, on any worker: once the server has counted the session out
    # (a fixed 0.3 s sleep raced the close on a loaded machine); a leak fails at the deadline
    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(served.dsn).close()
            break
        except psycopg.OperationalError as e:
            assert "too many connections" in str(e) and time.monotonic() < deadline, e
            time.sleep(0.1)
    for c in opened:
        c.close()


def test_sigterm_shuts_all_workers_down_gracefully(served: Served) -> None:
    pids = [int(p) for p in re.findall(r"worker \d started pid=(\d+)", served.logs())]
    assert len(pids) == 2
    busy = psycopg.connect(served.dsn, autocommit=True)
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(
        busy.execute("SELECT count(*), 7 FROM generate_series(1, 3000000)").fetchone()))  # fmt: skip
    t.start()
    _wait_running(served.upstream, "3000000", 1, result)
    assert served.stop() == 0
    t.join(10)
    assert result and result[0][1] == 7  # the running statement finished within the grace
    busy.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert "all workers stopped" in served.logs()


def test_cancel_requests_reach_the_sessions_worker(served: Served) -> None:
    """A CancelRequest is a new connection the kernel may give to the other worker: it is relayed.
    With 8 sessions, all 8 cancels landing on their own worker by chance has probability 1/256;
    every one must work."""
    conns = [psycopg.connect(served.dsn, autocommit=True) for _ in range(8)]
    outcomes: list[str] = []

    def run(conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute("SELECT count(*) FROM generate_series(1, 1999999999)")
            outcomes.append("finished")
        except pe.QueryCanceled:
            outcomes.append("cancelled")

    threads = [threading.Thread(target=run, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    _wait_running(served.upstream, "1999999999", 8, outcomes)
    for c in conns:
        c.cancel_safe()
    for t in threads:
        t.join(60)  # a deadline: uncancelled, each would run for minutes
    assert outcomes == ["cancelled"] * 8
    for c in conns:
        assert c.execute("SELECT 1").fetchone() == (1,)
        c.close()


def test_failed_login_limit_is_global(served: Served) -> None:
    """The 5 failures an analyst may have per window (AuthConfig.max_failures) count across the
    workers: once spent, every further login is refused, whichever worker the kernel picks.
    With per-worker counts, all 8 later attempts reaching a worker that already had 5 failures
    has probability about 2**-8 (2**-12 with all first 5 failures on one worker)."""
    wrong = served.dsn.replace("password=pw", "password=wrong")
    for _ in range(5):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(wrong, connect_timeout=10)
    for dsn in [wrong] * 4 + [served.dsn] * 4:  # the right password too
        with pytest.raises(psycopg.OperationalError, match="too many failed login attempts"):
            psycopg.connect(dsn, connect_timeout=10)
    assert served.logs().count("login refused: rate limited analyst=zoe") == 8


def _salt(port: int, user: str) -> str:
    client = RawClient(port)
    try:
        client.send(m.StartupMessage(parameters={"user": user, "database": "x"}))
        assert isinstance(client.recv(), m.AuthenticationSASL)
        client.send(m.SASLInitialResponse("SCRAM-SHA-256", b"n,,n=,r=abcdefghijklmnop"))
        cont = client.recv()
        assert isinstance(cont, m.AuthenticationSASLContinue), cont
        return dict(kv.split("=", 1) for kv in cont.data.decode().split(","))["s"]
    finally:
        client.close()


def test_an_unknown_users_salt_is_the_same_on_every_worker(served: Served) -> None:
    """An unknown analyst gets a made-up verifier whose salt must be stable, as a real one's is:
    a salt that changed with the worker would tell that the analyst does not exist. 12 logins
    all reaching one worker has probability 2**-11."""
    assert len({_salt(served.port, "nobody") for _ in range(12)}) == 1
    assert len({_salt(served.port, "zoe") for _ in range(2)}) == 1

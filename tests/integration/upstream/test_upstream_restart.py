"""An upstream restart (issue #20, D3): `pg_ctl restart` of the PostgreSQL holding the data and
the ledger, with clients connected to dpsql throughout.

Before: every dead pooled connection failed one client statement (public ones with XX000 and
libpq's text), the ledger's pool slept its way through its dead connections for 30 s and failed
with 58000, and private queries worked again only ~31 s after the restart. Now a statement that
meets a dead pooled connection is retried once on a fresh one (reads only), the other dead ones
are swept at once, and what fails is a 57P01 / 08xxx error the client can retry. The cluster is
this test's own (the session's is shared with other tests).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.demo import POLICY, load_demo
from dpsql.engine import Engine
from dpsql.execute.embedded import Cluster, start_cluster
from dpsql.policy import load_policy
from dpsql.server.run import ServerThread
from dpsql.wire.server import ServerConfig
from tests.helpers import analyst_dsn

PUBLIC = "SELECT code FROM regions WHERE code = 'N'"
PRIVATE = "SELECT count(*) FROM purchases"  # repeats are free: the same answer from the ledger
PRIVATE_NEW = "SELECT count(*) FROM purchases WHERE quantity > {k}"  # new ones are charged
RETRYABLE = ("57P01", "57P02", "57P03", "08000", "08003", "08006")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = start_cluster()
    try:
        with psycopg.connect(c.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE demo")
        load_demo(c.dsn("demo"))
        yield c
    finally:
        c.stop()


def _restart(c: Cluster) -> None:
    _pg_ctl(c, "restart")


def _pg_ctl(c: Cluster, action: str) -> None:
    log = str(c.datadir.parent / "server.log")  # else the server keeps our output pipes open
    args = ["-D", str(c.datadir), "-l", log, "-m", "fast", "-w", "-t", "60", action]
    res = c._run([str(c.bindir / "pg_ctl"), *args])
    assert res.returncode == 0, res.stderr


def _run(conn: psycopg.Connection[Any], sql: str) -> str | None:
    """None when answered, else the SQLSTATE."""
    try:
        conn.execute(sql).fetchall()
    except psycopg.Error as e:
        return e.sqlstate or "no sqlstate"
    return None


def test_restart_costs_each_client_at_most_one_statement(cluster: Cluster) -> None:
    policy = load_policy(POLICY)
    ledger = Ledger.open(cluster.dsn("demo"), policy)
    engine = Engine(policy, cluster.dsn("demo"), ledger, pool_size=4)
    srv = ServerThread(engine, policy, ServerConfig(port=0, shutdown_grace_s=1)).start()
    try:
        clients = [psycopg.connect(analyst_dsn(srv.port), autocommit=True) for _ in range(6)]
        for i, c in enumerate(clients):  # every pool holds connections now
            assert _run(c, PUBLIC) is None
            assert _run(c, PRIVATE if i % 2 else PRIVATE_NEW.format(k=i)) is None
        _restart(cluster)
        failures: dict[int, list[str]] = {i: [] for i in range(len(clients))}
        for rnd in range(3):
            for i, c in enumerate(clients):
                for sql in (PUBLIC, PRIVATE, PRIVATE_NEW.format(k=100 + 10 * rnd + i)):
                    code = _run(c, sql)
                    if code is not None:
                        failures[i].append(code)
        for i, codes in failures.items():
            assert len(codes) <= 1, (i, codes)
            assert all(code in RETRYABLE for code in codes), (i, codes)
        # private queries answered right away after the restart (deadline: generous)
        deadline = time.monotonic() + 60
        while _run(clients[0], PRIVATE_NEW.format(k=999)) is not None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        for c in clients:
            c.close()
    finally:
        srv.stop()
        engine.close()
        ledger.close()


def test_upstream_down_is_a_retryable_error_not_xx000(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the upstream is stopped, statements fail with a connection-class SQLSTATE and no
    libpq text; once it is back they are answered again. Here a statement waits 1 s, not 10,
    for a pooled connection of the data's pool (CONNECT_TIMEOUT_S): with the server stopped
    none comes, and the private statement waited for one twice (20 s of the test's 30 s); the
    failure is the same PoolTimeout -> 08006 either way."""
    monkeypatch.setattr("dpsql.execute.backend.CONNECT_TIMEOUT_S", 1.0)
    policy = load_policy(POLICY)
    ledger = Ledger.open(cluster.dsn("demo"), policy)
    engine = Engine(policy, cluster.dsn("demo"), ledger, pool_size=2)
    srv = ServerThread(engine, policy, ServerConfig(port=0, shutdown_grace_s=1)).start()
    try:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            assert _run(conn, PUBLIC) is None
            _pg_ctl(cluster, "stop")
            try:
                for sql in (PUBLIC, PRIVATE_NEW.format(k=5000)):
                    with pytest.raises(psycopg.Error) as e:
                        conn.execute(sql)
                    assert e.value.sqlstate in RETRYABLE, (sql, e.value.sqlstate, str(e.value))
                    assert "libpq" not in str(e.value) and "127.0.0.1" not in str(e.value)
            finally:
                started = start_cluster(cluster.datadir.parent, cluster.port)
                assert started.port == cluster.port
            deadline = time.monotonic() + 60
            while _run(conn, PRIVATE_NEW.format(k=5001)) is not None:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert _run(conn, PUBLIC) is None
    finally:
        srv.stop()
        engine.close()
        ledger.close()

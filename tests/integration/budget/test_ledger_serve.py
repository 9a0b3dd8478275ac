"""kill -9 of a real ``dpsql serve`` in the middle of queries: every answer a client got is accounted.

Clients query the demo data through ``python -m dpsql serve`` (a separate OS process, ledger in its
own database). The server is killed with SIGKILL while queries are in flight, then restarted on the
same ledger. Each answer a client received must come back as a free, identical repeat (so it was
confirmed and stored before it was sent), and the re-asking must not change what was spent.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers import db_name, start_serve
from tests.integration.budget.ledger_support import release_sums
from tests.policies import PolicyMaker

USER = PASSWORD = "analyst"  # the demo policy's analyst
EPSILON = Fraction(1, 10)


@pytest.fixture(scope="module")
def fixed(make_policy: PolicyMaker) -> Path:
    """The demo policy with its former fixed contribution bounds (one release per statement; auto
    bounds are charged as releases of their own: test_auto_bounds)."""
    return make_policy("ledger-serve", fixed_bounds=True).path


@contextmanager
def serve(fixed: Path, upstream: str, ledger: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Start ``dpsql serve`` on the policy file ``fixed``; yields (process, client DSN)."""
    proc, port = start_serve(
        ["--policy", str(fixed), "--upstream", upstream, "--ledger", ledger],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield (
            proc,
            f"host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname={db_name(upstream)}",
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _query(k: int) -> str:
    return f"SELECT COUNT(*) AS n FROM purchases WHERE amount > {k}"


def _client(dsn: str, ids: range, got: dict[int, Any], stop: threading.Event) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"SET dpsql.epsilon = {float(EPSILON)}")
            for k in ids:
                if stop.is_set():
                    return
                row = conn.execute(_query(k)).fetchone()
                got[k] = row[0] if row else None
    except psycopg.OperationalError:
        return  # the server was killed under us


def _spent(ledger: str) -> Fraction:
    return release_sums(ledger).get(USER, None).epsilon  # type: ignore[union-attr]


def test_kill_9_serve_every_received_answer_is_accounted(
    demo_dsn: str, make_db: Callable[[str], str], fixed: Path
) -> None:
    ledger = make_db("serve_ledger")
    got: dict[int, Any] = {}
    stop = threading.Event()
    with serve(fixed, demo_dsn, ledger) as (proc, dsn):
        threads = [
            threading.Thread(target=_client, args=(dsn, range(t * 1000, t * 1000 + 200), got, stop))
            for t in range(6)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while len(got) < 40 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        stop.set()
        for t in threads:
            t.join(timeout=60)
    received = dict(got)
    assert len(received) >= 40, "the clients did not get enough answers before the kill"
    spent = _spent(ledger)
    assert spent >= len(received) * EPSILON  # every answer given out was charged

    with serve(fixed, demo_dsn, ledger) as (_, dsn), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET dpsql.epsilon = {float(EPSILON)}")
        for k, value in received.items():
            row = conn.execute(_query(k)).fetchone()
            assert row is not None and row[0] == value, k  # the stored answer, identical
    assert _spent(ledger) == spent  # ... and free


def test_show_and_select_budget_through_psql_protocol(
    demo_dsn: str, make_db: Callable[[str], str], fixed: Path
) -> None:
    ledger = make_db("serve_ledger")
    with serve(fixed, demo_dsn, ledger) as (_, dsn), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.5")
        conn.execute(_query(1)).fetchone()
        (text,) = conn.execute("SHOW dpsql.budget").fetchone()  # type: ignore[misc]
        assert text.startswith('analyst "analyst": epsilon 99.5 of 100')
        cur = conn.execute("SELECT name, epsilon_spent FROM dpsql.budget ORDER BY name")
        assert cur.fetchall() == [("analyst", Fraction(1, 2)), ("demo", Fraction(1, 2))]
        [(cached, eps)] = conn.execute("SELECT cached, epsilon FROM dpsql.history").fetchall()
        assert cached is False and eps == Fraction(1, 2)
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM dpsql.answer")

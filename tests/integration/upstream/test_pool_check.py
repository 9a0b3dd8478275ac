"""The ledger pool's check on checkout (dpsql.upstream.faults.sweeping_check) costs no round trip.

A pooled connection with nothing on its socket is used as it is (no ping: the ledger's free-repeat
lookup is one round trip, not two); one whose server went away (``pg_terminate_backend``, a
restart: PostgreSQL sends its FATAL and closes the socket) is seen by the check, which then pings
it, fails it (so the pool replaces it) and sweeps the other idle ones. The restart itself, with
clients through the server, is tests/integration/upstream/test_upstream_restart.py; the ledger's
next call after its connections were killed, tests/integration/budget/test_ledger.py.

Each check is shown to catch its broken twin: a check that always pings (the round trip is
seen in ``pg_stat_activity``) and one that never looks (the dead connection is handed out).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from dpsql.upstream.faults import quiet, sweeping_check

Check = Callable[[psycopg.Connection[Any]], None]


def _last_query(admin: psycopg.Connection[Any], pid: int) -> str:
    row = admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    assert row is not None
    return str(row[0])


def check_quiet_is_free(dsn: str, check: Check) -> list[str]:
    """A healthy idle connection passes the check, and the server saw no statement from it."""
    with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT 'marker'")
        check(c)
        last = _last_query(admin, c.info.backend_pid)
        return [] if last == "SELECT 'marker'" else [f"the check sent {last!r}"]


def check_dead_is_caught(dsn: str, check: Check) -> list[str]:
    """A connection whose backend was terminated fails the check (within a deadline for the
    server's close to reach the socket: the check looks, it does not wait)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        c = psycopg.connect(dsn, autocommit=True)
        try:
            admin.execute("SELECT pg_terminate_backend(%s)", [c.info.backend_pid])
            deadline = time.monotonic() + 30
            while quiet(c) and time.monotonic() < deadline:  # the FATAL and EOF are on their way
                time.sleep(0.01)
            try:
                check(c)
            except psycopg.Error:
                return []
            return ["a terminated connection passed the check"]
        finally:
            c.close()


def _always_ping(conn: psycopg.Connection[Any]) -> None:
    conn.execute("")


def _never_look(conn: psycopg.Connection[Any]) -> None:
    return None


@pytest.fixture
def check() -> Check:
    return sweeping_check(lambda: None)


def test_a_quiet_connection_is_checked_without_a_round_trip(demo_dsn: str, check: Check) -> None:
    assert check_quiet_is_free(demo_dsn, check) == []
    assert check_quiet_is_free(demo_dsn, _always_ping) != []


def test_a_terminated_connection_fails_the_check(demo_dsn: str, check: Check) -> None:
    assert check_dead_is_caught(demo_dsn, check) == []
    assert check_dead_is_caught(demo_dsn, _never_look) != []

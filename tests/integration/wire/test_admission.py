"""Admission counts authenticated sessions (issue #20, D4).

Before: a burst of 500 concurrent connects against --max-sessions 200 admitted 48, 0, 68, 200, 0
sessions: the check counted every open connection, so connections still authenticating pushed
the others out. Now the session limit is checked and counted atomically once a login succeeds;
logins in progress are bounded separately (up to as many again).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from dpsql.wire.server import ServerConfig
from tests.helpers import analyst_dsn

LIMIT, BURST = 200, 500


async def _burst(dsn: str) -> tuple[int, list[str]]:
    """Open BURST connections at once; keep the admitted ones until every attempt is over."""
    gate = asyncio.Event()
    refused: list[str] = []
    admitted: list[psycopg.AsyncConnection[Any]] = []

    async def one() -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=120)
        except psycopg.OperationalError as e:
            refused.append(str(e))
            return
        admitted.append(conn)
        await gate.wait()
        await conn.close()

    tasks = [asyncio.create_task(one()) for _ in range(BURST)]
    deadline = asyncio.get_running_loop().time() + 240
    while len(admitted) + len(refused) < BURST:
        assert asyncio.get_running_loop().time() < deadline, (len(admitted), len(refused))
        await asyncio.sleep(0.05)
    n = len(admitted)
    gate.set()
    await asyncio.gather(*tasks)
    return n, refused


def test_burst_admits_exactly_the_limit(demo_dsn: str, demo_policy: Any) -> None:
    engine = Engine(demo_policy, demo_dsn, pool_size=2)
    config = ServerConfig(port=0, max_sessions=LIMIT, max_sessions_per_analyst=BURST)
    srv = ServerThread(engine, demo_policy, config).start()
    try:
        for _ in range(2):
            admitted, refused = asyncio.run(_burst(analyst_dsn(srv.port)))
            assert admitted == LIMIT, (admitted, refused[:3])
            assert len(refused) == BURST - LIMIT
            assert all("too many clients" in r for r in refused), set(refused)
            # every admitted session is counted out as it closes: before the next burst too
            # (the server counts a client's close out after the client has moved on: the second
            # burst raced the first one's closes on a loaded machine)
            deadline = time.monotonic() + 30
            while srv.server.limits.sessions():
                assert time.monotonic() < deadline, srv.server.limits.sessions()
                time.sleep(0.05)
    finally:
        srv.stop()
        engine.close()

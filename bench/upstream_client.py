"""What the fast path's own upstream client saves per statement over psycopg 3's (not part of pytest).

The public fast path (:mod:`dpsql.wire.fastpath`) runs each public statement on the event loop
through :class:`dpsql.wire.upstream.AsyncUpstream`: a free-list pool of connections driven with
libpq's asynchronous API (psycopg's ``pq`` layer) from one socket reader registered for each
connection's life, with PostgreSQL's bytes passed through. This measures one statement (the
public prepared lookup of ``bench/proxy_latency.py``, executed server-side prepared, its text
bytes fetched) four ways, in one process, one after the other, against the same PostgreSQL:

* ``AsyncUpstream``: what the fast path runs;
* ``psycopg AsyncConnection``: ``await conn.execute(sql, params, prepare=True)`` and
  ``fetchall()`` (values loaded into Python objects, as psycopg does);
* ``psycopg raw``: psycopg's own generators on its connection (``conn.wait(fetch_many)``) with
  the bytes kept as they are, no pool: psycopg's I/O without the fast path's reader;
* ``psycopg_pool raw``: the same through ``psycopg_pool.AsyncConnectionPool`` (``getconn`` /
  ``putconn``);
* ``psycopg_pool + AsyncRawCursor``: nothing hand-driven, what replacing the fast path's client
  with psycopg would run: ``async with pool.connection()``, ``AsyncRawCursor.execute(sql, params,
  prepare=True)`` (``$n`` placeholders, as the fast path sends them) and the bytes read from its
  ``pgresult`` (passed through, not loaded).

CPU microseconds per statement of this process (``time.process_time``) are the number to
compare: unlike wall time they hardly depend on what else the machine runs. Each variant runs
``--rounds`` times; the table shows the median of the rounds.

Usage: ``python bench/upstream_client.py [--dsn DSN] [--n 5000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
from psycopg import generators

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpsql.wire.upstream import AsyncUpstream  # noqa: E402

SQL = "SELECT name FROM regions WHERE code = $1"
NAME = b"bench_lookup"


async def _per_statement(fn: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    for _ in range(50):
        await fn()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6


def _raw_rows(res: list[Any]) -> list[tuple[bytes | None, ...]]:
    r = res[-1]
    return [(r.get_value(i, 0),) for i in range(r.ntuples)]


async def _round(dsn: str, n: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    up = AsyncUpstream(dsn, statement_timeout_ms=5000, max_size=2, local_socket=False)
    await up.open()
    out["AsyncUpstream (the fast path)"] = await _per_statement(
        lambda: up.run(SQL, (b"N",), (0,), fmt=0), n
    )
    await up.close()

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)

    async def high_level() -> Any:
        return await (await conn.execute(SQL.replace("$1", "%s"), ("N",), prepare=True)).fetchall()

    out["psycopg AsyncConnection"] = await _per_statement(high_level, n)
    pg = conn.pgconn
    pg.prepare(NAME, SQL.encode(), None)

    async def raw() -> Any:
        pg.send_query_prepared(NAME, [b"N"], result_format=0)
        return _raw_rows(await conn.wait(generators.fetch_many(pg)))

    out["psycopg raw (its generators)"] = await _per_statement(raw, n)
    await conn.close()

    async def configure(c: psycopg.AsyncConnection[Any]) -> None:
        c.pgconn.prepare(NAME, SQL.encode(), None)

    pool = psycopg_pool.AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, configure=configure, open=False
    )
    await pool.open(wait=True)

    async def pooled() -> Any:
        c = await pool.getconn()
        try:
            p = c.pgconn
            p.send_query_prepared(NAME, [b"N"], result_format=0)
            return _raw_rows(await c.wait(generators.fetch_many(p)))
        finally:
            await pool.putconn(c)

    out["psycopg_pool raw"] = await _per_statement(pooled, n)
    await pool.close()

    pool = psycopg_pool.AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)

    async def psycopg_only() -> Any:
        async with pool.connection() as c:
            cur = psycopg.AsyncRawCursor(c)
            await cur.execute(SQL, ("N",), prepare=True)
            assert cur.pgresult is not None
            return _raw_rows([cur.pgresult])

    out["psycopg_pool + AsyncRawCursor"] = await _per_statement(psycopg_only, n)
    await pool.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", help="PostgreSQL to use (default: a throwaway embedded cluster)")
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from dpsql.demo import load_demo

    cluster = None
    dsn = a.dsn
    if dsn is None:
        from dpsql.execute.embedded import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn()
    try:
        load_demo(dsn)
        rounds = [asyncio.run(_round(dsn, a.n)) for _ in range(a.rounds)]
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"n={a.n} per variant, {a.rounds} rounds (medians)\n")
    print("| client | wall us/statement | CPU us/statement | CPU vs the fast path |")
    print("|---|---|---|---|")
    base = statistics.median(r["AsyncUpstream (the fast path)"][1] for r in rounds)
    for name in rounds[0]:
        wall = statistics.median(r[name][0] for r in rounds)
        cpu = statistics.median(r[name][1] for r in rounds)
        print(f"| {name} | {wall:.0f} | {cpu:.0f} | {cpu / base:.2f}x |")


if __name__ == "__main__":
    main()

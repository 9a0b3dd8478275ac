"""dpsql's own reads (the upstream's identity at start-up) are not an analyst's statement: they
run under dpsql's own timeout, not the policy's ``statement_timeout_ms``. Real PostgreSQL.

(A server started with a 1 ms statement timeout once failed to start on a loaded machine: its
identity read, ``SELECT current_database() ...``, took longer than 1 ms and was cancelled.)
"""

from __future__ import annotations

import psycopg
import pytest

from dpsql.errors import QueryCanceled
from dpsql.execute.backend import Backend
from dpsql.wire.upstream_identity import _QUERY

SLOW = "SELECT pg_sleep(0.05), current_database()::text"  # 50 ms: far above the 1 ms timeout


def test_own_reads_outlast_the_statement_timeout(demo_dsn: str) -> None:
    backend = Backend(demo_dsn, statement_timeout_ms=1, max_size=2)
    try:
        with pytest.raises(QueryCanceled):  # an analyst's statement: cancelled at 1 ms
            backend.run(SLOW, private=False)
        assert (
            backend.run_own(SLOW).rows[0][1]
            == psycopg.conninfo.conninfo_to_dict(demo_dsn)["dbname"]
        )
        assert len(backend.run_own(_QUERY).rows[0]) == 3
        # the timeout is still the policy's afterwards, on the same pooled connection
        with pytest.raises(QueryCanceled):
            backend.run(SLOW, private=False)
    finally:
        backend.close()


def test_a_timeout_between_a_query_and_its_then_says_timeout(demo_dsn: str) -> None:
    """A private query and its catalog re-read go as one two-statement message
    (``Backend.run(then=...)``); PostgreSQL ends the statement timeout between the two and
    resets its indicator, so a timeout firing as the query ends is taken in the re-read and
    said 'canceling statement due to user request' though nobody cancelled (lead 3ae6f26's
    'other cancel': test_padding_wire saw it for one database, not the other). dpsql sent no
    cancel: 57014 with the timeout's words, whatever the query's run time. Queries of rising
    cost cross the 1 ms timeout; before, 'user request' came back in about 1 of 20 (27 of 600
    here under load) and in some of these 300 unless none ended near the timeout."""
    backend = Backend(demo_dsn, statement_timeout_ms=1, max_size=1)
    seen: set[str] = set()
    try:
        for i in range(300):
            sql = f"SELECT count(*) FROM generate_series(1, {200 * (i % 100)})"
            try:
                backend.run(sql, private=True, then="SELECT 1")
            except QueryCanceled as e:
                seen.add(e.message)
    finally:
        backend.close()
    assert seen == {"canceling statement due to statement timeout"}, seen

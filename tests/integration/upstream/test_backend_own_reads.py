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

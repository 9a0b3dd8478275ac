"""The client's ``statement_timeout`` through psycopg (dpsql.wire.timeouts): a public query is
cancelled at the shorter of it and the policy's (57014, PostgreSQL's words); a private query
keeps the policy's and says so once in a NOTICE; SHOW prints what the client set."""

from __future__ import annotations

import psycopg
import pytest

from tests.compat.conftest import Server

# a public query of a few seconds (10^8 rows counted), cancelled long before its end
SLOW_PUBLIC = "SELECT count(*) FROM generate_series(1, 10000) a, generate_series(1, 10000) b"
PRIVATE = "SELECT COUNT(*) FROM pums"
NOT_APPLIED = "statement_timeout = 5s is not applied to private queries"


def test_public_query_is_cancelled_at_the_clients_timeout(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 50")
        assert conn.execute("SHOW statement_timeout").fetchone() == ("50ms",)
        with pytest.raises(psycopg.Error) as info:
            conn.execute(SLOW_PUBLIC)
        assert info.value.sqlstate == "57014"
        assert info.value.diag.message_primary == "canceling statement due to statement timeout"
        assert conn.execute("SELECT count(*) FROM regions").fetchone() == (5,)  # session fine
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SET statement_timeout = '5x'")
        assert info.value.sqlstate == "22023"
        assert info.value.diag.message_primary == (
            'invalid value for parameter "statement_timeout": "5x"'
        )


def test_private_query_keeps_the_policys_timeout_and_says_so(dpsql_server: Server) -> None:
    with psycopg.connect(dpsql_server.dsn, autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("SET statement_timeout = '5s'")
        assert conn.execute("SHOW statement_timeout").fetchone() == ("5s",)
        assert conn.execute(PRIVATE).fetchone() is not None
        said = [n for n in notices if n.startswith(NOT_APPLIED)]
        assert len(said) == 1 and "data owner's statement timeout (30s)" in said[0], notices
        conn.execute(PRIVATE)
        assert len([n for n in notices if n.startswith(NOT_APPLIED)]) == 1  # once per value
        conn.execute("SET statement_timeout = 0")
        notices.clear()
        conn.execute(PRIVATE)
        assert not [n for n in notices if "statement_timeout" in n]

"""The upstream must read string literals exactly as dpsql's parser does.

Found by the red team: dpsql parses SQL with standard strings (a backslash is an ordinary
character, ``'a\\''`` is the three characters ``a\\'``), but did not pin the upstream's
``standard_conforming_strings``. On a database with ``ALTER DATABASE ... SET
standard_conforming_strings = off`` (or a role's setting), PostgreSQL reads ``\\'`` as an escaped
quote, so in ``SELECT code FROM regions WHERE code = 'a\\'' UNION ALL SELECT email FROM purchases
--'`` the "string" ended early and the raw e-mail addresses came back through the public path.
Every upstream connection (the engine's pool and the wire's fast path) now sets it ``on``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, demo_db_with_defaults, served_engine

INJECTION = r"SELECT code FROM regions WHERE code = 'a\'' UNION ALL SELECT email FROM purchases --'"
# (region: keys_from, so the statement runs upstream whatever its literal: a literal no declared
# key of category equals would answer free without running, dpsql.sql.group_domain.no_row_left)
PRIVATE = r"SELECT COUNT(*) FROM purchases WHERE region = 'a\'' OR true --'"


@pytest.fixture(scope="module")
def off_dsn(make_demo_db: Callable[[str], str]) -> str:
    """A demo database whose connections default to standard_conforming_strings = off."""
    return demo_db_with_defaults(make_demo_db, "rtscs", {"standard_conforming_strings": "off"})


@pytest.fixture(scope="module")
def engine(off_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, off_dsn, pool_size=1)
    yield e
    e.close()


def test_public_statement_reads_the_literal_as_parsed(engine: Engine) -> None:
    rows = engine.execute(engine.prepare(INJECTION), SessionContext(analyst="analyst")).rows
    assert rows == []  # no region is coded a\' ; never the e-mail addresses


def test_private_statement_reads_the_literal_as_parsed(engine: Engine) -> None:
    r = engine.execute(engine.prepare(PRIVATE), SessionContext(analyst="analyst"))
    assert len(r.rows) == 1 and r.epsilon_spent > 0


@pytest.mark.parametrize("prepare", [False, True])
def test_wire_reads_the_literal_as_parsed(off_dsn: str, demo_policy: Any, prepare: bool) -> None:
    """Through a client, simple protocol and prepared (the fast path's own connections)."""
    with (
        served_engine(demo_policy, off_dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        for _ in range(3):  # the fast path prepares upstream from the second run on
            rows = conn.execute(INJECTION, prepare=prepare).fetchall()
            assert not any("@" in str(r[0]) for r in rows), rows[:3]
            assert rows == []


# A client that is told standard_conforming_strings = off writes a backslash in a string as two
# (libpq's PQescapeStringConn, psycopg's client-side literals): dpsql, which reads every string as
# standard, would then compare with another value (WHERE region = 'n\\s' matches no row: a count
# of 0 where PostgreSQL, at off, reads n\s). So the session never takes off.
OFF = ["SET standard_conforming_strings = off", "SET standard_conforming_strings TO false"]


@pytest.mark.parametrize("sql", OFF)
def test_the_session_refuses_standard_conforming_strings_off(
    demo_dsn: str, demo_policy: Any, sql: str
) -> None:
    with (
        served_engine(demo_policy, demo_dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            conn.execute(sql)
        assert "backslash" in str(e.value) and e.value.diag.message_hint
        assert conn.info.parameter_status("standard_conforming_strings") == "on"
        assert conn.execute("SHOW standard_conforming_strings").fetchone() == ("on",)
        literal = psycopg.sql.Literal("n\\s").as_string(conn)
        assert literal in ("'n\\s'", " E'n\\\\s'")  # one backslash, as dpsql reads it
        conn.execute("SET standard_conforming_strings = on")  # the session goes on
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_connection_asking_for_off_is_refused(demo_dsn: str, demo_policy: Any) -> None:
    with served_engine(demo_policy, demo_dsn) as srv:
        dsn = analyst_dsn(srv.port) + " options='-c standard_conforming_strings=off'"
        with pytest.raises(psycopg.OperationalError, match="standard_conforming_strings"):
            psycopg.connect(dsn)

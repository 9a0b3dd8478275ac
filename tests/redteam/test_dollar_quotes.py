"""Dollar-quoted strings ($$...$$, $tag$...$tag$) with hostile bodies and tags: answered as the
string PostgreSQL reads, or refused; nothing else ever runs upstream.

dpsql answers ``WHERE region = $$north$$`` since bi26 (dbt and migration tools send them): a
private query's SQL is written from sqlglot's tree, the constant as a standard ``'...'`` literal
(quotes doubled; backslashes ordinary, every upstream connection sets standard_conforming_strings
= on: test_string_settings.py). What could go wrong is a body or tag read otherwise than
PostgreSQL reads it. Found here: sqlglot takes any text between two ``$`` for a tag
(``$a-b$x$a-b$`` answered 'x' where PostgreSQL says 42601) and no tag with a character Python
calls a space while PostgreSQL's lexer takes every non-ASCII byte for a letter: with a
no-break space in the tag, ``SELECT $Q$, '$Q$ AS code FROM regions UNION ALL SELECT email FROM
purchases --' FROM regions`` read as a public statement on regions to sqlglot, and ran as written
PostgreSQL returned every e-mail address. Both now refused (dpsql.sql.dollar_quotes).

Checked upstream: a body hiding ``SELECT pg_advisory_lock(...)`` would leave the lock held by
dpsql's upstream connection, seen in pg_locks from another connection; and the private SQL sent
(recorded at the backend) differs from that of a plain ``'zz'`` only by the constant PostgreSQL
reads, as a standard literal.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, served_engine

LOCK = 740226  # the advisory lock a hidden statement would take
NBSP = "a\u00a0b"  # a tag PostgreSQL reads (non-ASCII: a letter), with a Python space

# body or tag -> what PostgreSQL reads (None: PostgreSQL refuses the statement)
HOSTILE: list[tuple[str, str | None]] = [
    (f"$t$x'; SELECT pg_advisory_lock({LOCK}); --$t$", f"x'; SELECT pg_advisory_lock({LOCK}); --"),
    (f"$$'); SELECT pg_advisory_lock({LOCK}); --$$", f"'); SELECT pg_advisory_lock({LOCK}); --"),
    ("$a$x$A$y$a$", "x$A$y"),  # tags are case-sensitive
    ("$a$ $b$ x $b$ $a$", " $b$ x $b$ "),  # nested tags are text
    ("$$a$b$$", "a$b"),  # a $ inside
    ("$ab$x$a$y$ab$", "x$a$y"),
    ("$a$E'x\\'$a$", "E'x\\'"),  # E'' inside: no escapes in a dollar quote
    ("$$a\\$$", "a\\"),  # a trailing backslash stays a backslash
    ("$$it''s$$", "it''s"),
    ("$é$x$é$", "x"),  # a non-ASCII tag
    ("$_1$x$_1$", "x"),
    ("$$ /* $$", " /* "),
    ("$$--$$", "--"),
    ("$a-b$x$a-b$", None),  # not a tag for PostgreSQL: 42601
    ("$'$x$'$", None),
    ("$1a$x$1a$", None),
    ("$a$x", None),  # unterminated
    ("$$x'$", None),
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, pool_size=1)
    yield e
    e.close()


@pytest.fixture(scope="module")
def plain(engine: Engine) -> set[str]:
    """The private SQL of ``region = 'zz'``, run first on the engine (its type probe too)."""
    return set(_private_sql(engine, "SELECT COUNT(*) FROM purchases WHERE region = 'zz'"))


def _postgres_reads(dsn: str, constant: str) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            got = conn.execute(f"SELECT {constant}").fetchone()
        except psycopg.errors.SyntaxError:
            return None
    assert got is not None
    return str(got[0])


def _locks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s", (LOCK,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _private_sql(engine: Engine, sql: str) -> list[str]:
    sent: list[str] = []
    run = engine.backend.run

    def record(query: str, params: Any = None, **kw: Any) -> Any:
        if kw.get("private"):
            sent.append(query)
        return run(query, params, **kw)

    engine.backend.run = record  # type: ignore[method-assign]
    try:
        engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    finally:
        engine.backend.run = run  # type: ignore[method-assign]
    return sent


@pytest.mark.parametrize(("constant", "reads"), HOSTILE)
def test_hostile_dollar_quotes_read_as_postgresql_or_refused(
    engine: Engine, plain: set[str], demo_dsn: str, constant: str, reads: str | None
) -> None:
    assert _postgres_reads(demo_dsn, constant) == reads  # the table above is PostgreSQL's
    sql = f"SELECT COUNT(*) FROM purchases WHERE region = {constant}"
    if reads is None:
        with pytest.raises(DpsqlError) as e:
            engine.prepare(sql)
        assert e.value.sqlstate == "42601" and e.value.hint
        return
    sent = _private_sql(engine, sql)
    literal = "'" + reads.replace("'", "''") + "'"
    assert sent
    for got in sent:
        assert literal in got
        assert got.replace(literal, "'zz'") in plain  # the constant differs, nothing else
    assert _locks(demo_dsn) == 0  # nothing hidden ran upstream


@pytest.mark.parametrize("prepare", [False, True])
def test_a_tag_python_reads_as_a_space_is_refused_on_the_wire(
    demo_dsn: str, demo_policy: Any, prepare: bool
) -> None:
    """The e-mail addresses came back through the public path before (see the module's doc)."""
    leak = (
        f"SELECT ${NBSP}$, '${NBSP}$ AS code FROM regions UNION ALL "
        "SELECT email FROM purchases --' FROM regions"
    )
    with psycopg.connect(demo_dsn, autocommit=True) as conn:  # what PostgreSQL reads in it
        assert any("@" in str(r[0]) for r in conn.execute(leak).fetchall())
    with (
        served_engine(demo_policy, demo_dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            conn.execute(leak, prepare=prepare)
        assert e.value.diag.message_hint and "standard string" in e.value.diag.message_hint
        got = conn.execute("SELECT COUNT(*) FROM purchases WHERE region = $r$north$r$")
        assert got.fetchone() is not None  # the session goes on, an ASCII tag answered

"""A wrong number of parameter values gets PostgreSQL's SQLSTATE and message through dpsql.

Each case runs through psycopg against the real PostgreSQL of the test session and against
``dpsql serve`` (in-process, real engine) on the same demo data; clients branch on the code, so
the codes and messages must be the same. dpsql adds a hint where PostgreSQL has none.

* ``$n`` in a simple query (no values): 42P02 "there is no parameter $n", the first placeholder
  of the statement (also under EXPLAIN, private and public).
* a Bind with too few or too many values: 08P01 "bind message supplies ...".
* a Parse that declares more parameter types than the statement uses: PostgreSQL accepts the
  extra values (and ignores them); so does dpsql.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import pq

from dpsql.errors import ProtocolViolation, UndefinedParameter
from dpsql.sql.bind import check_params
from dpsql.sql.parse import parse_statement
from tests.helpers import analyst_dsn, served_engine

USER = PASSWORD = "analyst"
PRIVATE = b"SELECT count(*) FROM pums WHERE age > $1"
PUBLIC = b"SELECT name FROM regions WHERE code = $1"
INT4, TEXT = 23, 25


@pytest.fixture(scope="module")
def dsns(demo_dsn: str, demo_policy: Any) -> Iterator[tuple[str, str]]:
    """(PostgreSQL, dpsql) DSNs on the same data."""
    with served_engine(demo_policy, demo_dsn) as srv:
        yield demo_dsn, analyst_dsn(srv.port, USER, PASSWORD)


Run = Callable[[psycopg.Connection[Any]], pq.abc.PGresult]

SIMPLE: dict[str, Run] = {
    "EXPLAIN private": lambda c: c.pgconn.exec_(b"EXPLAIN " + PRIVATE),
    "EXPLAIN public": lambda c: c.pgconn.exec_(b"EXPLAIN " + PUBLIC),
    "private": lambda c: c.pgconn.exec_(PRIVATE),
    "public, $2 first": lambda c: c.pgconn.exec_(PUBLIC.replace(b"$1", b"$2 OR code = $1")),
    "after a good statement": lambda c: c.pgconn.exec_(b"SELECT 1; " + PUBLIC),
}
BIND: dict[str, Run] = {
    "too few, public": lambda c: c.pgconn.exec_params(PUBLIC + b" OR code = $2", [b"N"]),
    "too many, public": lambda c: c.pgconn.exec_params(PUBLIC, [b"N", b"S"]),
    "none, private": lambda c: c.pgconn.exec_params(PRIVATE, []),
    "too many, private": lambda c: c.pgconn.exec_params(PRIVATE, [b"30", b"40"]),
    "too few, EXPLAIN": lambda c: c.pgconn.exec_params(b"EXPLAIN " + PRIVATE, []),
    "too few, named": lambda c: _named(c, PUBLIC, []),
}
EXTRA_TYPES: dict[str, Run] = {
    "public": lambda c: c.pgconn.exec_params(PUBLIC, [b"N", b"7"], [TEXT, INT4]),
    "private": lambda c: c.pgconn.exec_params(PRIVATE, [b"30", b"7"], [INT4, INT4]),
    "EXPLAIN": lambda c: c.pgconn.exec_params(b"EXPLAIN " + PRIVATE, [b"30", b"7"], [INT4, INT4]),
    "no placeholder": lambda c: c.pgconn.exec_params(b"SELECT 1", [b"7"], [INT4]),
}


def _named(c: psycopg.Connection[Any], sql: bytes, values: list[bytes | None]) -> pq.abc.PGresult:
    c.pgconn.prepare(b"s1", sql)
    return c.pgconn.exec_prepared(b"s1", values)


def _answer(dsn: str, run: Run) -> tuple[str | None, str | None, str | None]:
    """(SQLSTATE, message, hint) of the statement's result on a fresh connection."""
    with psycopg.connect(dsn, autocommit=True) as c:
        r = run(c)
        assert r.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.TUPLES_OK), r.status
        f = pq.DiagnosticField
        return tuple(  # type: ignore[return-value]
            (v.decode() if v is not None else None)
            for v in (r.error_field(f.SQLSTATE), r.error_field(f.MESSAGE_PRIMARY),
                      r.error_field(f.MESSAGE_HINT))
        )  # fmt: skip


@pytest.mark.parametrize("case", SIMPLE)
def test_placeholder_in_a_simple_query_is_42P02(dsns: tuple[str, str], case: str) -> None:
    pg, dp = (_answer(d, SIMPLE[case]) for d in dsns)
    assert pg[0] == "42P02" and pg[1] is not None and pg[1].startswith("there is no parameter $")
    assert dp[:2] == pg[:2]
    assert dp[2] is not None and "bind one value per $n" in dp[2]


@pytest.mark.parametrize("case", BIND)
def test_bind_with_the_wrong_number_of_values_is_08P01(dsns: tuple[str, str], case: str) -> None:
    pg, dp = (_answer(d, BIND[case]) for d in dsns)
    assert pg[0] == "08P01" and pg[1] is not None and pg[1].startswith("bind message supplies")
    assert dp[:2] == pg[:2]


@pytest.mark.parametrize("case", EXTRA_TYPES)
def test_declared_but_unused_parameters_are_accepted(dsns: tuple[str, str], case: str) -> None:
    pg, dp = (_answer(d, EXTRA_TYPES[case]) for d in dsns)
    assert pg == dp == (None, None, None)


def test_psycopg_high_level_simple_query(dsns: tuple[str, str]) -> None:
    """What an application sees: psycopg's exception class for 42P02 (no values: simple query)."""
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as c:
            with pytest.raises(psycopg.errors.UndefinedParameter, match=r"no parameter \$1"):
                c.execute(PRIVATE.decode())
            assert c.execute("SELECT 1").fetchone() == (1,)  # the session goes on


def test_engine_api_counts() -> None:
    """The engine (dpsql query, in-process callers) answers with the same codes."""
    tree = parse_statement("SELECT a FROM t WHERE a = $2 OR a = $1").tree
    check_params(tree, 2, 2)
    with pytest.raises(UndefinedParameter, match=r"there is no parameter \$2") as e:
        check_params(tree, 2, 0)
    assert e.value.sqlstate == "42P02" and e.value.hint
    for given in (1, 3):
        with pytest.raises(ProtocolViolation) as p:
            check_params(tree, 2, given)
        assert p.value.sqlstate == "08P01" and f"{given} parameter values" in p.value.message

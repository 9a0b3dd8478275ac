"""The database owner's side of a differential test: dpsql's answer beside PostgreSQL's own to
the same text.

A test makes its database as the owner would (:func:`as_owner`, :func:`owner_db`: the
statements that create and fill its tables), serves it through an engine, and reads the same
SQL both ways: :func:`dpsql_rows` as the analyst, the owner's connection (or
:func:`owner_rows` on the engine's upstream) for PostgreSQL's answer. :func:`exact_private`
is the usual setting of such a test: one private table ``priv`` of one row per person (R = 1,
one group each) and zero noise, so dpsql's answer is exact wherever it keeps every row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg

from dpsql.engine import Engine
from dpsql.policy.model import Policy
from dpsql.server.startup_checks import Problem, upstream_problems
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

# a statement, or a statement and its parameters
Statement = str | tuple[str, tuple[Any, ...]]


def as_owner(dsn: str, *statements: Statement) -> str:
    """Run ``statements`` on ``dsn`` as its owner, in order (autocommit); ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in statements:
            if isinstance(s, str):
                conn.execute(s)
            else:
                conn.execute(s[0], s[1])
    return dsn


def owner_db(make_db: Callable[[str], str], name: str, *statements: Statement) -> str:
    """A fresh database (``make_db(name)``) made by ``statements``: its DSN."""
    return as_owner(make_db(name), *statements)


@contextmanager
def exact_private(
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    name: str,
    columns: Mapping[str, Any],
    *statements: Statement,
) -> Iterator[tuple[Engine, Any]]:
    """An engine over the private table ``priv`` (privacy unit ``u``, ``columns`` declared as
    given, one row and one group per person, zero noise) of a fresh database made by
    ``statements``, and the owner's connection to that database (autocommit)."""
    dsn = owner_db(make_db, name, *statements)
    table = private_table("u", columns, rows=1, groups=1)
    pf = make_policy(name, tables={"public.priv": table}, public_tables=[])
    engine = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            yield engine, conn
    finally:
        engine.close()


def declared_problems(
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    name: str,
    create: str,
    columns: Mapping[str, Any],
) -> tuple[Policy, str, list[Problem]]:
    """A fresh database ``name`` made by ``create`` (its table ``t``, privacy unit ``u``), a
    policy declaring ``public.t`` private with ``columns`` (no public table), and what
    ``dpsql serve`` says of ``public.t``'s columns before listening (its upstream problems, in
    the order of their text)."""
    dsn = owner_db(make_db, name, create)
    pf = make_policy(name, tables={"public.t": private_table("u", columns)}, public_tables=[])
    problems = [p for p in upstream_problems(pf.policy, dsn) if "public.t." in p.text]
    return pf.policy, dsn, sorted(problems, key=lambda p: p.text)


def dpsql_rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    """dpsql's answer to ``sql``, as the analyst ``analyst`` gets it."""
    result = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst"))
    return [tuple(r) for r in result.rows]


def owner_rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    """PostgreSQL's answer to ``sql`` as written, run by the owner on the engine's upstream
    connection (values read as dpsql reads a public statement's)."""
    return [tuple(r) for r in engine.backend.run(sql, private=False).rows]

"""Numeric literals at and past PostgreSQL's numeric range are answered or refused as
PostgreSQL answers or refuses them (was: ``amount > 1e1000000`` gave XX000 "internal error in
dpsql", a decimal.Overflow in the literal check). PostgreSQL itself is the oracle: each
statement also runs directly on the upstream database. Real engine and PostgreSQL, demo data;
deterministic (which statements are refused and with which SQLSTATE).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext

# literal -> dpsql's SQLSTATE where it differs from PostgreSQL's (22023: a literal PostgreSQL
# holds, beyond what a private query allows)
LITERALS = {
    "1e1000000": None,
    "-1e1000000": None,
    "1e131072": None,
    "1e131071": "22023",
    "1e1001": "22023",
    "1e1000": None,
    "1e-16383": None,
    "1e-16384": None,
    "1.5e-16383": None,
    "1e-1000000": None,
    "'1e400'::float8": None,
}


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, None, pool_size=2)
    yield e
    e.close()


@pytest.mark.parametrize("literal", list(LITERALS))
def test_as_postgresql(engine: Engine, demo_dsn: str, literal: str) -> None:
    sql = f"SELECT COUNT(*) FROM purchases WHERE amount > {literal}"
    with psycopg.connect(demo_dsn, autocommit=True) as conn:
        try:
            conn.execute(sql)
            pg = None
        except psycopg.Error as e:
            pg = e.sqlstate
    try:
        engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
        got = None
    except DpsqlError as e:
        got = e.sqlstate
        if pg == "22003":
            assert "overflows" in e.message or "out of range" in e.message, e
    assert got == (LITERALS[literal] or pg)

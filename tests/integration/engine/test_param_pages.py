"""Pages sent with bound parameters (``LIMIT $1 OFFSET $2``, as SQLAlchemy 2 and psycopg send
them) page over one release, as literal pages do: one charge, the same numbers on every page
(was: each page a new release, charged again, books on two pages and travel on none). A
parameter of the private part (``WHERE quantity <= $1``) still makes a different release.

Real engine, real PostgreSQL (demo data), a ledger of its own; deterministic (which statement
is charged, and that the pages are slices of one answer, whatever the noise).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

PAGED = (
    "SELECT category, COUNT(*) AS n FROM purchases WHERE quantity <= $1 "
    "GROUP BY category ORDER BY n DESC LIMIT $2 OFFSET $3"
)


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy, demo_dsn, "dpsql_pp") as e:
        yield e


def _spent(engine: Engine) -> Fraction:
    assert engine.ledger is not None
    return sum((Fraction(s.epsilon_spent) for s in engine.ledger.remaining("analyst")), Fraction())


def test_parameter_pages_share_one_release(engine: Engine) -> None:
    s = SessionContext("analyst", Fraction(1, 5))
    prepared = engine.prepare(PAGED, "analyst")
    before = _spent(engine)
    pages = [engine.execute(prepared, s, [4, 2, k]) for k in (0, 2, 4)]
    pages.append(engine.execute(prepared, s, [4, 3, 0]))  # another page size: the same release
    assert [p.cached for p in pages] == [False, True, True, True]
    charged = _spent(engine) - before
    whole = engine.execute(prepared, s, [4, 100, 0])
    assert whole.cached and _spent(engine) - before == charged > 0
    assert [r[0] for r in whole.rows] == [r[0] for p in pages[:3] for r in p.rows]
    assert pages[0].rows + pages[1].rows + pages[2].rows == whole.rows
    assert pages[3].rows == whole.rows[:3]


def test_a_parameter_of_the_private_part_is_a_new_release(engine: Engine) -> None:
    s = SessionContext("analyst", Fraction(1, 5))
    prepared = engine.prepare(PAGED, "analyst")
    first = engine.execute(prepared, s, [3, 2, 0])
    before = _spent(engine)
    other = engine.execute(prepared, s, [2, 2, 0])  # WHERE quantity <= 2: another answer
    assert not first.cached or not other.cached
    assert not other.cached and _spent(engine) > before


def test_psycopg_pages_share_one_release(demo_dsn: str, demo_policy: Any) -> None:
    """The newcomer's reproduction through the real driver (psycopg's ``%s``, sent as ``$n``)."""
    import uuid

    import psycopg

    from dpsql.budget.ledger import Ledger
    from tests.helpers import analyst_dsn, served_engine

    sql = (
        "SELECT category, COUNT(*) AS n FROM purchases WHERE quantity <= 4 "
        "GROUP BY category ORDER BY n DESC LIMIT %s OFFSET %s"
    )
    ledger = Ledger.open(demo_dsn, demo_policy, schema=f"dpsql_ppw{uuid.uuid4().hex[:8]}")
    try:
        with (
            served_engine(demo_policy, demo_dsn, ledger=ledger) as srv,
            psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
        ):
            conn.execute("SET dpsql.epsilon = 0.2")
            pages = [conn.execute(sql, (2, k)).fetchall() for k in (0, 2, 4)]
            whole = conn.execute(sql, (100, 0)).fetchall()
            spent = {Fraction(s.epsilon_spent) for s in ledger.remaining("analyst")}
    finally:
        ledger.close()
    assert pages[0] + pages[1] + pages[2] == whole
    assert len({r[0] for r in whole}) == len(whole)
    assert spent == {Fraction(1, 5)}  # every period's spend: one charge

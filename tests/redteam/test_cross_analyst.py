"""Upstream prepared statements are per pooled connection, and the pool is shared by every session:
an analyst denied a table must not reach it through a statement another analyst prepared.

The wire's fast path runs a public statement as an upstream prepared statement keyed by its
text, on whichever pooled connection is free. Checked here with real clients: analyst "open" runs
``SELECT name FROM regions WHERE code = $1`` until it is prepared upstream on the connections;
analyst "closed" (``deny: [public.regions]``) sending the same text gets the missing-table error
(42P01) every time, before anything runs, as a table it can't see behaves as one that does not
exist; with the denied table's rows never in its results.
"""

from __future__ import annotations

import psycopg
import pytest

from dpsql.wire.auth import make_verifier
from tests.helpers import analyst_dsn, served_engine
from tests.policies import build_policy

SQL = "SELECT name FROM regions WHERE code = %s"


BUDGET = {"epsilon": 10, "delta": 1.0e-6}
POLICY = build_policy(
    analysts={
        "open": {"credential": make_verifier("open"), "budget": BUDGET},
        "closed": {
            "credential": make_verifier("closed"),
            "budget": BUDGET,
            "deny": ["public.regions"],
        },
    }
)


@pytest.mark.parametrize("prepare", [True, False])
def test_denied_analyst_cannot_use_a_statement_prepared_upstream(
    demo_dsn: str, prepare: bool
) -> None:
    with served_engine(POLICY, demo_dsn) as srv:
        with psycopg.connect(analyst_dsn(srv.port, "open", "open"), autocommit=True) as a:
            for _ in range(4):
                assert a.execute(SQL, ("N",), prepare=prepare).fetchall() == [("North",)]
        with psycopg.connect(analyst_dsn(srv.port, "closed", "closed"), autocommit=True) as b:
            for _ in range(4):
                with pytest.raises(psycopg.Error) as err:
                    b.execute(SQL, ("N",), prepare=prepare).fetchall()
                assert err.value.sqlstate == "42P01"
        with psycopg.connect(analyst_dsn(srv.port, "open", "open"), autocommit=True) as a:
            assert a.execute(SQL, ("S",), prepare=prepare).fetchall() == [("South",)]

"""Round trips of one charged release through the ledger (issue 18: no slower than 5e50bd1).

Counted on the wire (libpq's trace of the ledger's one connection: each time the client sends
after it has read, a new exchange). With budgets that never renew: the reserve is BEGIN, one
lock per budget (in the locking order), one statement writing every budget's totals and the
release's log, COMMIT (no ``now()``: nothing reads the time); the commit is one statement
(settled, and the answer stored only when it settled). Before: 8 and 4.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.dp.accounting import Cost
from dpsql.errors import InternalError
from tests.integration.budget.ledger_support import policy, states, totals


@pytest.fixture
def dsn(make_db: Callable[[str], str]) -> str:
    return make_db("ledger_trips")


@pytest.fixture
def ledger(dsn: str) -> Iterator[Ledger]:
    pol = policy(dataset_budget={"epsilon": 3.0, "delta": 1e-5})
    with Ledger.open(dsn, pol, pool_size=1) as lg:
        yield lg


def _exchanges(ledger: Ledger, step: Callable[[], object]) -> int:
    fd, name = tempfile.mkstemp(prefix="dpsql-ledger-", suffix=".trace")
    try:
        with ledger.connection() as conn:  # the pool's one connection
            conn.pgconn.trace(fd)
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        step()
        with ledger.connection() as conn:
            conn.pgconn.untrace()  # (flushes the trace)
        with open(name) as f:
            sides = [line[0] for line in f if line[:2] in ("F\t", "B\t")]
    finally:
        os.unlink(name)
    return sum(1 for i, s in enumerate(sides) if s == "F" and (i == 0 or sides[i - 1] == "B"))


def test_a_release_is_five_round_trips_then_one(ledger: Ledger, dsn: str) -> None:
    cost = Cost(epsilon=Fraction(1, 4))
    ledger.commit(ledger.reserve("alice", cost, "fp"), "warm", b"{}")  # psycopg prepares
    got: list[object] = []
    assert _exchanges(ledger, lambda: got.append(ledger.reserve("alice", cost, "fp"))) == 5
    res = got[0]
    assert _exchanges(ledger, lambda: ledger.commit(res, "k", b'{"a":1}')) == 1  # type: ignore[arg-type]
    assert ledger.lookup("alice", "k") == b'{"a":1}'
    assert totals(dsn)[("analyst", "alice")].epsilon == Fraction(1, 2)
    assert totals(dsn)[("dataset", "testdata")].epsilon == Fraction(1, 2)
    assert states(dsn)["committed"] == 2
    # a reservation that is not open: refused, nothing stored
    with pytest.raises(InternalError, match="not open"):
        ledger.commit(res, "k2", b"{}")  # type: ignore[arg-type]
    assert ledger.lookup("alice", "k2") is None


def test_a_concurrent_identical_answer_is_returned(ledger: Ledger) -> None:
    """The key already holds an answer (a concurrent identical statement's): the commit
    settles, stores nothing, and returns that answer."""
    cost = Cost(epsilon=Fraction(1, 8))
    first, second = ledger.reserve("alice", cost, "fp"), ledger.reserve("alice", cost, "fp")
    assert ledger.commit(first, "same", b'{"first":1}') is None
    assert ledger.commit(second, "same", b'{"second":1}') == b'{"first":1}'

"""A stored fallback is reused by the same statement's repeat when its epsilon share changed.

acc25 (issue #16): a statement with two ``auto`` bounds splits its slice in two; when one bound
falls back (the guard: too few units) and the other is chosen, both are stored, the choice
under its own key and the fallback under its share (slice / 2). The repeat finds the choice
stored, so only the fallback is missing: it looked for it at slice / 1, missed it, and was
charged again for a choice already released. Now each share a previous run of this statement
could have used (slice / k, k from the bounds missing now up to that plus those stored) is
tried; a stored release is reused only at the exact share it was released at.

Data: ``t``, 3,000 units with 3 rows each. Deterministic (a zero-noise engine).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.result import Result
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import build_policy, private_table

POLICY = build_policy(
    base={},
    version=1,
    dataset="fbshare",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    analysts={"analyst": {"budget": {"epsilon": 100, "delta": 1e-3}}},
    tables={
        "public.t": private_table(
            "uid", {"n": {"type": "integer", "bounds": [0, 10000]}}, rows=None, groups=None
        )
    },
)
SESSION = SessionContext(analyst="analyst", epsilon=Fraction(1), mechanism="laplace")


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("fbshare")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT u AS uid, u AS n "
            "FROM generate_series(1, 3000) u, generate_series(1, 3) r"
        )
    return dsn


@pytest.fixture
def engine(dsn: str) -> Iterator[tuple[Engine, Ledger]]:
    p = POLICY
    ledger = Ledger.open(dsn, p, schema=f"dpsql_fs{uuid.uuid4().hex[:8]}")
    e = Engine(p, dsn, ledger, pool_size=1, noise=EXACT)
    yield e, ledger
    e.close()
    ledger.close()


def ask(engine: Engine, sql: str) -> Result:
    return engine.execute(engine.prepare(sql, "analyst"), SESSION)


def test_a_fallback_stored_beside_a_choice_is_reused(engine: tuple[Engine, Ledger]) -> None:
    """Property: 650 units choose n's clamp (625) at half the slice but not R (the guard: too
    few units for its grid): both are stored. A statement over the same slice at the same
    epsilon (its answer not stored: another statement's, as a cancelled one's retry) is
    charged nothing for its bounds (no new ``auto_bound`` in dpsql.history: its answer alone,
    the whole epsilon 1) and answers with the same stored bounds (R = 1, n at most 625, reused
    free: the same exact sum, the fallback's column: the kept answer plus what it left out). Fails before the change (the fallback was looked up at
    slice / 1: R chosen again, 0.2 more charged)."""
    e, led = engine
    first = ask(e, "SELECT SUM(n) FROM t WHERE n <= 650")
    bounds = first.notices[0]
    assert bounds.startswith("contribution bounds: 1 row per uid, n clamped to at most 625 ("), (
        bounds
    )
    assert "rows per uid: too few uid values" in bounds, bounds
    charged = [(h.mechanism, h.epsilon) for h in led.history("analyst")]
    assert sorted(charged) == [("auto_bound", Fraction(1, 10))] * 2 + [("laplace", Fraction(4, 5))]
    again = ask(e, "SELECT SUM(n), COUNT(*) FROM t WHERE n <= 650")
    after = [(h.mechanism, h.epsilon) for h in led.history("analyst")]
    assert after == [("laplace", 1), *charged], after  # nothing chosen again
    # at the fixed-default fallback the columns add the estimate of what the bounds left out
    # (fallback26): the exact truths at zero noise, 3 x (1 + ... + 650) (the mass the clamp cut
    # off included: measured from the declared range) and 3 rows of each of 650 units
    assert again.rows[0][0] == first.rows[0][0] == 634725, (again.rows, first.rows)
    assert again.rows[0][1] == 1950, again.rows
    head = "contribution bounds: 1 row per uid, n clamped to at most 625 (reused free); rows per uid: too few"
    assert again.notices[0].startswith(head), again.notices

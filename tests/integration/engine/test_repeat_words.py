"""A free repeat says what its release was told (newcomer23 #4).

Demo data, zero noise (deterministic choices): ``SELECT AVG(age), MEDIAN(income) FROM pums WHERE
married = 1`` chooses the rows per pid for its 549 people while the upper clamp of age falls back
to the declared range (too few units for it at its share). Asked again, the clamp's fallback is
looked up at the repeat's share (one bound missing, not two), so the statement reaches its stored
answer without its bounds, and its MEDIAN notice was rebuilt from a plan at the fixed defaults:
"they keep at most 1 row per pid" and another rank error, beside an AVG notice saying 2 rows, for a
median released at R = 2. Property: every notice of a free repeat but the repeat's own line is the
release's, word for word (failed before: the MEDIAN line differed).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

SQL = "SELECT AVG(age), MEDIAN(income) FROM pums WHERE married = 1"


@pytest.fixture
def engine(demo_dsn: str, demo_policy_auto: Any, exact_noise: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_rw") as e:
        e.noise = exact_noise
        yield e


def ask(engine: Engine, sql: str) -> Any:
    return engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))


def test_a_free_repeat_says_what_its_release_was_told(engine: Engine) -> None:
    first = ask(engine, SQL)
    again = ask(engine, SQL)
    assert again.cached and again.rows == first.rows
    told = [n for n in first.notices if not n.startswith("contribution bounds:")]
    said = [n for n in again.notices if not n.startswith("free repeat of release")]
    assert said == told, (said, told)

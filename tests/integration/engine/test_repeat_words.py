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

import re
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


def test_a_free_repeat_says_its_epsilon_was_the_answers_share(engine: Engine) -> None:
    """At SET dpsql.epsilon = 1 with bounds chosen from the data, the repeated release was the
    answer's, at 1 less the choice's slice: 'at epsilon 0.8' alone read as wrong to a user who
    had set 1 (newcomer24 #15, at 0.5 and 0.4). The repeat says the stated epsilon is the
    answer's and the bound choice was charged apart, and the two add up to the statement's."""
    first = ask(engine, SQL)
    (chose,) = [n for n in first.notices if n.startswith("contribution bounds:")]
    m = re.search(r"chosen from the data with epsilon ([\d.]+) of this statement's 1\b", chose)
    assert m, chose
    again = ask(engine, SQL)
    (line,) = [n for n in again.notices if n.startswith("free repeat of release")]
    r = re.search(
        r" at epsilon ([\d.]+) for the answer \(choosing its contribution bounds from the data "
        r"is charged apart, as releases of their own\): ",
        line,
    )
    assert r, line
    assert Fraction(r[1]) + Fraction(m[1]) == 1, (line, chose)

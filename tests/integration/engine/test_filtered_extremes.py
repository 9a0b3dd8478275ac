"""MIN, MAX and quantiles answer inside the statement's own WHERE range (newcomer23 #20).

The selection grid spans the argument's declared bounds intersected with the constant bounds the
WHERE clause's top-level conjuncts put on the argument's own column (dpsql.sql.quantile_range):
every empty bucket beyond the true extreme has the extreme's rank, so with the declared range
``MIN(purchased_at) ... WHERE purchased_at >= '2025-06-01'`` answered 2025-03-20. With the
narrowed grid no answer can leave the filter, whatever the noise: the property checked here on
the demo data, at zero noise and with noise (it holds with probability 1, so no false failure;
before the change the zero-noise answers lay outside, at the declared bound's end of the ties).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext

CASES = [
    (
        "SELECT MIN(purchased_at), MAX(purchased_at) FROM purchases "
        "WHERE purchased_at >= '2025-06-01' AND purchased_at < '2025-09-01'",
        lambda v: dt.date(2025, 6, 1) <= v <= dt.date(2025, 8, 31),
    ),
    (
        "SELECT MIN(purchased_at) FROM purchases WHERE purchased_at BETWEEN '2025-11-01' AND "
        "'2025-11-30 12:00'",
        lambda v: dt.date(2025, 11, 1) <= v <= dt.date(2025, 11, 30),
    ),
    ("SELECT MAX(amount) FROM purchases WHERE amount < 100", lambda v: 0 <= v < 100),
    ("SELECT MIN(income) FROM pums WHERE income > 100000", lambda v: 100_000 <= v <= 500_000),
    (
        "SELECT MIN(age), MAX(age), MEDIAN(age) FROM pums WHERE age > 29.5 AND age < 40",
        lambda v: 30 <= v <= 39,
    ),
]


@pytest.fixture(scope="module")
def exact_engine(demo_dsn: str, demo_policy: Any, exact_noise: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, pool_size=2, noise=exact_noise)
    yield e
    e.close()


@pytest.mark.parametrize(("sql", "inside"), CASES, ids=range(len(CASES)))
def test_zero_noise_answers_lie_inside_the_filter(
    exact_engine: Engine, sql: str, inside: Any
) -> None:
    r = exact_engine.execute(exact_engine.prepare(sql), SessionContext(analyst="analyst"))
    assert r.rows and all(v is not None and inside(v) for v in r.rows[0]), r.rows


def test_noisy_answers_lie_inside_the_filter(engine: Engine) -> None:
    s = SessionContext(analyst="analyst", epsilon=Fraction(1, 5))
    for sql, inside in CASES[:3]:
        r = engine.execute(engine.prepare(sql), s)
        assert all(v is not None and inside(v) for v in r.rows[0]), (sql, r.rows)


def test_a_range_the_grid_cannot_narrow_keeps_the_declared_grid(exact_engine: Engine) -> None:
    """OR, a range of another column, and a range outside the declared bounds: the declared grid
    (the analysis' measure spans the policy's [0, 100] as before)."""
    for where in ("age > 30 OR age < 10", "income > 30", "age BETWEEN 200 AND 300", "NOT age > 30"):
        a = exact_engine.prepare(f"SELECT MIN(age) FROM pums WHERE {where}").analysis
        (m,) = a.measures
        assert (m.lo, m.hi, m.buckets) == (0, 100, 101), where

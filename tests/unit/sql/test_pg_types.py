"""PostgreSQL's integer typing (dpsql/sql/pg_types.py) and the value range of integer quotients
and remainders (dpsql/sql/sensitivity.py): each range holds every value PostgreSQL computes over
the declared bounds (checked by enumerating them) and no value it never computes at the ends."""

from __future__ import annotations

import doctest
import itertools
from fractions import Fraction

import pytest
import sqlglot

from dpsql.policy.tables import Column
from dpsql.sql import pg_types
from dpsql.sql.sensitivity import Interval, value_range

COLS = {
    "q": Column(type="integer", bounds=[1, 10]),
    "t": Column(type="integer", bounds=[-7, 5]),
    "x": Column(type="numeric", bounds=[0, 10]),
}


def test_doctests() -> None:
    assert doctest.testmod(pg_types).failed == 0


def _trunc_div(a: int, d: int) -> int:
    q = abs(a) // abs(d)
    return q if (a >= 0) == (d > 0) else -q


def _pg_mod(a: int, d: int) -> int:
    return a - _trunc_div(a, d) * d


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("q / 3", [_trunc_div(a, 3) for a in range(1, 11)]),
        ("q / '2'", [_trunc_div(a, 2) for a in range(1, 11)]),
        ("t / 4", [_trunc_div(a, 4) for a in range(-7, 6)]),
        ("t / -3", [_trunc_div(a, -3) for a in range(-7, 6)]),
        ("COALESCE(q, 0) / 2", [_trunc_div(a, 2) for a in range(0, 11)]),
        ("LEAST(q, 3) / 2", [_trunc_div(min(a, 3), 2) for a in range(1, 11)]),
        ("t / q", [_trunc_div(a, b) for a, b in itertools.product(range(-7, 6), range(1, 11))]),
        ("q % 3", [_pg_mod(a, 3) for a in range(1, 11)]),
        ("t % 4", [_pg_mod(a, 4) for a in range(-7, 6)]),
        ("t % -20", [_pg_mod(a, -20) for a in range(-7, 6)]),
    ],
)
def test_integer_ranges_are_postgresql_values(text: str, values: list[int]) -> None:
    r = value_range(sqlglot.parse_one(text, read="postgres"), COLS)
    assert r == Interval(Fraction(min(values)), Fraction(max(values))), text


def test_exact_division_keeps_the_real_quotient() -> None:
    for text, want in (
        ("x / 4", (0, Fraction(5, 2))),
        ("q::numeric / 4", (Fraction(1, 4), Fraction(5, 2))),
    ):
        r = value_range(sqlglot.parse_one(text, read="postgres"), COLS)
        assert r is not None and (r.lo, r.hi) == want, text

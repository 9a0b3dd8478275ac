"""Bounds flow through expressions (dpsql.sql.sensitivity.value_range), from declared bounds only."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sqlglot

from dpsql.policy.tables import Column
from dpsql.sql.sensitivity import Interval, value_range

COLS = {
    "a": Column(type="numeric", bounds=(0, 500)),
    "q": Column(type="integer", bounds=(1, 10)),
    "x": Column(type="numeric"),  # no bounds
    "t": Column(type="text"),
    "z": Column(type="integer", bounds=(0, 10)),
    "n": Column(type="numeric", bounds=(0, 10)),
}


@pytest.mark.parametrize(
    ("sql", "lo", "hi"),
    [
        ("a * q - 5", -5, 4995),
        ("CASE WHEN q > 3 THEN a ELSE -1 END", -1, 500),
        ("COALESCE(q, 20)", 1, 20),
        ("LEAST(a, 100)", 0, 100),  # was the union [0, 500]
        ("GREATEST(a, 100)", 100, 500),
        ("GREATEST(LEAST(x, 100), 0)", 0, 100),  # an analyst's clamp of an unbounded number
        ("LEAST(GREATEST(x, -5), a)", -5, 500),
        ("ROUND(a / 3)", 0, 167),
        ("ROUND(a / 3, 2)", 0, Fraction(16667, 100)),
        ("FLOOR(a / 3)", 0, 166),
        ("CEIL(a / 3)", 0, 167),
        ("CAST(a / 3 AS integer)", 0, 167),
        ("(a / 4)::numeric", 0, 125),
        # by a column whose range excludes 0 (the columns are clamped into their bounds first)
        ("a / q", 0, 500),
        ("a::float / NULLIF(q, 0)", 0, 500),
        ("a / NULLIF(z, 0)", 0, 500),  # whole numbers in [0, 10] that are not 0: [1, 10]
        ("NULLIF(z, 10)", 0, 9),
        ("(a - 500) / q", -500, 0),
        ("a / (0 - q)", -500, 0),
    ],
)
def test_bounds_flow(sql: str, lo: Fraction, hi: Fraction) -> None:
    assert value_range(sqlglot.parse_one(sql, read="postgres"), COLS) == Interval(
        Fraction(lo), Fraction(hi)
    )


@pytest.mark.parametrize(
    "sql",
    [
        "x",
        "LEAST(x, 100)",  # no lower bound
        "GREATEST(LEAST(t, 100), 0)",  # text compares as text
        "COALESCE(x, 0)",
        "a / z",  # by a column whose range holds 0
        "a / (q - 5)",
        "q / a",
        "a / NULLIF(n, 0)",  # numeric: 0.001 is not 0
    ],
)
def test_unbounded_stays_unbounded(sql: str) -> None:
    assert value_range(sqlglot.parse_one(sql, read="postgres"), COLS) is None

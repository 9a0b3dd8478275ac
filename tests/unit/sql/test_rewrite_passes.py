"""Each rewrite pass against its fixture file of input/expected SQL pairs."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import sqlglot

from dpsql.policy.tables import Column
from dpsql.sql.rewrite.clamp_values import clamp_values
from dpsql.sql.rewrite.make_total import make_total

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "rewrite"


def pairs(name: str) -> list[tuple[str, str]]:
    text = "\n".join(
        line for line in (FIXTURES / name).read_text().splitlines() if not line.startswith("#")
    )
    out = []
    for block in text.strip().split("\n\n"):
        lines = [x for x in block.strip().splitlines() if x.strip()]
        out.append((lines[0], lines[1]))
    return out


def parse(sql: str) -> sqlglot.exp.Expression:
    return sqlglot.parse_one(sql, read="postgres")


@pytest.mark.parametrize(("given", "expected"), pairs("make_total.sql"))
def test_make_total(given: str, expected: str) -> None:
    assert make_total(parse(given)).sql("postgres") == expected


def test_make_total_does_not_mutate_input() -> None:
    tree = parse("a / b")
    make_total(tree)
    assert tree.sql("postgres") == "a / b"


COLS = {
    "a": Column(type="integer", bounds=(0, 10)),
    "b": Column(type="numeric", bounds=(-5, 5)),
    "c": Column(type="numeric"),
}


@pytest.mark.parametrize(("given", "expected"), pairs("clamp_values.sql"))
def test_clamp_values(given: str, expected: str) -> None:
    sql, lo, hi = (x.strip() for x in given.split("|"))
    out = clamp_values(parse(sql), COLS, Fraction(lo), Fraction(hi))
    assert out.sql("postgres") == expected


@pytest.mark.parametrize(("given", "expected"), pairs("flatten.sql"))
def test_flatten(given: str, expected: str) -> None:
    from dpsql.sql.filters_to_case import filters_to_case
    from dpsql.sql.flatten import flatten

    assert filters_to_case(flatten(parse(given))).sql("postgres") == expected

"""Parameters in an aggregate's argument (dpsql/sql/aggregate_params.py): which ``$n`` they are,
the type PostgreSQL infers for an undeclared one (the other operand's: PostgreSQL 15's
ParameterDescription of the same text, as asyncpg reads it), the typed literals written for the
values, and a refusal of the bound statement said in the statement's words."""

from __future__ import annotations

import doctest

import pytest
import sqlglot

from dpsql.errors import PrivacyViolation
from dpsql.policy.tables import Column
from dpsql.sql import aggregate_params as ap
from dpsql.sql.nodes import POSTGRES

COLS = {
    "q": Column(type="integer", bounds=[1, 10]),
    "s": Column(type="smallint", bounds=[1, 10]),
    "b": Column(type="bigint", bounds=[1, 10]),
    "r": Column(type="real", bounds=[0, 1]),
    "d": Column(type="double precision", bounds=[0, 1]),
    "a": Column(type="numeric", bounds=[0, 500]),
}


def test_doctests() -> None:
    assert doctest.testmod(ap).failed == 0


# the expression -> PostgreSQL's ParameterDescription of $1 (0: not inferred here)
OPERANDS = {
    "q / $1": 23, "$1 * a": 1700, "(q + 1) / ($1)": 23, "q::int8 / $1": 20, "s - $1": 21,
    "b % $1": 20, "r * $1": 700, "d + $1": 701, "1 / $1": 23, "q / 2.5 * $1": 1700,
    "COALESCE($1, q)": 0, "CASE WHEN q > 1 THEN $1 ELSE 0 END": 0,
}  # fmt: skip


@pytest.mark.parametrize("expr", OPERANDS)
def test_an_operand_takes_the_other_operands_type(expr: str) -> None:
    tree = sqlglot.parse_one(f"SELECT SUM({expr}) FROM t", read="postgres")
    got = ap.operand_oids(tree, ap.aggregate_params(tree), lambda c: COLS.get(c.name), 1)
    assert got == (OPERANDS[expr],)


def test_only_an_aggregates_parameters() -> None:
    tree = sqlglot.parse_one(
        "SELECT SUM(q / $2), COUNT(*) FROM t WHERE q > $1 GROUP BY q LIMIT $3", read="postgres"
    )
    assert ap.aggregate_params(tree) == {2}


@pytest.mark.parametrize(
    ("value", "oid", "sql"),
    [
        (2, 21, "CAST(2 AS SMALLINT)"),
        (-2, 23, "CAST(-2 AS INT)"),
        (2.5, 701, "CAST(2.5 AS DOUBLE PRECISION)"),
        ("3", 20, "CAST(3 AS BIGINT)"),
        ("x", 23, "'x'"),  # not a number: PostgreSQL's own input error (22P02) follows
        (2, 25, "2"),  # text: as written
        (None, 23, "NULL"),
        (True, 23, "TRUE"),
    ],
)
def test_typed_literals(value: object, oid: int, sql: str) -> None:
    assert POSTGRES.generate(ap.typed_literal(value, oid)) == sql


def test_a_refusal_says_the_parameter_and_its_value() -> None:
    refused = PrivacyViolation(
        "the range of q % CAST(3 AS smallint) can't be bounded", hint="h", position=12
    )
    got = ap.with_values(refused, {1: 3}, {1: 21})
    assert (got.sqlstate, got.message, got.detail, got.hint, got.position) == (
        "42501", "the range of q % $1 can't be bounded", "with $1 = 3", "h", None,
    )  # fmt: skip
    assert str(got) == got.message

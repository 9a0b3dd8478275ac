"""Analyzer CPU: size limits (54001) and linear-time SQL generation for large expressions.

Before the fix, generating the private SQL of a 64-term arithmetic chain took ~3 s (each nested
``ROUND(x, 100)`` made sqlglot's PostgreSQL generator type-annotate its whole subtree, and every
NUMERIC cast deep-copied its operand); a 128-term chain crashed with RecursionError (XX000).
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot

from dpsql.errors import StatementTooComplex
from dpsql.sql.analyze import analyze
from dpsql.sql.analyze_complexity import (
    MAX_ARITHMETIC_DEPTH,
    MAX_ARITHMETIC_NODES,
    MAX_STATEMENT_NODES,
)
from dpsql.sql.rewrite import private_query


def _balanced(n: int, op: str, column: str = "quantity") -> str:
    if n == 1:
        return column
    return f"({_balanced(n // 2, op, column)} {op} {_balanced(n - n // 2, op, column)})"


def _private_sql(sql: str, policy: Any) -> str:
    a = analyze(sqlglot.parse_one(sql, read="postgres"), policy)
    return private_query(a, "salt").sql("postgres")


def _refused(sql: str, policy: Any) -> StatementTooComplex:
    with pytest.raises(StatementTooComplex) as e:
        analyze(sqlglot.parse_one(sql, read="postgres"), policy)
    assert e.value.sqlstate == "54001"
    assert e.value.hint and "simpler queries" in e.value.hint
    return e.value


def test_deep_arithmetic_chain_is_refused_not_a_crash(demo_policy: Any) -> None:
    chain = " + ".join(["quantity"] * (MAX_ARITHMETIC_DEPTH + 2))
    e = _refused(f"SELECT COUNT(*) FROM purchases WHERE {chain} > 0", demo_policy)
    assert f"nested more than {MAX_ARITHMETIC_DEPTH} levels" in str(e)
    _refused(f"SELECT SUM(-({chain})) FROM purchases", demo_policy)


def test_too_many_operators_is_refused(demo_policy: Any) -> None:
    big = _balanced(MAX_ARITHMETIC_NODES + 2, "+")  # depth ~9, MAX + 1 operators
    e = _refused(f"SELECT COUNT(*) FROM purchases WHERE {big} > 0", demo_policy)
    assert f"more than {MAX_ARITHMETIC_NODES} arithmetic" in str(e)


def test_too_many_nodes_is_refused(demo_policy: Any) -> None:
    values = ",".join(f"'r{i}'" for i in range(MAX_STATEMENT_NODES))
    e = _refused(f"SELECT COUNT(*) FROM purchases WHERE region IN ({values})", demo_policy)
    assert f"more than {MAX_STATEMENT_NODES} syntax nodes" in str(e)


def _private_tree(sql: str, policy: Any) -> sqlglot.exp.Expression:
    return private_query(analyze(sqlglot.parse_one(sql, read="postgres"), policy), "salt")


def test_large_expressions_at_the_limits_generate_linearly(demo_policy: Any) -> None:
    """Work, not time: at the depth limit and at the operator limit the private SQL is generated
    (no RecursionError), its size grows linearly with the analyst's arithmetic, and no nested
    ``ROUND(x, 100)`` is left (an untyped one made sqlglot's PostgreSQL generator type-annotate each
    nested subtree: quadratic, a 64-term chain took ~3 s; operands keep their own scale now)."""
    chain = " + ".join(["quantity"] * MAX_ARITHMETIC_DEPTH)
    half = " + ".join(["quantity"] * (MAX_ARITHMETIC_DEPTH // 2))
    # numeric: an integer's product of 128 factors passes bigint's range (refused, int_overflow)
    wide = _balanced(MAX_ARITHMETIC_NODES // 2, "*", "amount")
    for sql in (
        f"SELECT SUM({chain}) FROM purchases",
        f"SELECT COUNT(*) FROM purchases WHERE {wide} > 0 AND {chain} > 0",
    ):
        text = _private_sql(sql, demo_policy)
        assert "NUMERIC_SMALLER" in text
    full = _private_tree(f"SELECT SUM({chain}) FROM purchases", demo_policy)
    part = _private_tree(f"SELECT SUM({half}) FROM purchases", demo_policy)
    size = [sum(1 for _ in t.walk()) for t in (full, part)]
    assert size[0] <= 2.2 * size[1], size
    clamps = [
        c for c in full.find_all(sqlglot.exp.Anonymous) if c.name.lower() == "numeric_smaller"
    ]
    assert len(clamps) >= MAX_ARITHMETIC_DEPTH
    rounds = [r for r in full.find_all(sqlglot.exp.Round) if r.args.get("decimals") is not None]
    assert not rounds  # operands keep their own scale (no ROUND(x, 100) since session 20)

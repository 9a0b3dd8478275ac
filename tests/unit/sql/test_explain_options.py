"""EXPLAIN's option list (dpsql.sql.explain_options): parsed and validated as PostgreSQL does,
rendered back from the whitelist only."""

from __future__ import annotations

import doctest

import pytest

import dpsql.sql.explain_options as mod
from dpsql.errors import InvalidParameter, SqlSyntaxError
from dpsql.sql.explain_options import parse_explain


def test_doctests() -> None:
    assert doctest.testmod(mod).failed == 0


@pytest.mark.parametrize(
    ("sql", "given", "statement"),
    [
        ("EXPLAIN SELECT 1", (), "SELECT 1"),
        ("explain analyze select 1", (("ANALYZE", True),), "select 1"),
        ("EXPLAIN ANALYSE VERBOSE (SELECT 1)", (("ANALYZE", True), ("VERBOSE", True)), "(SELECT 1)"),
        ("EXPLAIN verbose WITH x AS (SELECT 1) SELECT * FROM x", (("VERBOSE", True),),
         "WITH x AS (SELECT 1) SELECT * FROM x"),
        ("EXPLAIN (FORMAT json, costs off) SELECT 'a;b'", (("FORMAT", "JSON"), ("COSTS", False)),
         "SELECT 'a;b'"),
        (" /* c */ EXPLAIN ( analyze 1 , buffers on ) SELECT 1",
         (("ANALYZE", True), ("BUFFERS", True)), "SELECT 1"),
    ],
)  # fmt: skip
def test_parse(sql: str, given: tuple[object, ...], statement: str) -> None:
    ex = parse_explain(sql)
    assert ex.options.given == given
    assert ex.statement == statement
    assert sql[ex.offset :] == statement


@pytest.mark.parametrize(
    ("sql", "error", "message"),
    [
        ("EXPLAIN", SqlSyntaxError, "end of input"),
        ("EXPLAIN (analyze", SqlSyntaxError, "end of input"),
        ("EXPLAIN (analyze true false) SELECT 1", SqlSyntaxError, "false"),
        ("EXPLAIN (, analyze) SELECT 1", SqlSyntaxError, ","),
        ("EXPLAIN (costs off; DROP TABLE t) SELECT 1", SqlSyntaxError, ";"),
        ("EXPLAIN (foo) SELECT 1", SqlSyntaxError, 'unrecognized EXPLAIN option "foo"'),
        ("EXPLAIN (format csv) SELECT 1", InvalidParameter, '"format": "csv"'),
        ("EXPLAIN (analyze maybe) SELECT 1", InvalidParameter, "requires a Boolean value"),
        ("EXPLAIN (wal) SELECT 1", InvalidParameter, "WAL requires ANALYZE"),
        ("EXPLAIN (analyze off, timing) SELECT 1", InvalidParameter, "TIMING requires ANALYZE"),
        ("EXPLAIN (generic_plan, analyze) SELECT 1", InvalidParameter, "cannot be used together"),
    ],
)
def test_refused(sql: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as ei:
        parse_explain(sql)
    assert message in str(ei.value)
    assert getattr(ei.value, "hint", None) or "end of input" in message or error is SqlSyntaxError


def test_render_is_from_the_whitelist() -> None:
    opts = parse_explain("EXPLAIN (Analyze 'on', Format yaml) SELECT 1").options
    assert opts.render() == "ANALYZE TRUE, FORMAT YAML"
    assert opts.with_option("COSTS", False).render() == "ANALYZE TRUE, FORMAT YAML, COSTS FALSE"
    assert opts.with_option("ANALYZE", False).analyze is False

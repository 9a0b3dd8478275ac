"""Row-level totality of constants (the data-gated errors of tests/redteam/test_data_gated_errors.py,
checked on the rewrite's and the analyzer's output, without a database).

* make_total clamps every operand of arithmetic over a column, constant expressions included:
  only a plain number literal (at most 1e1000) is left as written;
* constant arithmetic that PostgreSQL evaluates per row (now(), extract(... FROM now())) is
  clamped too; constant arithmetic of literals is left to the planner;
* date/time arithmetic keeps its constants bounded (no interval multiplied, small day counts);
* a date column converted to a timestamp is clamped to the last date a timestamp holds.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.tables import Column
from dpsql.sql.rewrite.make_total import make_total
from dpsql.sql.temporal import check_time_arithmetic, time_constants, value_kind

COLUMNS = {
    "x": Column(type="numeric", bounds=(0, 100)),
    "q": Column(type="integer", bounds=(0, 100)),
    "d": Column(type="date"),
    "ts": Column(type="timestamp"),
}
CLAMP = "NUMERIC_SMALLER(NUMERIC_LARGER("


def _total(sql: str) -> str:
    return make_total(sqlglot.parse_one(sql, read="postgres"), COLUMNS).sql("postgres")


def _operands(sql: str) -> list[str]:
    """The two operands of the rewritten top-level arithmetic node."""
    tree = make_total(sqlglot.parse_one(sql, read="postgres"), COLUMNS)
    node = tree.this if isinstance(tree, exp.Paren) else tree
    assert isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)), node.sql()
    return [node.this.sql("postgres"), node.expression.sql("postgres")]


@pytest.mark.parametrize(
    "sql",
    [
        "x * (1e1000 * 1e1000)",
        "(1e1000 * 1e1000) * x",
        "x / (1 / (1e1000 * 1e1000))",
        "x * '1e131069'",
        "x + (1e1000 + 1e1000)",
        "x * (extract(epoch FROM now()) * 1e1000)",
        "x * CAST(1e1000 * 1e1000 AS numeric)",
    ],
)
def test_every_operand_over_a_column_is_clamped(sql: str) -> None:
    ops = _operands(sql)
    assert all(CLAMP in op for op in ops), ops


@pytest.mark.parametrize("sql", ["x * 2", "x * (-5)", "x / 1e-300", "x + 1e1000"])
def test_a_plain_number_literal_is_left_as_written(sql: str) -> None:
    ops = _operands(sql)
    assert CLAMP in ops[0] and CLAMP not in ops[1], ops


def test_unfolded_constant_arithmetic_is_clamped() -> None:
    """extract(epoch FROM now()) is stable: evaluated per row, so made total like a column."""
    out = _total("extract(epoch FROM now()) * 1e1000")
    assert out.startswith(CLAMP), out


@pytest.mark.parametrize("sql", ["(1 + 2) * 3", "7 % 2", "now() - INTERVAL '1 day'"])
def test_folded_constants_and_time_arithmetic_are_left_to_the_planner(sql: str) -> None:
    assert CLAMP not in _total(sql)


def test_the_docstring_bound_holds_for_the_clamped_extremes() -> None:
    """The largest operand is 1e1000 (clamped or literal); the smallest nonzero divisor is
    1e-100 (clamped and rounded) or 1e-16383 (a literal): every result is far from 1e131072."""
    from decimal import Context, Decimal

    ctx = Context(prec=50, Emax=200_000, Emin=-200_000)
    big, small_lit, small_op = Decimal("1e1000"), Decimal("1e-16383"), Decimal("1e-100")
    assert ctx.multiply(big, big) <= Decimal("1e2000")
    assert ctx.divide(big, small_lit) < Decimal("1e17384")
    assert ctx.divide(big, small_op) < Decimal("1e1101")
    assert ctx.add(ctx.divide(big, small_lit), ctx.divide(big, small_lit)) < Decimal("1e131072")


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("now() - INTERVAL '1 day'", "time"),
        ("current_date - DATE '2020-01-01'", "number"),
        ("now() - DATE '2020-01-01'", "time"),
        ("INTERVAL '1 day' * 3", "time"),
        ("extract(year FROM now()) * 2", "number"),
        ("'5'", None),
    ],
)
def test_value_kind(sql: str, kind: str | None) -> None:
    assert value_kind(sqlglot.parse_one(sql, read="postgres")) == kind


@pytest.mark.parametrize(
    "sql",
    [
        "now() + INTERVAL '100 years' * 3000",
        "now() + INTERVAL '100 years' / 0.0003",
        "current_date + 2147483647",
        "CAST(now() AS date) - 36526",
        "current_date + CAST(extract(epoch FROM now()) AS int)",
        "now() - '300000 years'",
    ],
)
def test_unbounded_time_arithmetic_is_refused(sql: str) -> None:
    tree = sqlglot.parse_one(sql, read="postgres")
    with pytest.raises(UnsupportedSql) as e:
        for n in tree.walk():
            if isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
                check_time_arithmetic(n)
    assert e.value.sqlstate == "0A000" and (e.value.hint or e.value.detail)


@pytest.mark.parametrize(
    "sql",
    [
        "current_date - 30",
        "current_date + 36525",
        "now() - INTERVAL '3 months' - INTERVAL '1 day'",
        "current_date - DATE '2020-01-01'",
        "x * 3",  # a column: numeric arithmetic, made total by the rewrite
    ],
)
def test_bounded_time_arithmetic_passes(sql: str) -> None:
    tree = sqlglot.parse_one(sql, read="postgres")
    for n in tree.walk():
        if isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            check_time_arithmetic(n)


def test_day_counts_count_as_interval_constants() -> None:
    tree = sqlglot.parse_one("current_date + 1 + 2 - INTERVAL '1 day'", read="postgres")
    assert time_constants(tree) == 3


@pytest.mark.parametrize(
    "sql",
    [
        "CAST(d AS timestamp)",
        "CAST(d AS timestamptz)",
        "date_trunc('month', d)",
        "to_char(d, 'YYYY')",
        # the earliest timestamp (4714-11-24 BC) truncated to its year is before the first one
        "date_trunc('month', ts)",
        "CAST(ts AS timestamptz)",
    ],
)
def test_a_date_or_time_is_moved_into_the_timestamp_range_before_a_conversion(sql: str) -> None:
    out = _total(sql)
    assert "'294276-12-29' THEN 'infinity'" in out and "'4713-11-26 BC' THEN '-infinity'" in out
    assert out.count("CASE") == 1, out


@pytest.mark.parametrize("sql", ["extract(year FROM d)", "d > now()", "CAST(d AS date)"])
def test_native_date_functions_are_left_as_written(sql: str) -> None:
    assert "294276" not in _total(sql)

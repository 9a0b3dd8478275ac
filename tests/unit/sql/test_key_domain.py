"""Key domains from the policy and the query text (dpsql.sql.key_domain), without a database.

The analysis is pure: every domain below is computed from the policy and the statement only, so
no private value can shape it (the privacy argument of dpsql/sql/key_domain.py).
"""

from __future__ import annotations

from datetime import date, datetime
from fractions import Fraction

import pytest
import sqlglot
from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.analysis import Analysis
from dpsql.sql.analyze import analyze
from dpsql.sql.constants import NULL, UNKNOWN, constant
from dpsql.sql.date_domain import trunc
from dpsql.sql.derived_keys import date_trunc_domain
from dpsql.sql.key_domain import KeyFilter
from dpsql.sql.key_literals import case_domain, listed_domain
from dpsql.sql.parse import parse_statement
from tests.policies import fixed_demo_policy

policy = fixed_demo_policy()  # the former fixed bounds (G = 5 declared)
CATEGORIES = ("books", "clothing", "electronics", "groceries", "travel")


def run(sql: str) -> Analysis:
    st = parse_statement(sql)
    assert st.tree is not None
    return analyze(st.tree, policy)


def domain(sql: str, i: int = 0) -> tuple[str, ...] | None:
    """The key domain; () when the WHERE clause leaves none (the engine answers no rows, free,
    with a notice naming the declared keys: ``Analysis.no_keys``)."""
    a = run(sql)
    keys = a.group_keys[i].keys
    if keys == () and not a.grouping_sets and a.group_keys[i].keys_from is None:
        assert a.no_keys and "leaves no declared key" in a.no_keys, a.no_keys
    return keys


NARROWED = [
    ("category IN ('books', 'travel')", ("books", "travel")),
    ("category = 'books'", ("books",)),
    ("'books' = category", ("books",)),
    ("category <> 'books'", ("clothing", "electronics", "groceries", "travel")),
    ("category NOT IN ('books', 'travel')", ("clothing", "electronics", "groceries")),
    ("NOT category IN ('books', 'travel')", ("clothing", "electronics", "groceries")),
    ("category IN ('books', 'travel') AND category <> 'books'", ("travel",)),
    ("(category = 'books' OR category = 'travel') AND amount > 5", ("books", "travel")),
    ("category IN ('books', 'nope')", ("books",)),
    ("category = 'nope'", ()),
    ("category IN ('books', NULL)", ("books",)),
    ("category NOT IN ('books', NULL)", ()),  # NOT IN with a NULL is never true
    ("category IS NULL", ()),
    ("category IS NOT NULL AND category = 'books'", ("books",)),
    ("category IS NOT DISTINCT FROM 'books'", ("books",)),
    ("category IS DISTINCT FROM 'books'", ("clothing", "electronics", "groceries", "travel")),
    ("category IS DISTINCT FROM NULL", CATEGORIES),
    ("(category = 'books' AND amount > 5) OR category = 'travel'", ("books", "travel")),
    ("category LIKE 'b%'", ("books",)),  # a pattern decides as = does (dpsql.sql.like_keys)
    ("category NOT ILIKE '%O%'", ("travel",)),
    # conditions dpsql can't read leave the domain as declared (sound: never narrows wrongly)
    ("category = 'books' OR amount > 5", CATEGORIES),
    ("category ILIKE 'É%'", CATEGORIES),  # case-folding beyond ASCII: the database's locale
    ("lower(category) = 'books'", CATEGORIES),
    ("category > 'c'", CATEGORIES),  # text order depends on the collation
    ("NOT (category = 'books' AND amount > 5)", CATEGORIES),
]


@pytest.mark.parametrize(("where", "keys"), NARROWED)
def test_where_narrows_declared_keys(where: str, keys: tuple[str, ...]) -> None:
    sql = f"SELECT category, COUNT(*) FROM purchases WHERE {where} GROUP BY category"
    assert domain(sql) == keys


RANGES = [
    ("educ BETWEEN 3 AND 5", ("3", "4", "5")),
    ("educ >= 15", ("15", "16")),
    ("educ > 15 OR educ < 2", ("1", "16")),
    ("NOT (educ < 15)", ("15", "16")),
    ("educ BETWEEN 3 AND 5 AND educ <> 4", ("3", "5")),
    ("educ IN (3, '4', 5.0)", ("3", "4", "5")),
    ("educ = 2 + 1", ("3",)),
    ("educ <= -1", ()),
]


@pytest.mark.parametrize(("where", "keys"), RANGES)
def test_ranges_narrow_ordered_keys(where: str, keys: tuple[str, ...]) -> None:
    assert domain(f"SELECT educ, COUNT(*) FROM pums WHERE {where} GROUP BY educ") == keys


def test_narrowing_shrinks_g_and_needs_no_selection() -> None:
    a = run("SELECT category, COUNT(*) FROM purchases WHERE category IN ('books', 'travel') "
            "GROUP BY category")  # fmt: skip
    assert not a.needs_selection
    assert a.max_groups == 2  # a unit reaches at most the 2 groups left (G = 5 declared)
    full = run("SELECT category, COUNT(*) FROM purchases GROUP BY category")
    assert full.max_groups == 5


def test_listed_values_are_a_domain_without_partition_selection() -> None:
    a = run("SELECT purchased_at, COUNT(*) FROM purchases "
            "WHERE purchased_at IN ('2025-03-01', DATE '2025-03-02') GROUP BY 1")  # fmt: skip
    g = a.group_keys[0]
    assert g.keys == ("2025-03-01", "2025-03-02")
    assert not a.needs_selection
    # a condition that lists nothing leaves the key to partition selection (a bounded date's
    # own days and a bounded integer's whole numbers are keys: amount, a bare numeric, is not)
    a = run("SELECT amount, COUNT(*) FROM purchases WHERE quantity > 3 GROUP BY 1")
    assert a.needs_selection
    a = run("SELECT quantity, COUNT(*) FROM purchases WHERE quantity IN (2, 3) GROUP BY 1")
    assert a.group_keys[0].keys == ("2", "3") and not a.needs_selection


def test_keys_from_is_narrowed_when_read() -> None:
    a = run("SELECT region, COUNT(*) FROM purchases WHERE region IN ('N', 'S') GROUP BY region")
    g = a.group_keys[0]
    assert g.keys is None and g.keys_from == "public.regions.code"
    assert g.domain(("E", "N", "S", "W")) == ("N", "S")


def test_case_with_literal_results_has_a_public_domain() -> None:
    sql = ("SELECT CASE WHEN amount < 100 THEN 'small' ELSE 'large' END AS band, COUNT(*) "
           "FROM purchases GROUP BY 1")  # fmt: skip
    a = run(sql)
    assert a.group_keys[0].keys == ("small", "large")
    assert not a.needs_selection and a.max_groups == 2
    derived = ("SELECT band, COUNT(*) FROM (SELECT CASE WHEN amount < 100 THEN 'small' "
               "ELSE 'large' END AS band, amount FROM purchases) t GROUP BY band")  # fmt: skip
    assert run(derived).group_keys[0].keys == ("small", "large")
    narrowed = derived.replace("GROUP BY band", "WHERE band = 'small' GROUP BY band")
    assert run(narrowed).group_keys[0].keys == ("small",)


def test_case_without_else_includes_null() -> None:
    g = run("SELECT CASE WHEN amount < 100 THEN 1 WHEN amount < 300 THEN 2 END, COUNT(*) "
            "FROM purchases GROUP BY 1").group_keys[0]  # fmt: skip
    assert g.keys == ("1", "2") and g.null_key and g.domain() == ("1", "2", None)
    g = run("SELECT CASE WHEN amount < 100 THEN 1 END AS b, COUNT(*) FROM purchases "
            "WHERE CASE WHEN amount < 100 THEN 1 END IS NOT NULL GROUP BY 1").group_keys[0]  # fmt: skip
    assert g.domain() == ("1",)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("CASE WHEN x THEN 'a' ELSE 'b' END", (("a", "b"), False, "text")),
        ("CASE WHEN x THEN 'a' WHEN y THEN 'a' END", (("a",), True, "text")),
        ("CASE WHEN x THEN 1.50 ELSE 2.0 END", (("1.50", "2.0"), False, "numeric")),
        ("CASE WHEN x THEN 007 ELSE -3 END", (("7", "-3"), False, "integer")),
        ("CASE WHEN x THEN true ELSE NULL END", (("true",), True, "boolean")),
        ("CASE x WHEN 1 THEN 'one' ELSE 'other' END", (("one", "other"), False, "text")),
        ("CASE WHEN x THEN 1 ELSE 2.5 END", None),  # 1 would print as 1 in a numeric CASE
        ("CASE WHEN x THEN 'a' ELSE 1 END", None),
        ("CASE WHEN x THEN y ELSE 'a' END", None),
        ("CASE WHEN x THEN 1e3 ELSE 2 END", None),
    ],
)
def test_case_domain(case: str, expected: object) -> None:
    assert case_domain(sqlglot.parse_one(case, read="postgres")) == expected


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        ("TO_DATE('2025-03-01', 'YYYY-MM-DD')", date(2025, 3, 1)),
        ("to_date('20250301', 'YYYYMMDD')", date(2025, 3, 1)),
        ("TO_TIMESTAMP('2025-03-01 10:20:30.5', 'YYYY-MM-DD HH24:MI:SS.US')",
         datetime(2025, 3, 1, 10, 20, 30, 500000)),
        ("'2025-03-01'::date", date(2025, 3, 1)),
        ("DATE '2025-03-01' + 3", date(2025, 3, 4)),
        ("DATE '2025-01-31' + INTERVAL '1 month'", datetime(2025, 2, 28)),
        ("TIMESTAMP '2025-03-01 00:00' - INTERVAL '36 hours'", datetime(2025, 2, 27, 12)),
        ("INTERVAL '1 year' + DATE '2024-02-29'", datetime(2025, 2, 28)),
        ("-(2.5)", Fraction(-5, 2)),
        ("NULL", NULL),
        ("now() - INTERVAL '1 day'", UNKNOWN),  # the upstream transaction's time, not ours
        ("current_date", UNKNOWN),
        ("TO_DATE('2025-02-30', 'YYYY-MM-DD')", UNKNOWN),
        ("DATE '2025-01-01' + INTERVAL '1.5 months'", UNKNOWN),
        ("$1", UNKNOWN),
    ],
)  # fmt: skip
def test_constant(sql: str, value: object) -> None:
    assert constant(sqlglot.parse_one(sql, read="postgres")) == value


def test_date_ranges_narrow_by_the_truncated_column() -> None:
    where = sqlglot.parse_one(
        "d >= TO_DATE('2025-03-01', 'YYYY-MM-DD') AND d < DATE '2025-05-01'", read="postgres"
    )
    f = KeyFilter(exp.column("m"), where, "timestamp", exp.column("d"), "month")
    months = [f"2025-{m:02d}-01 00:00:00+00" for m in range(1, 8)]
    assert f.narrow(months) == ("2025-03-01 00:00:00+00", "2025-04-01 00:00:00+00")
    weeks = KeyFilter(exp.column("m"), where, "timestamp", exp.column("d"), "week")
    # the ISO week of Monday 2025-02-24 holds March 1st and 2nd
    assert weeks.narrow(["2025-02-17 00:00:00", "2025-02-24 00:00:00"]) == ("2025-02-24 00:00:00",)


def test_listed_domain_prints_values_as_postgresql() -> None:
    where = sqlglot.parse_one("k IN (1, '02', 3.0) OR k = 4", read="postgres")
    assert listed_domain(where, exp.column("k"), "integer") == ("1", "2", "3", "4")
    assert listed_domain(where, exp.column("k"), "numeric") is None  # 3.0 vs 3: the scale prints


def _trunc_key(sql: str, col: Column, where: str | None = None) -> tuple[str, ...] | None:
    expr = sqlglot.parse_one(sql, read="postgres")
    cond = sqlglot.parse_one(where, read="postgres") if where else None
    return date_trunc_domain(expr, lambda _: col, cond)


def test_date_trunc_domain_from_declared_bounds() -> None:
    """Months generated from the policy's bounds of a date column (no data read)."""
    col = Column.model_construct(
        type="date",
        bounds=(date(2024, 11, 15), date(2025, 2, 1)),
        keys=None,
        keys_from=None,
        identifier=False,
        nullable=True,
    )  # fmt: skip  (date bounds: the policy model's part is issue #16's)
    assert _trunc_key("date_trunc('month', d)", col) == (
        "2024-11-01 00:00:00+00", "2024-12-01 00:00:00+00",
        "2025-01-01 00:00:00+00", "2025-02-01 00:00:00+00",
    )  # fmt: skip
    # the statement's own range narrows it further; an empty intersection is an empty domain
    assert _trunc_key("date_trunc('year', d)", col, "d >= '2025-01-01'") == (
        "2025-01-01 00:00:00+00",
    )
    assert _trunc_key("date_trunc('year', d)", col, "d > '2026-01-01'") == ()
    ts = Column.model_construct(type="timestamp", bounds=None, keys=None, keys_from=None,
                                identifier=False, nullable=True)  # fmt: skip
    assert _trunc_key("date_trunc('day', t)", ts) is None  # unbounded: partition selection
    assert _trunc_key(
        "date_trunc('hour', t)", ts, "t BETWEEN '2025-01-01 22:30' AND '2025-01-02 00:10'"
    ) == ("2025-01-01 22:00:00", "2025-01-01 23:00:00", "2025-01-02 00:00:00")
    assert _trunc_key("date_trunc('second', t)", ts, "t >= '2025-01-01' AND t < '2025-02-01'") is None  # fmt: skip


@pytest.mark.parametrize(
    ("unit", "t", "expected"),
    [
        ("week", datetime(2025, 3, 1, 5), datetime(2025, 2, 24)),
        ("quarter", datetime(2025, 8, 31), datetime(2025, 7, 1)),
        ("decade", datetime(2029, 1, 1), datetime(2020, 1, 1)),
        ("century", datetime(2025, 6, 1), datetime(2001, 1, 1)),
        ("century", datetime(2000, 12, 31), datetime(1901, 1, 1)),
        ("millennium", datetime(2000, 1, 1), datetime(1001, 1, 1)),
        ("minute", datetime(2025, 1, 1, 3, 4, 5, 6), datetime(2025, 1, 1, 3, 4)),
    ],
)
def test_trunc_as_postgresql(unit: str, t: datetime, expected: datetime) -> None:
    assert trunc(t, unit) == expected


BANDS = "CASE WHEN amount < 100 THEN 'small' WHEN amount < 300 THEN 'mid' END"


@pytest.mark.parametrize(
    ("where", "keys", "null"),
    [
        ("amount < 100", ("small",), False),
        ("amount >= 100", ("mid",), True),  # NULL: amount >= 300
        ("100 <= amount AND amount < 300", ("mid",), False),
        # amount < 100 is another condition to dpsql (it doesn't order the constants): 'small'
        # stays, a noisy empty group at worst, never a dropped one
        ("NOT (amount < 300)", ("small",), True),
        ("amount > 5", ("small", "mid"), True),  # another comparison: anything goes
        ("amount < 100 OR category = 'books'", ("small", "mid"), True),
        ("amount IS NULL", ("small", "mid"), True),  # (conditions are independent: sound)
    ],
)
def test_where_narrows_case_results(where: str, keys: tuple[str, ...], null: bool) -> None:
    g = run(f"SELECT {BANDS} AS b, COUNT(*) FROM purchases WHERE {where} GROUP BY 1").group_keys[0]
    assert (g.keys, g.null_key) == (keys, null)

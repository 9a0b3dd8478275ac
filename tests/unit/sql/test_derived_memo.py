"""derived_memo.derived_domain is memoized by the full trees, the zone and the columns' declarations: a
repeat returns the same domain without enumerating it again, and nothing that changes the keys
(a literal's case, another declaration, another zone) reads another statement's entry."""

from __future__ import annotations

from datetime import date

import pytest
import sqlglot

from dpsql.policy.tables import Column
from dpsql.sql.derived_keys import TooMany
from dpsql.sql.derived_memo import derived_domain


def _date(first: date, last: date) -> Column:
    return Column.model_construct(
        type="date",
        bounds=(first, last),
        keys=None,
        keys_from=None,
        identifier=False,
        nullable=True,
    )  # fmt: skip  (date bounds, as test_key_domain)


def _keys(sql: str, col: Column, zone: str = "UTC", where: str | None = None) -> object:
    expr = sqlglot.parse_one(sql, read="postgres")
    cond = sqlglot.parse_one(where, read="postgres") if where else None
    return derived_domain(expr, lambda _: col, cond, zone)


def test_a_repeat_is_the_memoized_domain() -> None:
    col = _date(date(2025, 1, 1), date(2025, 12, 31))
    first = _keys("date_trunc('day', d)", col)
    again = _keys("date_trunc('day', d)", col)
    assert first is not None and len(first.keys) == 365  # type: ignore[attr-defined]
    assert again is first  # not enumerated again


def test_a_filter_on_another_column_is_the_same_entry() -> None:
    col = _date(date(2025, 1, 1), date(2025, 12, 31))
    first = _keys("date_trunc('day', d)", col, where="amount < 100 AND d >= '2025-06-01'")
    again = _keys("date_trunc('day', d)", col, where="amount < 7 AND d >= '2025-06-01'")
    assert first is not None and len(first.keys) == 214  # type: ignore[attr-defined]
    assert again is first


def test_what_changes_the_keys_is_part_of_the_key() -> None:
    """'Mon' and 'MON' print Jan and JAN; another declaration, zone or WHERE clause, its own
    domain (a memo keyed by the expression's text and the zone alone answered the other
    declaration's and the WHERE clause's with the first's keys)."""
    col = _date(date(2025, 1, 1), date(2025, 2, 28))
    mixed = _keys("to_char(d, 'Mon')", col)
    upper = _keys("to_char(d, 'MON')", col)
    assert mixed is not None and upper is not None
    assert mixed.keys == ("Jan", "Feb") and upper.keys == ("JAN", "FEB")  # type: ignore[attr-defined]
    other = _keys("to_char(d, 'Mon')", _date(date(2025, 3, 1), date(2025, 3, 31)))
    assert other is not None and other.keys == ("Mar",)  # type: ignore[attr-defined]
    utc = _keys("date_trunc('month', d)", col)
    ny = _keys("date_trunc('month', d)", col, "America/New_York")
    assert utc is not None and ny is not None
    assert utc.keys[0].endswith("+00") and ny.keys[0].endswith("-05")  # type: ignore[attr-defined]
    narrowed = _keys("date_trunc('month', d)", col, where="d >= '2025-02-01'")
    assert narrowed is not None and len(narrowed.keys) == 1  # type: ignore[attr-defined]


def test_a_domain_too_long_is_refused_each_time() -> None:
    col = _date(date(2000, 1, 1), date(2025, 12, 31))
    for _ in range(2):
        with pytest.raises(TooMany, match="the limit"):
            _keys("date_trunc('day', d)", col)

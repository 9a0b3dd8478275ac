"""dpsql.execute.key_texts: one text per value of a group key (see its module docstring)."""

from __future__ import annotations

import doctest

import pytest

from dpsql.errors import UnsupportedSql
from dpsql.execute import key_texts
from dpsql.execute.key_texts import canonical, canonical_rows, check_declared
from dpsql.policy.tables import Column


def test_doctests() -> None:
    assert doctest.testmod(key_texts).failed == 0


def test_equal_numerics_get_one_text_and_unequal_ones_keep_theirs() -> None:
    texts = ["1", "1.0", "1.00", "10", "10.0", "0.10", "0.1", "-0.0", "0", "-2.50", "NaN"]
    by_value: dict[object, set[str | None]] = {}
    for t in texts:
        by_value.setdefault(float(t) if t != "NaN" else "nan", set()).add(canonical(t, "numeric"))
    assert all(len(v) == 1 for v in by_value.values()), by_value
    assert len({next(iter(v)) for v in by_value.values()}) == len(by_value)


def test_rows_are_canonical_in_their_key_columns_only() -> None:
    rows = [("1.50", "-0", "1.50", 3)]
    assert canonical_rows(rows, ("numeric", "float8"), ("a", "b")) == [("1.5", "0", "1.50", 3)]
    with pytest.raises(UnsupportedSql, match="timetz"):
        canonical_rows(rows, ("timetz",), ("t",))


def test_public_keys_of_one_value_are_refused() -> None:
    check_declared([("1", "2.5"), ("a", "A")], ("numeric", "text"), ("k", "s"))
    with pytest.raises(UnsupportedSql, match="same numeric value"):
        check_declared([("1", "1.0")], ("numeric",), ("k",))
    with pytest.raises(UnsupportedSql, match="same float8 value"):
        check_declared([("0", "-0")], ("float8",), ("k",))


def test_the_policy_refuses_numeric_keys_of_one_value() -> None:
    with pytest.raises(ValueError, match="same number"):
        Column(type="numeric", keys=(1, "1.0"))
    assert Column(type="numeric", keys=(1, "1.5")).key_texts == ("1", "1.5")

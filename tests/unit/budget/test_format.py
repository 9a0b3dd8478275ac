"""Budget numbers as PostgreSQL prints a numeric: whole numbers with their digits (a dataset
limit of 1000 read ``1E+3`` in ``SELECT * FROM dpsql.budget``), fractions rounded the safe way."""

from __future__ import annotations

from fractions import Fraction

from dpsql.budget.format import dec_down, dec_up


def test_whole_numbers_keep_their_digits() -> None:
    assert [str(dec_down(x)) for x in (1000, 100, 10**6, 0, 7)] == [
        "1000", "100", "1000000", "0", "7"
    ]  # fmt: skip


def test_fractions_round_down_for_limits_and_up_for_spending() -> None:
    assert str(dec_down(Fraction(1, 3))) == "0.333333333333"
    assert str(dec_up(Fraction(1, 3))) == "0.333333333334"
    assert str(dec_down(Fraction(5, 2))) == "2.5"

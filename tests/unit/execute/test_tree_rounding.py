"""A tree statement's derived values rounded to the resolution their noise supports
(dpsql.execute.tree_rounding): deterministic cases, and the relative resolution read from the
releases."""

from __future__ import annotations

from decimal import Decimal

from dpsql.execute.noise import Release
from dpsql.execute.tree_rounding import (
    column_resolutions,
    relative_resolution,
    round_rows,
    round_value,
)
from dpsql.sql.interval_sql import Held


def test_round_value_to_a_hundredth_of_its_relative_noise() -> None:
    # a share of 20.14 with 0.8% relative noise: half-width 0.16, step 0.001
    assert round_value(Decimal("20.1436633317241265"), 0.008) == Decimal("20.144")
    assert str(round_value(Decimal("24014.000000000000"), 0.01)) == "24014"  # step 1
    assert str(round_value(Decimal("1823456.5"), 0.45)) == "1823000"  # step 1,000
    assert round_value(3.14159, 0.1) == 3.142
    huge = Decimal("1234567890123456789012345678.5")  # 29 digits, a step of 1e-5: kept as is
    assert round_value(huge, 1e-30) == huge
    assert round_value(1e-200, 1e-200) == 1e-200  # r |v| underflows: no step
    for v in (None, 7, True, "text", Decimal(0), 0.0):
        assert round_value(v, 0.01) == v


def test_round_rows_rounds_only_the_noisy_columns() -> None:
    rows = [("books", Decimal("12.345678"), Decimal("20.1436633317241265"))]
    got = round_rows(["category", "price_key", "share"], rows, {"share": 0.008})
    assert got == [("books", Decimal("12.345678"), Decimal("20.144"))]  # a key keeps its digits
    assert round_rows(["share"], [(Decimal("1.23456"),)], {}) == [(Decimal("1.23456"),)]


def test_a_column_reads_the_resolution_of_its_own_leaves() -> None:
    """Per column: the smallest relative half-width of the leaves it reads; a leaf's value
    passed through is not rounded (it reads the same in every statement); a column whose
    leaves are not known reads all of them."""
    fine = Release(("text",), [["x"]], [[1000.0]], [[(990.0, 1010.0)]])  # 1%
    coarse = Release(("text",), [["x"]], [[100.0]], [[(80.0, 120.0)]])  # 20%

    def held(leaves: tuple[int, ...], passthrough: bool = False) -> Held:
        return Held(0, tuple((i, True) for i in leaves), True, False, passthrough)

    outputs = [("a", held((1,))), ("b", held((0, 1))), ("c", held((0,), True)), ("d", None)]
    got = column_resolutions(outputs, [fine, coarse])
    assert got == {"a": 0.2, "b": 0.01, "d": 0.01}


def test_relative_resolution_is_the_smallest_over_released_values() -> None:
    a = Release(("text",), [["x"], ["y"]], [[100, 2.0], [50, None]], [
        [(90.0, 110.0), (1.0, 3.0)],
        [(45.0, 55.0), None],
    ])  # fmt: skip
    assert relative_resolution([a]) == 0.1  # 10 / 100 and 5 / 50; 1 / 2 is coarser
    assert relative_resolution([Release((), [[]], [[0]], [[(0.0, 0.0)]])]) is None

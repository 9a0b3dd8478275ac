"""What the CHECK constraints' texts prove (dpsql.sql.check_bounds), on the texts PostgreSQL 15's
``pg_get_constraintdef`` prints (tests/integration/engine/test_check_bounds.py reads them from a
real catalog and runs the SQL)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.sql.check_bounds import column_range, proven

F = Fraction


@pytest.mark.parametrize(
    ("definition", "column", "typ", "expected"),
    [
        # CHECK (a >= 0 AND a <= 500) on numeric
        ("CHECK (((a >= (0)::numeric) AND (a <= (500)::numeric)))", "a", "numeric", (0, 500)),
        # BETWEEN -5 AND 10 on integer, printed as two comparisons, a string constant
        ("CHECK (((b >= '-5'::integer) AND (b <= 10)))", "b", "int4", (-5, 10)),
        # float8: constants a double holds exactly
        (
            "CHECK (((f >= (0)::double precision) AND (f <= (10.5)::double precision)))",
            "f",
            "float8",
            (0, F(21, 2)),
        ),
        # real compared in float8 (exact promotion); nested cast of the constant
        (
            "CHECK (((r <= (10)::double precision) AND "
            "(r >= ('-1.5'::numeric)::double precision)))",
            "r",
            "float4",
            (F(-3, 2), 10),
        ),
        # an integer column widened to numeric: exact
        ("CHECK (((i)::numeric <= 10.5))", "i", "int4", (None, F(21, 2))),
        # a numeric column narrowed to integer rounds (10.4 -> 10): proves nothing
        ("CHECK (((k)::integer <= 3))", "k", "numeric", (None, None)),
        # OR proves nothing
        ("CHECK (((m >= (0)::numeric) OR (m <= (10)::numeric)))", "m", "numeric", (None, None)),
        # NO INHERIT still holds for the relation's own rows; quoted name
        ("CHECK ((\"Q\" >= '-1000'::numeric)) NO INHERIT", "Q", "numeric", (-1000, None)),
        ("CHECK ((s = 4))", "s", "int2", (4, 4)),
        ("CHECK (((z >= 0.001) AND (z < '500'::numeric)))", "z", "numeric", (F(1, 1000), 500)),
        # IN is not a simple shape
        ("CHECK ((w = ANY (ARRAY[(1)::numeric, (2)::numeric])))", "w", "numeric", (None, None)),
        # 0.1 as a double is not 0.1
        ("CHECK ((x >= (0.1)::double precision))", "x", "float8", (None, None)),
        # a constant cast to an integer type must be an integer
        ("CHECK ((x <= (10.5)::integer))", "x", "int4", (None, None)),
        # another column, and a NOT VALID text: nothing
        ("CHECK ((y >= (0)::numeric))", "x", "numeric", (None, None)),
        ("CHECK ((x <= (100)::numeric)) NOT VALID", "x", "numeric", (None, None)),
        # one conjunct of several proves its own bound
        ("CHECK (((x >= 0) AND ((y > 2) OR (x <= 7))))", "x", "int4", (0, None)),
        # int8 into float8 rounds above 2^53: not a widening
        ("CHECK (((j)::double precision <= (1)::double precision))", "j", "int8", (None, None)),
    ],
)
def test_column_range(
    definition: str,
    column: str,
    typ: str,
    expected: tuple[int | Fraction | None, int | Fraction | None],
) -> None:
    lo, hi = expected
    want = (None if lo is None else F(lo), None if hi is None else F(hi))
    assert column_range([definition], column, typ) == want


def test_two_constraints_and_the_tightest_bounds() -> None:
    defs = ["CHECK ((x >= 0))", "CHECK ((x <= 100))", "CHECK ((x <= 50))"]
    assert column_range(defs, "x", "int4") == (0, 50)


BOTH = "CHECK (((v >= (0)::numeric) AND (v <= (500)::numeric)))"


def test_proven_needs_both_bounds_inside_the_declared_ones() -> None:
    declared = {"v": (F(0), F(500))}
    types = {"v": "numeric"}
    assert proven(["v"], declared, types, [("r", [BOTH])]) == ("v",)
    wider = "CHECK (((v >= (0)::numeric) AND (v <= (1000)::numeric)))"
    assert proven(["v"], declared, types, [("r", [wider])]) == ()
    # a lower bound alone admits NaN and +Infinity (NaN is above every number)
    assert proven(["v"], declared, types, [("r", ["CHECK ((v >= (0)::numeric))"])]) == ()
    assert proven(["v"], {"v": (F(0), F(1000))}, types, [("r", [BOTH])]) == ("v",)


def test_every_relation_with_rows_must_prove_it() -> None:
    declared, types = {"v": (F(0), F(500))}, {"v": "numeric"}
    # a partitioned parent holds no rows: its partitions prove it
    assert proven(["v"], declared, types, [("p", []), ("r", [BOTH]), ("r", [BOTH])]) == ("v",)
    # a child without the constraint (the parent's was NO INHERIT)
    assert proven(["v"], declared, types, [("r", [BOTH]), ("r", [])]) == ()
    # a foreign table's constraints are not enforced
    assert proven(["v"], declared, types, [("r", [BOTH]), ("f", [BOTH])]) == ()
    # the table is gone
    assert proven(["v"], declared, types, []) == ()


def test_type_matters() -> None:
    declared = {"v": (F(0), F(500))}
    rel = [("r", [BOTH.replace("::numeric", "::double precision")])]
    assert proven(["v"], declared, {"v": "float8"}, rel) == ("v",)
    # a domain, text, or an unknown type proves nothing
    assert proven(["v"], declared, {"v": "money_domain"}, rel) == ()
    # a float8 value is cast to NUMERIC with 15 significant digits: a bound with more (2^-30,
    # which a double holds exactly, has 21) may not bound the cast value
    tiny = "0.000000000931322574615478515625"
    long = f"CHECK (((v >= (0)::double precision) AND (v <= ({tiny})::double precision)))"
    assert column_range([long], "v", "float8") == (0, F(1, 2**30))
    assert proven(["v"], {"v": (F(0), F(1))}, {"v": "float8"}, [("r", [long])]) == ()

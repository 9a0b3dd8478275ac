"""Intervals of outputs computed from several statistics (dpsql.sql.intervals)."""

from __future__ import annotations

import math

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.demo import POLICY
from dpsql.policy import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.intervals import derived_outputs, eval_interval

policy = load_policy(POLICY)


def expr(sql: str) -> sqlglot.exp.Expression:
    return sqlglot.parse_one(sql, read="postgres")


def test_derived_outputs() -> None:
    a = analyze(
        expr(
            "SELECT category, COUNT(*), SUM(amount) / COUNT(*) AS r, ROUND(AVG(amount), 2) AS a, "
            "CASE WHEN COUNT(*) > 5 THEN 1 END AS c, category || 'x' AS k "
            "FROM purchases GROUP BY category"
        ),
        policy,
    )
    got = [(pos, sis) for pos, _, sis in derived_outputs(a)]
    assert got == [(2, (0, 1)), (3, (2,))]


def test_eval_interval() -> None:
    ivs = {0: (90.0, 110.0), 1: (9.0, 11.0)}
    lo, hi = eval_interval(expr("_dp_s0 / _dp_s1"), ivs)  # type: ignore[misc]
    assert lo == pytest.approx(90 / 11) and hi == pytest.approx(110 / 9)
    assert eval_interval(expr("_dp_s0 / _dp_s1"), ivs, frozenset({0, 1})) == (8, 13)
    assert eval_interval(expr("-(_dp_s0 - 2 * _dp_s1)"), ivs) == (-92.0, -68.0)
    assert eval_interval(expr("_dp_s0 / _dp_s1"), {0: (1.0, 2.0), 1: (-1.0, 1.0)}) is None
    assert eval_interval(expr("_dp_s0 + _dp_s1"), {0: (1.0, 2.0), 1: None}) is None
    assert eval_interval(expr("CAST(_dp_s0 AS INT)"), {0: (1.2, 2.5)}) == (1, 3)
    assert eval_interval(expr("CAST(_dp_s0 AS DOUBLE PRECISION)"), {0: (1.2, 2.5)}) == (1.2, 2.5)


ops = st.sampled_from(["+", "-", "*", "/"])
box = st.tuples(st.floats(-100, 100), st.floats(0, 50))


@settings(max_examples=300, deadline=None)
@given(ops, ops, box, box, box, st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_interval_contains_every_value_of_the_box(
    op1: str, op2: str, b0: tuple[float, float], b1: tuple[float, float],
    b2: tuple[float, float], t0: float, t1: float, t2: float,
) -> None:  # fmt: skip
    """For any point of the box, the expression's value lies in the computed interval."""
    e = expr(f"(_dp_s0 {op1} _dp_s1) {op2} _dp_s2")
    ivs = {i: (c - w, c + w) for i, (c, w) in enumerate((b0, b1, b2))}
    got = eval_interval(e, ivs)
    pts = [ivs[i][0] + t * (ivs[i][1] - ivs[i][0]) for i, t in enumerate((t0, t1, t2))]

    def ap(x: float, op: str, y: float) -> float:
        return {"+": x + y, "-": x - y, "*": x * y, "/": x / y if y else math.nan}[op]

    value = ap(ap(pts[0], op1, pts[1]), op2, pts[2])
    if got is None or not math.isfinite(value):
        return
    tol = 1e-9 * (1 + abs(value))
    assert got[0] - tol <= value <= got[1] + tol


def test_a_divisor_whose_reciprocal_overflows_gives_no_interval() -> None:
    """1 / 2.2e-309 overflows to inf and 0 * inf is nan: no interval, rather than a nan end that
    every comparison treats as holding (Hypothesis found it for the box test above)."""
    ivs = {0: (0.0, 1.0), 1: (1e-310, 2.2e-309)}
    assert eval_interval(expr("_dp_s0 / _dp_s1"), ivs) is None

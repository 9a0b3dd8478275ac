"""Make row-level expressions total: they must never raise depending on the data.

An error that happens for some rows and not others is a one-bit channel around the noise
(``CASE WHEN secret THEN 1/0 END``). This pass:

* divides by ``NULLIF(divisor, 0)`` (division by zero gives NULL, which aggregates ignore);
* computes integer arithmetic in NUMERIC, which does not overflow;
* clamps the input of a cast to an integer type into that type's range.

>>> import sqlglot
>>> make_total(sqlglot.parse_one("a / b", read="postgres")).sql("postgres")
'a / NULLIF(b, 0)'
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql import functions as fn
from dpsql.sql.rewrite.literals import number


def _guard(divisor: exp.Expression) -> exp.Expression:
    return exp.Nullif(this=divisor, expression=exp.Literal.number(0))


def _to_numeric(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Literal):
        return node
    return exp.cast(node, "numeric")


def make_total(node: exp.Expression) -> exp.Expression:
    def fix(n: exp.Expression) -> exp.Expression:
        if isinstance(n, (exp.Div, exp.Mod)):
            n.set("expression", _guard(n.expression))
            return n
        if isinstance(n, exp.IntDiv):
            return exp.Anonymous(
                this="div", expressions=[_to_numeric(n.this), _guard(n.expression)]
            )
        if isinstance(n, (exp.Add, exp.Sub, exp.Mul)):
            n.set("this", _to_numeric(n.this))
            return n
        if isinstance(n, exp.Neg) and not isinstance(n.this, exp.Literal):
            return exp.Neg(this=_to_numeric(n.this))
        if isinstance(n, exp.Cast) and n.to.this in fn.INTEGER_TYPES:
            lo, hi = fn.INTEGER_RANGE[n.to.this]
            inner = exp.Least(
                this=exp.Greatest(this=_to_numeric(n.this), expressions=[number(lo)]),
                expressions=[number(hi)],
            )
            return exp.Cast(this=exp.Round(this=inner), to=n.to)
        return n

    return node.copy().transform(fix, copy=False)

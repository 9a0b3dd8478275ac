"""Clamp values into their declared bounds before they are summed.

Each bounded column reference becomes ``numeric_smaller(numeric_larger(col, lo), hi)``; then the
whole argument is clamped to the range the sensitivity analysis computed for it, so the stated
sensitivity holds whatever the expression. NULLs stay NULL (and are ignored by SUM and COUNT(x), as in SQL).
"""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from dpsql.sql.rewrite.literals import clamp_strict, numeric
from dpsql.sql.sensitivity import Columns, lookup


def clamp(node: exp.Expr, lo: Fraction, hi: Fraction) -> exp.Expr:
    """``node`` clamped into [lo, hi] in NUMERIC (NULL stays NULL: see ``clamp_strict``).

    >>> import sqlglot
    >>> clamp(sqlglot.parse_one("x"), Fraction(0), Fraction(9)).sql("postgres")
    'NUMERIC_SMALLER(NUMERIC_LARGER(CAST(x AS DECIMAL), CAST(0 AS DECIMAL)), CAST(9 AS DECIMAL))'
    """
    return clamp_strict(exp.cast(node, "numeric"), numeric(lo), numeric(hi))


def clamp_values(node: exp.Expr, columns: Columns, lo: Fraction, hi: Fraction) -> exp.Expr:
    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column):
            col = lookup(columns, n)
            if col is not None and col.bounds is not None and not col.temporal:
                return clamp(n, col.lo, col.hi)
        return n

    col = lookup(columns, node) if isinstance(node, exp.Column) else None
    if col is not None and col.bounds is not None and (col.lo, col.hi) == (lo, hi):
        return clamp(node.copy(), lo, hi)  # one clamp is enough
    return clamp(node.copy().transform(fix, copy=False), lo, hi)

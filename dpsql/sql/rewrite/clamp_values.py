"""Clamp values into their declared bounds before they are summed.

Each bounded column reference becomes ``numeric_smaller(numeric_larger(col, lo), hi)``; then the
whole argument is clamped to the range the sensitivity analysis computed for it, so the stated
sensitivity holds whatever the expression. NULLs stay NULL (and are ignored by SUM and COUNT(x), as in SQL).
"""

from __future__ import annotations

from collections.abc import Collection
from fractions import Fraction

from sqlglot import exp

from dpsql.sql.nodes import cast
from dpsql.sql.rewrite.literals import clamp_strict, numeric
from dpsql.sql.sensitivity import Columns, lookup


def clamp(node: exp.Expr, lo: Fraction, hi: Fraction) -> exp.Expr:
    """``node`` clamped into [lo, hi] in NUMERIC (NULL stays NULL: see ``clamp_strict``).

    >>> import sqlglot
    >>> clamp(sqlglot.parse_one("x"), Fraction(0), Fraction(9)).sql("postgres")
    'NUMERIC_SMALLER(NUMERIC_LARGER(CAST(x AS DECIMAL), CAST(0 AS DECIMAL)), CAST(9 AS DECIMAL))'
    """
    return clamp_strict(cast(node.copy(), "numeric"), numeric(lo), numeric(hi))


def clamp_values(
    node: exp.Expr,
    columns: Columns,
    lo: Fraction,
    hi: Fraction,
    proven: Collection[str] = (),
) -> exp.Expr:
    """``node`` with each bounded column clamped into its declared bounds, the whole clamped into
    [lo, hi]. ``proven``: columns (unqualified, or of the query's own table) whose values the
    catalog proves lie in their declared bounds (:mod:`dpsql.sql.check_bounds`): their clamp
    into those bounds is ``CAST(col AS NUMERIC)`` alone, the same value on every row.

    >>> import sqlglot
    >>> from dpsql.policy.tables import Column
    >>> cols = {"x": Column(type="numeric", bounds=[0, 9])}
    >>> x = sqlglot.parse_one("x")
    >>> clamp_values(x, cols, Fraction(0), Fraction(9), proven={"x"}).sql("postgres")
    'CAST(x AS DECIMAL)'
    >>> clamp_values(x, cols, Fraction(0), Fraction(5), proven={"x"}).sql("postgres")
    'NUMERIC_SMALLER(NUMERIC_LARGER(CAST(x AS DECIMAL), CAST(0 AS DECIMAL)), CAST(5 AS DECIMAL))'
    """

    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column):
            col = lookup(columns, n)
            if col is not None and col.bounds is not None and not col.temporal:
                if n.name in proven:
                    return cast(n.copy(), "numeric")
                return clamp(n, col.lo, col.hi)
        return n

    col = lookup(columns, node) if isinstance(node, exp.Column) else None
    if col is not None and col.bounds is not None and (col.lo, col.hi) == (lo, hi):
        if not col.temporal and isinstance(node, exp.Column) and node.name in proven:
            return cast(node.copy(), "numeric")  # the catalog proves it: no clamp needed
        return clamp(node, lo, hi)  # one clamp is enough
    return clamp(node.copy().transform(fix, copy=False), lo, hi)

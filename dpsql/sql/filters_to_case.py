"""``AGG(x) FILTER (WHERE c)`` as ``AGG(CASE WHEN c THEN x END)``, before a private query is
analyzed (after :mod:`dpsql.sql.flatten`), so a filtered aggregate goes through the same checks
as any other."""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedSql


def filters_to_case(tree: exp.Expr) -> exp.Expr:
    """``AGG(x) FILTER (WHERE c)`` -> ``AGG(CASE WHEN c THEN x END)`` (``COUNT(*)``: ``THEN 1``).

    Equivalent: rows the filter drops become NULL, which every DP aggregate ignores; the CASE then
    goes through the usual row-level checks and interval analysis.
    """

    def fix(n: exp.Expr) -> exp.Expr:
        if not isinstance(n, exp.Filter):
            return n
        agg, where = n.this, n.expression
        cond = where.this if isinstance(where, exp.Where) else where
        if not isinstance(agg, exp.AggFunc):
            raise UnsupportedSql("FILTER applies to aggregates only")
        out = agg.copy()
        arg = out.this
        distinct = isinstance(arg, exp.Distinct)
        value = arg.expressions[0] if distinct and len(arg.expressions) == 1 else arg
        if isinstance(value, exp.Star) or value is None:
            value = exp.Literal.number(1)
        case = exp.Case(ifs=[exp.If(this=cond.copy(), true=value.copy())])
        out.set("this", exp.Distinct(expressions=[case]) if distinct else case)
        return out

    return tree.transform(fix, copy=True)

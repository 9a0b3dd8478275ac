"""A withheld statistic stays withheld through the post-processing (null30).

dpsql withholds a statistic where the noise leaves no clear answer: an AVG whose noisy count is
below its clear count (:mod:`dpsql.execute.avg_unclear`), a quantile with too few rows, a
VAR_SAMP over a noisy count of at most 1. It is released as NULL, and NULL is what PostgreSQL's
strict operators and functions need to carry "unknown" along: ``AVG(x) + 1`` is NULL, ``AVG(x)
> 5`` is unknown and the three-valued AND / OR keep that honest (``TRUE OR unknown`` is TRUE
whatever the value).

A few constructs read NULL as "no value" and put a value in its place: ``COALESCE``,
``CASE`` (an unknown condition takes the ELSE), ``IS [NOT] NULL``, ``IS [NOT] DISTINCT FROM``,
``NULLIF`` (a NULL second argument returns the first), ``GREATEST``/``LEAST`` (they skip NULLs)
and ``CONCAT`` (it drops them). Over a withheld value they answer with a confident default: the
demo's ``COALESCE(AVG(income), 0)`` answered 0, 0, 0 for truths 11,146 / 13,478 / 24,224. A
withheld value is not missing (those groups have rows), it is unknown, so any value computed
from it is withheld too. :func:`hold_withheld` wraps each outermost such construct that reads a
statistic in ``CASE WHEN <every statistic and every undefined-value guard it reads> IS NOT NULL
THEN <it> END``: NULL wherever one of them is. The wrapper is marked as a guard
(:data:`dpsql.sql.post_guards.GUARD`, its value where defined is the construct), so interval
arithmetic and the picked-rows words read through it, and as :data:`HELD` so the notices find
it. A guard's own NULL (a noisy divisor of 0, :mod:`dpsql.sql.post_guards`) counts as withheld
too: ``COALESCE(SUM(x) / COUNT(*), 0)`` does not turn a noisy 0 divisor into 0 either.

The analyst's own NULLs of released values stay SQL's: ``COALESCE(NULLIF(COUNT(*), 0), 1)``
reads a released count, none withheld, and answers 1 where the count came out 0.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql.post_guards import GUARD, HELD

# constructs that answer something other than NULL for a NULL operand (PostgreSQL's non-strict
# ones among the post-processing's nodes, dpsql.sql.functions.POST_NODES)
NON_STRICT: tuple[type[exp.Expr], ...] = (
    exp.Coalesce,
    exp.Case,
    exp.Is,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.Nullif,
    exp.Greatest,
    exp.Least,
    exp.Concat,
)


def statistic_columns(node: exp.Expr) -> list[str]:
    """The released statistics ``node`` reads (``_dp_s<i>`` column names), in order, once each."""
    out: list[str] = []
    for c in node.find_all(exp.Column):
        if c.name.startswith("_dp_s") and c.name not in out:
            out.append(c.name)
    return sorted(out, key=lambda n: int(n[5:]))


def hold_withheld(node: exp.Expr) -> exp.Expr:
    """``node`` with each outermost non-strict construct reading a statistic held NULL where a
    statistic or guard it reads is (module doc); modified in place and returned."""

    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, NON_STRICT) and not n.meta.get(GUARD) and statistic_columns(n):
            return held(n)
        return n

    return node.transform(fix, copy=False)


def held(n: exp.Expr) -> exp.Case:
    """``CASE WHEN <what n reads> IS NOT NULL ... THEN n END``, marked (module doc)."""
    reads: list[exp.Expr] = [exp.column(name, "_dp") for name in statistic_columns(n)]
    reads += [g.copy() for g in _outer_guards(n)]
    cond = exp.and_(*(exp.Not(this=exp.Is(this=r, expression=exp.Null())) for r in reads))
    case = exp.Case(ifs=[exp.If(this=cond, true=n)])
    case.meta[GUARD] = True
    case.meta[HELD] = True
    return case


def _outer_guards(n: exp.Expr) -> list[exp.Expr]:
    """The guards of :mod:`dpsql.sql.post_guards` inside ``n`` not inside another one."""
    out: list[exp.Expr] = []
    for g in n.find_all(exp.Expr):
        if g is not n and g.meta.get(GUARD) and not any(x is g for o in out for x in o.walk()):
            out.append(g)
    return out


def held_statistics(node: exp.Expr) -> list[int]:
    """The statistics (indexes) read by the wrappers :func:`hold_withheld` put in ``node``."""
    out: set[int] = set()
    for n in node.walk():
        if n.meta.get(HELD):
            out.update(int(c[5:]) for c in statistic_columns(n))
    return sorted(out)


def unheld(node: exp.Expr) -> exp.Expr:
    """``node`` (modified in place) without :func:`hold_withheld`'s wrappers: for statistics
    whose NULL is SQL's own (the aggregates of no rows, :mod:`dpsql.execute.no_rows`)."""

    def fix(n: exp.Expr) -> exp.Expr:
        if n.meta.get(HELD) and isinstance(n, exp.Case):
            inner = n.args["ifs"][0].args["true"]
            return fix(inner) if isinstance(inner, exp.Expr) else n
        return n

    return node.transform(fix, copy=False)

"""What a cut by noisy values compares (:mod:`dpsql.execute.picked_words`): the value an
``ORDER BY`` term or a ``HAVING`` comparison reads in each released row, and that value's noise
interval, for one statistic (``ORDER BY COUNT(*)``, ``ORDER BY 2``, a wrapper's
``ORDER BY (n)``) or an expression of several (``ORDER BY SUM(a) / COUNT(*)``,
``ORDER BY -COUNT(*)``, ``ORDER BY CASE WHEN COUNT(*) > 0 THEN COUNT(*) END``).

An expression's noise interval is its range over its statistics' noise intervals (interval
arithmetic, :func:`dpsql.sql.intervals.eval_interval`: the truth's expression is inside whenever
each statistic's truth is in its own). A CASE's is the hull of the branches its conditions may
take over those intervals; a branch that is NULL (no ELSE) stands where PostgreSQL sorts NULL
(its ``NULLS FIRST`` / ``LAST``: the highest value by default), so a row that the noise may make
NULL reaches there. Read from the released values and their stored noise intervals alone:
post-processing, nothing here reads a private row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.execute.noise import Release
from dpsql.sql.analysis import Analysis
from dpsql.sql.intervals import eval_interval, stat_index
from dpsql.sql.post_guards import guarded_value
from dpsql.sql.wording import plain_sql

Noise = tuple[float, float] | None


@dataclass(frozen=True)
class Key:
    """A cut's value per released row (None: NULL, not compared), its noise interval (None:
    none known) and, where one number says every row's noise, its half-width."""

    text: str
    values: Sequence[float | None]
    noise: Sequence[Noise]
    width: float | None
    # rows whose statistics all have a value but whose expression's noise dpsql cannot bound
    # (a function it does not know: ``ORDER BY pow(COUNT(*), 2)``)
    unbounded: frozenset[int] = frozenset()


def resolved(a: Analysis, node: exp.Expr) -> exp.Expr:
    """An ORDER BY / HAVING operand of the outer query as the expression it names: its output
    by position (``ORDER BY 2``) or alias, without the parentheses a wrapper's flattening adds
    (``ORDER BY (_dp._dp_s0)``)."""
    outs = a.outer.expressions
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        k = int(node.this)
        node = outs[k - 1] if 1 <= k <= len(outs) else node
    elif isinstance(node, exp.Column) and not node.table:
        node = next((o for o in outs if o.alias_or_name == node.name), node)
    body = node.this if isinstance(node, exp.Alias) else node
    while isinstance(body, exp.Paren):
        body = body.this
    return body


def stat_of(a: Analysis, node: exp.Expr) -> int | None:
    """The statistic index ``node`` reads as a whole (``_dp._dp_s0``, an output's alias or
    position, in parentheses or not); None for anything else."""
    si = stat_index(resolved(a, node))
    return si if si is not None and si < len(a.statistics) else None


def reads_stats(a: Analysis, node: exp.Expr) -> bool:
    """Does ``node`` read released statistics and no group key (a cut by noisy values)?"""
    cols = list(resolved(a, node).find_all(exp.Column))
    return bool(cols) and all(
        (i := stat_index(c)) is not None and i < len(a.statistics) for c in cols
    )


def key_of(
    a: Analysis,
    rel: Release,
    node: exp.Expr,
    widths: Sequence[float | None],
    null_high: bool = True,
) -> Key | None:
    """The cut's value and noise interval per released row for ``node`` (None: it does not
    read statistics alone). ``null_high``: NULL sorts above every value (PostgreSQL's default
    for ASC, and DESC NULLS FIRST)."""
    if not reads_stats(a, node):
        return None
    body = resolved(a, node)
    si = stat_index(body)
    if si is not None:
        vals = [number(row[si]) for row in rel.stats]
        ivs = [rel.noise[r][si] if vals[r] is not None else None for r in range(len(vals))]
        w = widths[si] if si < len(widths) else None
        return Key(a.statistics[si].sql, vals, ivs, w)
    ints = frozenset(i for i, s in enumerate(a.statistics) if s.pg_type == "int8")
    null = math.inf if null_high else -math.inf
    used = {i for c in body.find_all(exp.Column) if (i := stat_index(c)) is not None}
    values: list[float | None] = []
    noise: list[Noise] = []
    unbounded = set()
    for r, row in enumerate(rel.stats):
        points = {i: (v, v) for i, x in enumerate(row) if (v := number(x)) is not None}
        if not used <= points.keys():
            values.append(None)  # a statistic without a value (an AVG of no noisy rows)
            noise.append(None)
            continue
        got = _safe(body, dict(points), ints, null)
        # a NULL the expression makes (a CASE without ELSE) is compared where it sorts
        values.append(None if got is None or math.isinf(got[0]) else (got[0] + got[1]) / 2)
        iv = _safe(body, dict(enumerate(rel.noise[r])), ints, null)
        noise.append(iv)
        if got is None or iv is None:
            unbounded.add(r)
    return Key(_text(a, body), values, noise, None, frozenset(unbounded))


def number(x: object) -> float | None:
    """A released value as a finite float (None: NULL, not a number, or not finite)."""
    if x is None or isinstance(x, (str, bytes, bool)):
        return None
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _safe(node: exp.Expr, ivs: dict[int, Noise], ints: frozenset[int], null: float) -> Noise:
    """:func:`_range`, None where it is not a number (a CASE of strings: ``THEN 'a'``)."""
    try:
        return _range(node, ivs, ints, null)
    except (ValueError, TypeError, ArithmeticError):
        return None


def _range(node: exp.Expr, ivs: dict[int, Noise], ints: frozenset[int], null: float) -> Noise:
    """``node``'s range when each statistic lies in its interval; a CASE (at the top, or in
    parentheses): the hull of the branches it may take, NULL at ``null``."""
    while isinstance(node, exp.Paren) or guarded_value(node) is not None:
        inner = node.this if isinstance(node, exp.Paren) else guarded_value(node)
        assert inner is not None
        node = inner
    if isinstance(node, _MONOTONE) and not node.args.get("expression"):
        r = _range(node.this, ivs, ints, null)
        return None if r is None else _monotone(node, r)
    if isinstance(node, exp.Case):
        got: list[Noise] = []
        reach = True
        for branch in node.args.get("ifs") or []:
            holds = _holds(branch.this, ivs, ints)
            if holds is False:
                continue
            got.append(_branch(branch.args.get("true"), ivs, ints, null))
            if holds is True:
                reach = False
                break
        if reach:
            got.append(_branch(node.args.get("default"), ivs, ints, null))
        if not got or any(g is None for g in got):
            return None
        return min(g[0] for g in got if g), max(g[1] for g in got if g)
    return eval_interval(node, ivs, ints)


_MONOTONE = (exp.Ln, exp.Exp, exp.Sqrt, exp.Abs)


def _monotone(node: exp.Expr, r: tuple[float, float]) -> Noise:
    """ln, exp, sqrt (increasing where defined) and abs of a range; None where the range
    leaves the function's domain (PostgreSQL's error, dpsql's guard: NULL)."""
    lo, hi = r
    try:
        if isinstance(node, exp.Ln):
            return (math.log(lo), math.log(hi)) if lo > 0 else None
        if isinstance(node, exp.Sqrt):
            return (math.sqrt(lo), math.sqrt(hi)) if lo >= 0 else None
        if isinstance(node, exp.Exp):
            return math.exp(lo), math.exp(hi)
    except OverflowError:
        return None
    if lo >= 0:
        return lo, hi
    return (0.0, max(-lo, hi)) if hi >= 0 else (-hi, -lo)


def _branch(
    node: exp.Expr | None, ivs: dict[int, Noise], ints: frozenset[int], null: float
) -> Noise:
    if node is None or isinstance(node, exp.Null):
        return null, null
    return _range(node, ivs, ints, null)


_CMP: dict[type[exp.Expr], str] = {
    exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.EQ: "=", exp.NEQ: "<>",
}  # fmt: skip


def _holds(cond: exp.Expr, ivs: dict[int, Noise], ints: frozenset[int]) -> bool | None:
    """Whether ``cond`` holds for every value in the intervals (True), for none (False), or
    may go either way (None: also anything not a comparison of two such ranges)."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if isinstance(cond, exp.Not):
        inner = _holds(cond.this, ivs, ints)
        return None if inner is None else not inner
    if isinstance(cond, (exp.And, exp.Or)):
        x, y = _holds(cond.this, ivs, ints), _holds(cond.expression, ivs, ints)
        if isinstance(cond, exp.And):
            return False if False in (x, y) else (True if x is True and y is True else None)
        return True if True in (x, y) else (False if x is False and y is False else None)
    op = _CMP.get(type(cond))
    if op is None:
        return None
    left = eval_interval(cond.this, ivs, ints)
    right = eval_interval(cond.expression, ivs, ints)
    if left is None or right is None:
        return None
    (a0, a1), (b0, b1) = left, right
    if op in (">", ">="):
        yes, no = (a0 > b1, a1 <= b0) if op == ">" else (a0 >= b1, a1 < b0)
    elif op in ("<", "<="):
        yes, no = (a1 < b0, a0 >= b1) if op == "<" else (a1 <= b0, a0 > b1)
    elif op == "=":
        yes, no = a0 == a1 == b0 == b1, a1 < b0 or b1 < a0
    else:
        yes, no = a1 < b0 or b1 < a0, a0 == a1 == b0 == b1
    return True if yes else (False if no else None)


def _text(a: Analysis, body: exp.Expr) -> str:
    """The expression as the analyst wrote it: each statistic as written, without the guards
    dpsql adds to the post-processing query (``NULLIF(x, 0)`` around a divisor)."""

    def back(n: exp.Expr) -> exp.Expr:
        inner = guarded_value(n)
        if inner is not None:
            return inner.copy().transform(back)
        i = stat_index(n.this if isinstance(n, exp.Paren) else n)  # (a wrapper's parentheses)
        if i is not None and i < len(a.statistics):
            return exp.var(a.statistics[i].sql)
        return n

    return plain_sql(body.copy().transform(back))

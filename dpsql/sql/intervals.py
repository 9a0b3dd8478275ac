"""Intervals for output columns computed from several statistics (``SUM(x) / COUNT(*)``, ``2 * AVG(x)``).

An output expression over m statistics gets each statistic's interval at confidence
1 - alpha/m (union bound: all m hold together with probability >= 1 - alpha), then the
expression's range over that box by interval arithmetic, rounded outwards. The true value of the
expression (the same expression of the true statistics) is inside whenever the m intervals hold,
so the interval is honest at the session's confidence, conservative (never optimistic).

Supported: literals, the statistics, + - * /, unary minus, parentheses, casts and ROUND / FLOOR /
CEIL / TRUNC (widened to whole units, which covers any rounding and integer division). Anything
else (CASE, functions, group keys) gets no interval; the engine says so in a notice.

An infinite end is no bound on that side: a statistic whose accuracy notice keeps one end only
(a COUNT's ``_low`` where the bounds may have left out any number of rows:
:mod:`dpsql.execute.disowned`) enters as ``(low, inf)``. Sums, differences, negation, scaling
by a constant and the monotone functions carry it (``COUNT(*) * 2``, ``COUNT(*) + 1``,
``SUM(x) - 10`` keep ``_low``; ``-COUNT(*)`` keeps ``_high``); a product or a quotient of two
intervals has no end once one of them is unbounded (a corner ``0 * inf`` bounds nothing), as in
a tree statement (:mod:`dpsql.sql.interval_sql`). The true value lies between the ends whenever
each statistic lies in its own (the inclusion property of interval arithmetic, with the
extended reals: a low end is finite or -inf, a high end finite or +inf, so no sum or difference
of ends is ``inf - inf``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sqlglot import exp

from dpsql.sql.analysis import Analysis
from dpsql.sql.functions import INTEGER_TYPES
from dpsql.sql.post_guards import guarded_value

Iv = tuple[float, float]


def stat_index(node: exp.Expr) -> int | None:
    if isinstance(node, exp.Column) and node.name.startswith("_dp_s"):
        return int(node.name[5:])
    return None


def derived_outputs(a: Analysis) -> list[tuple[int, exp.Expr, tuple[int, ...]]]:
    """(output position, expression, statistics used) of the outputs that are expressions over
    statistics with a supported shape (see the module docstring)."""
    out = []
    for pos, item in enumerate(a.outer.expressions):
        body = item.this if isinstance(item, exp.Alias) else item
        if stat_index(body) is not None or not _supported(body):
            continue
        sis = tuple(
            sorted({i for c in body.find_all(exp.Column) if (i := stat_index(c)) is not None})
        )
        if sis:
            out.append((pos, body, sis))
    return out


_MONO = (exp.Round, exp.Floor, exp.Ceil, exp.Trunc, exp.Cast)


def _supported(node: exp.Expr) -> bool:
    inner = _guarded(node)  # a guard (NULLIF(x, 0), CASE WHEN x >= 0 THEN ...): its value
    if inner is not None:
        return _supported(inner)
    if isinstance(node, exp.Column):
        return stat_index(node) is not None
    return _shallow(node) and all(_supported(k) for k in node.iter_expressions())


def _guarded(node: exp.Expr) -> exp.Expr | None:
    """The value a guard of :mod:`dpsql.sql.post_guards`, or the user's own ``NULLIF(x, 0)``,
    has where it is not NULL."""
    inner = guarded_value(node)
    if inner is None and isinstance(node, exp.Nullif) and _zero(node.expression):
        inner = node.this
    return inner


def _zero(e: object) -> bool:
    return isinstance(e, exp.Literal) and not e.is_string and e.this in ("0", "0.0")


def _shallow(n: exp.Expr) -> bool:
    """The node alone (not its children) is of a supported kind."""
    return isinstance(
        n,
        (exp.Literal, exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.DataType,
         exp.Identifier, *_MONO),
    ) and not (isinstance(n, exp.Literal) and n.is_string)  # fmt: skip


def is_integer(node: exp.Expr, int_stats: frozenset[int]) -> bool:
    """True when PostgreSQL types ``node`` as an integer in the post-processing query."""
    i = stat_index(node)
    if i is not None:
        return i in int_stats
    if isinstance(node, exp.Literal):
        return not node.is_string and node.this.isdigit()
    inner = _guarded(node)
    if inner is not None:
        return is_integer(inner, int_stats)
    if isinstance(node, (exp.Paren, exp.Neg)):
        return is_integer(node.this, int_stats)
    if isinstance(node, exp.Cast):
        return node.to.this in INTEGER_TYPES
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        return is_integer(node.this, int_stats) and is_integer(node.expression, int_stats)
    return False


def eval_interval(
    node: exp.Expr, ivs: dict[int, Iv | None], int_stats: frozenset[int] = frozenset()
) -> Iv | None:
    """The range of ``node`` when each statistic i lies in ``ivs[i]`` (None: unknown);
    ``int_stats``: the statistics typed as integers (their division truncates)."""

    def ev(n: exp.Expr) -> Iv | None:
        return eval_interval(n, ivs, int_stats)

    i = stat_index(node)
    if i is not None:
        return ivs.get(i)
    inner = _guarded(node)
    if inner is not None:  # where it is not NULL, its value is the guarded child's
        return ev(inner)
    if isinstance(node, exp.Literal):
        v = float(node.this)
        return v, v
    if isinstance(node, exp.Paren):
        return ev(node.this)
    if isinstance(node, exp.Neg):
        r = ev(node.this)
        return (-r[1], -r[0]) if r else None
    if isinstance(node, _MONO):
        if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
            r = ev(node.this)
            d = int(float(node.args["decimals"].this)) if node.args["decimals"].is_number else 0
            step = 10.0**-d
            return (r[0] - step, r[1] + step) if r else None
        r = ev(node.this)
        if isinstance(node, exp.Cast) and node.to.this not in INTEGER_TYPES:
            return r
        return (_whole(r[0], math.floor), _whole(r[1], math.ceil)) if r else None
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        a, b = ev(node.this), ev(node.expression)
        if a is None or b is None:
            return None
        out = _arith(node, a, b)
        if out is not None and isinstance(node, exp.Div) and is_integer(node, int_stats):
            return _whole(out[0], math.floor), _whole(out[1], math.ceil)  # truncating division
        return out
    return None


def _whole(x: float, rounding: Callable[[float], int]) -> float:
    """``x`` rounded to a whole number (an infinite end stays: no bound on that side)."""
    return float(rounding(x)) if math.isfinite(x) else x


def _arith(node: exp.Expr, a: Iv, b: Iv) -> Iv | None:
    if isinstance(node, exp.Add):
        return a[0] + b[0], a[1] + b[1]
    if isinstance(node, exp.Sub):
        return a[0] - b[1], a[1] - b[0]
    if not all(map(math.isfinite, (*a, *b))):
        # an unbounded end: scaling by a constant carries it, a product or a quotient of two
        # intervals bounds nothing (module doc)
        if isinstance(node, exp.Mul) and a[0] == a[1]:
            a, b = b, a  # the constant second
        if b[0] != b[1] or not math.isfinite(b[0]) or b[0] == 0:
            return None
        c = b[0] if isinstance(node, exp.Mul) else 1 / b[0]
        return (a[0] * c, a[1] * c) if c > 0 else (a[1] * c, a[0] * c)
    if isinstance(node, exp.Div):
        if b[0] <= 0 <= b[1]:
            return None  # the divisor may be 0: no finite interval
        b = (1 / b[1], 1 / b[0])
    prods = [x * y for x in a for y in b]
    if any(math.isnan(p) for p in prods):
        return None  # 0 * inf (a divisor so close to 0 that its reciprocal overflows): no interval
    return min(prods), max(prods)


def derived_intervals(
    a: Analysis,
    rows: int,
    confidence: float,
    stat_interval: Callable[[int, int, float], Iv | None],
) -> list[list[Iv | None]]:
    """Per released row, the interval of each derived output (in ``derived_outputs`` order).

    ``stat_interval(row, statistic, level)`` is statistic's interval in that row at ``level``.
    """
    outs = derived_outputs(a)
    ints = frozenset(i for i, s in enumerate(a.statistics) if s.pg_type == "int8")
    table: list[list[Iv | None]] = [[] for _ in range(rows)]
    for _, body, sis in outs:
        level = 1 - (1 - confidence) / len(sis)
        for r in range(rows):
            ivs = {si: stat_interval(r, si, level) for si in sis}
            got = eval_interval(body, ivs, ints)
            table[r].append(got if got is not None and _bounded(got) else None)
    return table


def _bounded(iv: Iv) -> bool:
    """An interval with at least one finite end (the other may be unbounded: module doc)."""
    lo, hi = iv
    if math.isnan(lo) or math.isnan(hi) or lo == math.inf or hi == -math.inf:
        return False
    return math.isfinite(lo) or math.isfinite(hi)

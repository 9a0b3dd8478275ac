"""GROUP BY ROLLUP / CUBE / GROUPING SETS: one DP measurement per grouping set, then one answer.

Semantics are PostgreSQL's ("GROUPING SETS, CUBE, and ROLLUP" in the manual): ``ROLLUP(a, b)`` is
``GROUPING SETS ((a, b), (a), ())``, ``CUBE(a, b)`` is ``GROUPING SETS ((a, b), (a), (b), ())``, a
parenthesized list inside them is one unit, ``GROUPING SETS`` may nest, and several items in one
GROUP BY multiply (``GROUP BY a, ROLLUP(b, c)`` is ``(a, b, c), (a, b), (a)``). Duplicate sets
stay (PostgreSQL returns their rows twice) unless ``GROUP BY DISTINCT``. ``GROUPING(a, ...)`` is
the bit mask of the arguments left out of the row's set (first argument = most significant bit).

Privacy: a unit's rows feed every set, so the sets compose sequentially. Each distinct set is its
own measurement, planned by :func:`dpsql.sql.plan.make_plan` exactly as the single GROUP BY over
its keys (its own contribution bounding: <= R rows per group and <= G groups of that set, or,
for per-group COUNT and SUM with ``auto`` bounds, the same L1 cap L over the unit's groups of
that set as the plain GROUP BY gets: :func:`dpsql.sql.auto_bounds.total_mode`; the empty set
``()`` is the grand total, G = 1, always released, no partition selection). The
statement's epsilon is split evenly over the k distinct sets (epsilon/k each). Its delta goes,
in equal parts, to the sets that need it: the sets with partition selection (a key without
declared values); to every set when none does or when Gaussian noise is requested. A duplicate
set is measured once and its rows repeated, as PostgreSQL repeats them. The ledger is charged the
sum of the sets' costs (basic composition), once, before any set is measured.

The stitched answer has every key of any set (NULL where a set rolled it up) and one more key,
the row's set number, that the post-processing query uses for ``GROUPING()``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from sqlglot import exp

from dpsql.dp.accounting import Cost, sequential
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.errors import GroupingError, ProgramLimitExceeded, UnsupportedSql
from dpsql.sql.analysis import Analysis
from dpsql.sql.plan import MeasurePlan, Plan, make_plan
from dpsql.sql.wording import plain_sql

MAX_GROUPING_SETS = 16  # per statement: each set is one more measurement sharing the epsilon
MAX_GROUPING_ARGS = 31  # PostgreSQL's own limit for GROUPING(...)

RawSet = tuple[exp.Expr, ...]
_SETS = (exp.Rollup, exp.Cube, exp.GroupingSets)


def has_grouping_sets(group: exp.Group) -> bool:
    """True when a GROUP BY uses ROLLUP, CUBE or GROUPING SETS."""
    return any(isinstance(e, _SETS) for e in group.expressions)


def _unit(node: exp.Expr) -> list[exp.Expr]:
    """The expressions of one element of ROLLUP/CUBE: ``a`` or a parenthesized list ``(a, b)``."""
    if isinstance(node, _SETS):
        raise UnsupportedSql(
            f"{node.key.upper()} can't be nested inside ROLLUP or CUBE",
            hint="nest ROLLUP and CUBE inside GROUPING SETS ((...), ROLLUP (...)) instead",
        )
    if isinstance(node, exp.Tuple):
        return list(node.expressions)
    if isinstance(node, exp.Paren):
        return [node.this]
    return [node]


def _count(node: exp.Expr) -> int:
    """How many grouping sets an item of GROUP BY stands for (computed before expanding)."""
    if isinstance(node, exp.Rollup):
        return len(node.expressions) + 1
    if isinstance(node, exp.Cube):
        return 1 << len(node.expressions)
    if isinstance(node, exp.GroupingSets):
        return sum(_count(e) for e in node.expressions)
    return 1


def _sets(node: exp.Expr) -> list[RawSet]:
    """The grouping sets of one GROUP BY item, in PostgreSQL's order."""
    if isinstance(node, exp.Rollup):
        parts = [_unit(e) for e in node.expressions]
        return [tuple(x for p in parts[:i] for x in p) for i in range(len(parts), -1, -1)]
    if isinstance(node, exp.Cube):
        parts = [_unit(e) for e in node.expressions]
        masks = itertools.product((True, False), repeat=len(parts))
        return [
            tuple(x for p, keep in zip(parts, m, strict=True) if keep for x in p) for m in masks
        ]
    if isinstance(node, exp.GroupingSets):
        return [s for e in node.expressions for s in _sets(e)]
    if isinstance(node, exp.Tuple):
        return [tuple(node.expressions)]
    if isinstance(node, exp.Paren):
        return [(node.this,)]
    return [(node,)]


def expand_group(group: exp.Group) -> list[RawSet]:
    """The grouping sets of a GROUP BY clause (items multiply, first item outermost).

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT 1 FROM t GROUP BY a, ROLLUP (b, c)", read="postgres")
    >>> [tuple(e.sql() for e in s) for s in expand_group(q.args["group"])]
    [('a', 'b', 'c'), ('a', 'b'), ('a',)]
    """
    n = math.prod(_count(e) for e in group.expressions)
    if n > MAX_GROUPING_SETS:
        raise ProgramLimitExceeded(
            f"this GROUP BY has {n} grouping sets; a private query may have at most "
            f"{MAX_GROUPING_SETS}",
            detail="each grouping set is a separate measurement sharing the query's epsilon",
            hint="use ROLLUP instead of CUBE, list the subtotals you need with GROUPING SETS, "
            "or split the query",
        )
    out: list[RawSet] = [()]
    for item in group.expressions:
        out = [a + b for a in out for b in _sets(item)]
    return out


def dedupe(sets: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The distinct sets, in order of first appearance."""
    return list(dict.fromkeys(sets))


def grouping_value(args: Sequence[int], keys: tuple[int, ...]) -> int:
    """GROUPING(args) in a row of the set ``keys``: bit 1 for each argument not in the set.

    >>> grouping_value([0, 1], (0,))
    1
    >>> grouping_value([0, 1], ())
    3
    """
    v = 0
    for i in args:
        v = (v << 1) | (0 if i in keys else 1)
    return v


def grouping_expr(
    args: Sequence[int], sets: Sequence[tuple[int, ...]], set_column: exp.Column
) -> exp.Expr:
    """GROUPING(args) over the post-processing rows, whose ``set_column`` holds the set number."""
    if not args or len(args) > MAX_GROUPING_ARGS:
        raise GroupingError(
            f"GROUPING takes 1 to {MAX_GROUPING_ARGS} arguments",
            hint="e.g. GROUPING(category, region)",
        )
    values = [grouping_value(args, s) for s in sets]
    if len(set(values)) == 1:
        return exp.Literal.number(values[0])
    ifs = [
        exp.If(this=exp.Literal.number(j), true=exp.Literal.number(v)) for j, v in enumerate(values)
    ]
    return exp.Paren(this=exp.Case(this=set_column, ifs=ifs))


def set_analysis(a: Analysis, keys: tuple[int, ...]) -> Analysis:
    """The single-GROUP-BY analysis of one grouping set (same measures, its own keys)."""
    return replace(
        a, group_keys=tuple(a.group_keys[i] for i in keys), grouped=bool(keys), grouping_sets=()
    )


def set_label(a: Analysis, keys: tuple[int, ...]) -> str:
    """A grouping set as the user writes it: ``(category, region)``, ``()``."""
    return "(" + ", ".join(plain_sql(a.group_keys[i].expr) for i in keys) + ")"


@dataclass(frozen=True)
class SetPlan:
    """One grouping set's measurement: its keys (indexes into the analysis's group keys), the
    positions in ``Analysis.grouping_sets`` it answers (several when the set is repeated), and
    its plan."""

    keys: tuple[int, ...]
    positions: tuple[int, ...]
    plan: Plan


@dataclass(frozen=True)
class SetsPlan:
    """The plan of a GROUP BY with grouping sets: one plan per distinct set, costs summed."""

    analysis: Analysis
    epsilon: Fraction
    delta: Fraction
    sets: tuple[SetPlan, ...]

    @property
    def mechanism(self) -> str:
        names = sorted({s.plan.mechanism for s in self.sets})
        return "+".join(names)

    @property
    def cost(self) -> Cost:
        return sequential(s.plan.cost for s in self.sets)

    @property
    def delta_for_rho(self) -> Fraction | None:
        """The part of the delta at which the sets' Gaussian rho was calibrated (None: none)."""
        parts = [
            s.plan.delta - (s.plan.selection.delta if s.plan.selection is not None else 0)
            for s in self.sets
            if s.plan.mechanism == "gaussian"
        ]
        return sum(parts, Fraction(0)) if parts else None

    def measure_plan(self, key: str) -> MeasurePlan:
        """The measure's plan in the set where it is noisiest (for labels and accuracy notes)."""
        plans = [s.plan.measure_plan(key) for s in self.sets]
        return max(plans, key=_noisiness)


def _noisiness(mp: MeasurePlan) -> float:
    m = mp.mechanism
    if isinstance(m, Gaussian):
        return float(m.std)
    if mp.measure.selected or not isinstance(m, Laplace):  # a selection: by its epsilon
        return 1 / float(m.epsilon)
    return float(m.std)


def make_sets_plan(
    a: Analysis,
    epsilon: Fraction,
    delta: Fraction,
    mechanism: str = "auto",
    planner: Callable[[Analysis, Fraction, Fraction, str], Plan] = make_plan,
) -> SetsPlan:
    """Split (epsilon, delta) over the distinct grouping sets (see the module docstring); each
    set is planned by ``planner`` (the engine's: :func:`~dpsql.sql.plan.make_plan`, or a privacy
    audit's deliberately broken one)."""
    distinct = dedupe(a.grouping_sets)
    subs = [set_analysis(a, s) for s in distinct]
    k = len(distinct)
    selecting = [i for i, sub in enumerate(subs) if sub.needs_selection]
    takers = set(selecting) if selecting and mechanism != "gaussian" else set(range(k))
    plans = []
    for i, (keys, sub) in enumerate(zip(distinct, subs, strict=True)):
        d = delta / len(takers) if i in takers else Fraction(0)
        positions = tuple(j for j, s in enumerate(a.grouping_sets) if s == keys)
        plan = planner(sub, epsilon / k, d, mechanism)
        plans.append(SetPlan(keys, positions, plan))
    return SetsPlan(a, epsilon, delta, tuple(plans))

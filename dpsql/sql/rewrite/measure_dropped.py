"""Measure, in the bounded SQL, what contribution bounding removed (see :mod:`dpsql.sql.bias`).

For each bias target t (a COUNT or one-signed SUM measure), ``_dp_parts`` gets the unit's *raw*
partial in the group (``_dp_r<t>``: COUNT(*), COUNT(v) or SUM(v) of all its rows, v clamped into
the measure's range as for the bounded sum) beside the bounded one; the unit's removed mass in
the group is ``raw - kept`` (``kept`` = the bounded partial if the group is among the unit's G
kept ones, else 0), and its total over groups is a window sum per unit. The query then adds,
with e = CEIL(d / grid) (the removed mass in grid steps, rounded up) and ``before`` the steps
the unit's earlier groups (in its group order) already removed::

    dropped_t  = SUM(LEAST(e, GREATEST(C - before, 0)))      -- a unit counts <= C steps in all
    over_cap_t = SUM(CASE WHEN before <= C AND before + e > C THEN 1 ELSE 0 END)

as the last columns (after the measures, the selection count and the targets' ``outside``
counts), both integers: ``dropped``
moves by at most C steps and ``over_cap`` by at most 1 (L1) when one unit comes or goes, and
``dropped`` * grid >= the removed mass of the units within the cap (exactly it for counts, grid
1). For a non-positive SUM (``sign`` -1) ``d`` is negated first, so every ``e`` is >= 0. The bounded measures are unchanged: they read only the kept partials (``FILTER`` on the
group rank instead of ``WHERE``, so the removed groups reach the window), and with partition
selection a group only removed partials reach is left out (``HAVING``), so the candidate groups are
the same as without this pass.

A target with ``declared`` columns also gets ``outside_t`` (``_dp_x<t>``): its partials hold
``_dp_o<t>`` = BOOL_OR(a row's value lies outside its declared bounds), in the same pass over
the rows; a unit counts in the first of its kept groups (in its group order) where that holds,
``f = keep AND _dp_o<t>`` and ``seen`` the same window sum of ``f`` as ``before``::

    outside_t = COUNT(*) FILTER (WHERE f AND seen = 0)     -- each unit once: L1 sensitivity 1

(without a group order: in each group where ``f`` holds, at most ``split`` groups: L1 <= split).

Where a target's bounded partial is a column of the partials themselves (not scaled into an L1
cap by a window over the unit's groups), ``e`` is computed with the partials, once per (unit,
group), for a kept and for a dropped group (:func:`removed_steps`, capped at C + 1 as an
``integer``: the same columns, the running sums in ``bigint``); the ranking then only picks one of
the two. Otherwise it is computed from ``_dp_r<t>`` after the ranking. Where both are constants
(COUNT(DISTINCT unit): 0 and 1 step), ``before`` follows from the rank alone
(:func:`fixed_before`): no second window over the partials.

Otherwise, with G > 1, ``before`` takes a second window (its own WindowAgg) after the rank's:
``e`` switches from the kept to the dropped steps at rank G, so the groups ranked past G + 1
need the unit's sums over its first G groups, which no frame of the rank's window gives (a frame
is anchored at the partition's ends, a FILTER sees only the row it aggregates, frame offsets are
constants). Measured on the demo's ``GROUP BY purchased_at`` (backend CPU, serial, medians of 15
interleaved runs, load 0.2-1.0; bench/policy_5e50bd1.yaml): 194.7 ms as written; the exact
one-window forms cost more, ``SUM(d)`` less G ``NTH_VALUE(d - k, i)`` 211.1 (G = 5) and the
second window over the units whose dropped steps pass C only (a ``UNION ALL``: the partials are
materialized) 204.3; one sort for both windows (the hash a column, both ordered by it) 191.1 to
196.4, within the noise. The second window costs about 50 ms, the removed-mass columns and the
final aggregation over every partial (not only the kept ones) about 35: without them the SQL is
107 ms (5e50bd1's: 127 ms serial; it ran its sort in a parallel worker, which the planner chose
by 0.2% of its cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.bias import BiasTarget
from dpsql.sql.nodes import POSTGRES, cast, cte_name, table
from dpsql.sql.rewrite.literals import numeric
from dpsql.sql.rewrite.make_total import make_total


def outside_sql(a: Analysis, m: Measure, declared: tuple[str, ...]) -> exp.Expr | None:
    """A row-level condition, true when one of measure ``m``'s ``declared`` columns (a bias
    target's, or a VARIANCE's alarm's: :func:`dpsql.sql.alarms.alarm_measures`) lies outside
    its declared bounds (``c > hi OR c < lo``, NULL for a NULL value); None without any;
    ``FALSE`` when the catalog proves every one of them within its bounds (``a.proven_bounds``:
    :mod:`dpsql.sql.check_bounds`), so no row is outside."""
    conds: list[exp.Expr] = []
    seen: set[str] = set()
    arg = m.arg
    if arg is None or not declared:
        return None
    proven = False
    for c in arg.find_all(exp.Column):
        col = a.column(c)
        if c.name not in declared or col is None or col.bounds is None:
            continue
        if c.name in a.proven_bounds:
            proven = True
            continue
        v = make_total(c, a.column)
        text = v.sql(POSTGRES, copy=False)  # v is fresh: generated in place
        if text in seen:
            continue
        seen.add(text)
        conds += [
            exp.GT(this=v.copy(), expression=numeric(col.hi)),
            exp.LT(this=v.copy(), expression=numeric(col.lo)),
        ]
    if not conds:
        return exp.false() if proven else None
    return exp.Paren(this=exp.or_(*conds))


def never(flag: exp.Expr) -> bool:
    """``flag`` is the constant ``FALSE`` (:func:`outside_sql` of proven columns)."""
    return isinstance(flag, exp.Boolean) and not flag.this


def outside_count(flag: exp.Expr) -> exp.Expr:
    """``COUNT(*) FILTER (WHERE flag)``: the rows (units, groups) where ``flag`` holds (0 for
    the constant ``FALSE``)."""
    if never(flag):
        return exp.Literal.number(0)
    return exp.Filter(this=exp.Count(this=exp.Star()), expression=exp.Where(this=flag.copy()))


def raw_partial_sql(t: BiasTarget, v: exp.Expr | None) -> exp.Expr:
    """A unit's raw partial of target ``t`` in one group (all its rows), made >= 0 by its sign."""
    kind = t.measure.kind
    if kind == "count_rows":
        return exp.Count(this=exp.Star())
    if kind == "count_units":  # the unit is in the group: 1, kept or not
        return exp.Literal.number(1)
    assert v is not None
    if kind == "count_values":
        return exp.Count(this=v.copy())
    total: exp.Expr = exp.Coalesce(this=exp.Sum(this=v.copy()), expressions=[exp.Literal.number(0)])
    if t.base:  # AVG: the values' mass above its base (BiasTarget.base), v >= base
        total = exp.Sub(
            this=total,
            expression=exp.Mul(this=numeric(t.base), expression=exp.Count(this=v.copy())),
        )
    return total if t.sign > 0 else exp.Neg(this=exp.Paren(this=total))


INT4_MAX = 2**31 - 1


def removed_steps(
    t: BiasTarget,
    raw: exp.Expr,
    kept: exp.Expr | None,
    cap: int,
    whole: exp.Expr | None = None,
) -> exp.Expr:
    """A unit's removed mass of target ``t`` in one group, in grid steps (>= 0), capped at
    ``cap`` + 1: ``LEAST(GREATEST(CEIL((raw - kept) / grid), 0), cap + 1)`` as an ``integer``
    (``bigint`` past its range); ``raw``: the unit's raw partial in the group (sign-adjusted:
    :func:`raw_partial_sql`), ``kept``: its bounded partial if the group is kept (None: the group
    is dropped, all of ``raw`` is removed). Written over the partials' aggregates, so it is
    computed once per (unit, group) (:func:`dpsql.sql.rewrite.bound_partials.bound_partials`).

    The cap changes no column :func:`dropped_columns` makes of it, with ``cap`` the C they count
    up to: a unit's earlier groups' capped steps add up to at most C exactly when their steps do,
    and to the same number then (every one of them is <= C); past C both give 0 and "not passing";
    and ``LEAST(e, x)``, ``e > x`` for any x <= C are the same for e and ``LEAST(e, C + 1)``. It
    keeps the running sums over a unit's groups in ``bigint`` (``SUM(integer)``), not NUMERIC.

    ``whole``: a condition on the partial's aggregates under which ``kept`` equals ``raw``
    exactly (:func:`~dpsql.sql.rewrite.bound_partials.kept_whole`: at most R values, the same
    column), written ``CASE WHEN whole THEN 0 ELSE <steps> END``: the same number, 0, without
    the NUMERIC subtraction, division and rounding of a partial that lost nothing (most of
    them; PostgreSQL evaluates a CASE branch only when it is taken).
    """
    d: exp.Expr = raw.copy()
    if kept is not None:
        d = exp.Sub(this=d, expression=exp.Paren(this=kept.copy()))
    if t.grid != 1:
        d = exp.Div(this=exp.Paren(this=d), expression=numeric(t.grid), typed=True)
    e = exp.Greatest(this=exp.Ceil(this=d), expressions=[exp.Literal.number(0)])
    capped = exp.Least(this=e, expressions=[exp.Literal.number(cap + 1)])
    steps = cast(capped, "int" if cap + 1 <= INT4_MAX else "bigint")
    if whole is None:
        return steps
    return exp.Case(ifs=[exp.If(this=whole.copy(), true=exp.Literal.number(0))], default=steps)


def dropped_columns(
    t: BiasTarget, e: exp.Expr, before: exp.Expr | None
) -> tuple[exp.Expr, exp.Expr]:
    """The two per-group aggregates of target ``t`` from a unit's removed mass ``e`` in the group
    (in grid steps, >= 0) and what its earlier groups already removed (``before``; None: one group
    per unit). A unit counts at most ``t.cap_steps`` steps over all its groups, and is counted
    once, in the group where it passes the cap."""
    cap = exp.Literal.number(t.group_cap_steps if before is None else t.cap_steps)
    zero = exp.Literal.number(0)
    if before is None:
        counted: exp.Expr = exp.Least(this=e.copy(), expressions=[cap.copy()])
        passes: exp.Expr = exp.GT(this=e.copy(), expression=cap.copy())
    else:
        room = exp.Greatest(this=exp.Sub(this=cap.copy(), expression=before.copy()),
                            expressions=[zero.copy()])  # fmt: skip
        counted = exp.Least(this=e.copy(), expressions=[room])
        passes = exp.and_(
            exp.LTE(this=before.copy(), expression=cap.copy()),
            exp.GT(this=exp.Add(this=before.copy(), expression=e.copy()), expression=cap.copy()),
            copy=False,
        )
    over = exp.Case(ifs=[exp.If(this=passes, true=exp.Literal.number(1))], default=zero.copy())
    return (
        exp.Coalesce(this=exp.Sum(this=counted), expressions=[zero.copy()]),
        exp.Coalesce(this=exp.Sum(this=over), expressions=[zero.copy()]),
    )


def kept_only(node: exp.Expr, keep: exp.Expr | None) -> exp.Expr:
    """An aggregate over the kept partials only (``keep``: the group-rank condition, if any)."""
    if keep is None:
        return node
    if isinstance(node, exp.Coalesce):  # COALESCE(SUM(p), 0): filter the inner aggregate
        node.set("this", exp.Filter(this=node.this, expression=exp.Where(this=keep.copy())))
        return node
    return exp.Filter(this=node, expression=exp.Where(this=keep.copy()))


def measure_dropped(
    q: exp.Select,
    source: str,
    targets: tuple[BiasTarget, ...],
    kept: dict[int, str],
    keep: exp.Expr | None,
    order: Sequence[exp.Expr] | None,
    selecting: bool,
    outside: dict[int, str] | None = None,
    steps_of: dict[int, tuple[str, str | None]] | None = None,
    fixed: frozenset[int] = frozenset(),
    first_only: frozenset[int] = frozenset(),
) -> exp.Select:
    """Add the removed-mass columns to the final SELECT ``q`` reading ``source`` (the CTE of
    ranked or plain partials, which holds ``_dp_r<i>``; ``kept[i]``: target i's bounded partial
    column; ``outside[i]``: its BOOL_OR of values outside the declared bounds). ``order``: the
    order of a unit's groups (None: one group per unit). ``q``'s measures must already read
    kept partials only (:func:`kept_only`). ``steps_of[i]``: the partials' columns holding
    target i's :func:`removed_steps` if the group is kept and if it is dropped (None without
    a group rank), computed with the partials; target i then needs no ``_dp_r<i>``. ``fixed``:
    the targets among those whose two step columns are constants (:func:`constant_steps`):
    their ``before`` is :func:`fixed_before`, no window. ``first_only``: with G = 1, the targets
    whose rank's window also wrote ``_dp_sc<i>`` (:func:`first_kept_window`): their ``before``
    is 0 in the kept group, ``_dp_sc<i>`` after it."""
    cols: list[exp.Expr] = []
    steps: list[exp.Expr] = []
    befores: list[exp.Expr] = []
    xcols: list[exp.Expr] = []
    for i, flag in (outside or {}).items():
        f: exp.Expr = exp.column(flag)
        if keep is not None:
            f = exp.and_(keep.copy(), f, copy=False)
        one = exp.Case(ifs=[exp.If(this=f, true=exp.Literal.number(1))],
                       default=exp.Literal.number(0))  # fmt: skip
        steps.append(exp.alias_(one, f"_dp_f{i}", copy=False))
        first: exp.Expr = exp.EQ(this=exp.column(f"_dp_f{i}"), expression=exp.Literal.number(1))
        if order is not None and not _one_group(keep):
            # (with G = 1 a unit's only kept group is its first: no flag before it)
            fc = _before(exp.column(f"_dp_f{i}"), order)
            befores.append(exp.alias_(fc, f"_dp_fc{i}", copy=False))
            none = exp.EQ(this=exp.column(f"_dp_fc{i}"), expression=exp.Literal.number(0))
            first = exp.and_(first, none, copy=False)
        xcols.append(exp.alias_(outside_count(first), f"_dp_x{i}", copy=False))
    for t in targets:
        ecol = exp.column(f"_dp_e{t.index}")
        precomputed = (steps_of or {}).get(t.index)
        if precomputed is not None:
            if_kept, if_dropped = precomputed
            step: exp.Expr = exp.column(if_kept)
            if keep is not None:
                assert if_dropped is not None
                step = exp.Case(ifs=[exp.If(this=keep.copy(), true=step)],
                                default=exp.column(if_dropped))  # fmt: skip
            steps.append(exp.alias_(step, ecol.name, copy=False))
        else:
            steps.append(exp.alias_(cast(_steps(t, kept, keep), "bigint"), ecol.name, copy=False))
        before = None
        if order is not None:
            if t.index in fixed and precomputed is not None and keep is not None:
                c = fixed_before(precomputed, keep)
            elif t.index in first_only:
                first = exp.EQ(this=exp.column("_dp_gr"), expression=exp.Literal.number(1))
                c = exp.Case(ifs=[exp.If(this=first, true=exp.Literal.number(0))],
                             default=exp.column(f"_dp_sc{t.index}"))  # fmt: skip
            else:
                c = _before(ecol, order)
            befores.append(exp.alias_(c, f"_dp_c{t.index}", copy=False))
            before = exp.column(f"_dp_c{t.index}")
        got = dropped_columns(t, ecol, before)
        cols += [
            exp.alias_(got[0], f"_dp_b{t.index}", copy=False),
            exp.alias_(got[1], f"_dp_k{t.index}", copy=False),
        ]
    removed = exp.select(exp.Star(), *steps).from_(table(source), copy=False)
    if befores:
        sub = removed.subquery("_dp_removed", copy=False)
        removed = exp.select(exp.Star(), *befores).from_(sub, copy=False)
        # No OFFSET 0 fence here even where no window is left (332a303, 109c78b added one: it
        # kept PostgreSQL from computing e and before again in each aggregate, ~5 ms): a Citus
        # coordinator plans a subquery with OFFSET on itself (a Distributed Subplan pulling every
        # partial to the coordinator), so the per-unit work would leave the workers
        # (tests/citus/test_citus.py::test_per_unit_work_runs_on_the_workers).
    q = q.with_(cte_name("_dp_dropped"), as_=removed, copy=False)
    q.set("from_", exp.From(this=table("_dp_dropped")))
    q.set("expressions", [*q.expressions, *xcols, *cols])
    if selecting and keep is not None:
        kept_units = exp.Filter(this=exp.Count(this=exp.Star()),
                                expression=exp.Where(this=keep.copy()))  # fmt: skip
        q = q.having(exp.GT(this=kept_units, expression=exp.Literal.number(0)), copy=False)
    return q


def kept_partial(t: BiasTarget, partial: Callable[[int], exp.Expr] | None) -> exp.Expr:
    """Target ``t``'s bounded partial in a kept group, made >= 0 by its sign like its raw
    partial: ``partial(i)`` is measure i's bounded partial (None: COUNT(DISTINCT unit), whose
    partial is 1); AVG's plain sum is its centred sum + mid · its count (less base · its count:
    the mass above :attr:`BiasTarget.base`)."""
    p: exp.Expr = exp.Literal.number(1) if partial is None else partial(t.index)
    if t.count_index is not None:  # AVG: the kept plain sum = centred + mid · count
        assert partial is not None
        mid = exp.Mul(this=numeric(t.measure.mid - t.base), expression=partial(t.count_index))
        p = exp.Add(this=p, expression=mid)
    return exp.Neg(this=p) if t.sign < 0 else p


def _steps(t: BiasTarget, kept: dict[int, str], keep: exp.Expr | None) -> exp.Expr:
    """``GREATEST(CEIL((_dp_r<t> - kept) / grid), 0)``: the removed steps of target ``t`` from
    the columns of ranked partials (``kept``: its bounded partial, 0 in a dropped group)."""
    p = kept_partial(t, None if t.index not in kept else lambda i: exp.column(kept[i]))
    if keep is not None:
        p = exp.Case(ifs=[exp.If(this=keep.copy(), true=p)], default=exp.Literal.number(0))
    d: exp.Expr = exp.Sub(this=exp.column(f"_dp_r{t.index}"), expression=exp.Paren(this=p))
    if t.grid != 1:
        d = exp.Div(this=exp.Paren(this=d), expression=numeric(t.grid), typed=True)
    return exp.Greatest(this=exp.Ceil(this=d), expressions=[exp.Literal.number(0)])


_CONSTANT = (exp.Literal, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Ceil,
             exp.Greatest, exp.Least, exp.Cast, exp.DataType)  # fmt: skip


def constant_steps(*steps: exp.Expr) -> bool:
    """Every one of ``steps`` (:func:`removed_steps`) is a constant: arithmetic on literals
    only, the same number on every (unit, group). COUNT(DISTINCT unit)'s are (raw 1, kept 1:
    0 steps in a kept group, 1 in a dropped one)."""
    return all(isinstance(n, _CONSTANT) for s in steps for n in s.walk())


def fixed_before(steps: tuple[str, str | None], keep: exp.Expr) -> exp.Expr:
    """What a unit's earlier groups removed (:func:`_before`) when its steps are the constants
    k in a kept group and d in a dropped one (:func:`constant_steps`; ``steps``: their columns;
    ``keep``: ``_dp_gr <= G``): the group ranked r has r - 1 earlier groups, min(r - 1, G) of
    them kept, so ``before`` = k · LEAST(r - 1, G) + d · GREATEST(r - 1 - G, 0), the running sum
    without its window (same number, same bigint type: integer steps times the bigint rank)."""
    if_kept, if_dropped = steps
    assert if_dropped is not None and isinstance(keep, exp.LTE)
    g = keep.expression
    earlier = exp.Sub(this=exp.column("_dp_gr"), expression=exp.Literal.number(1))
    kept = exp.Least(this=earlier.copy(), expressions=[g.copy()])
    past = exp.Greatest(this=exp.Sub(this=earlier, expression=g.copy()),
                        expressions=[exp.Literal.number(0)])  # fmt: skip
    return exp.Add(
        this=exp.Mul(this=exp.column(if_kept), expression=kept),
        expression=exp.Mul(this=exp.column(if_dropped), expression=past),
    )


def _one_group(keep: exp.Expr | None) -> bool:
    """``keep`` is ``_dp_gr <= 1``: a unit keeps one group, its first."""
    return isinstance(keep, exp.LTE) and keep.expression == exp.Literal.number(1)


def first_kept_window(
    steps: tuple[str, str | None], order: Sequence[exp.Expr], index: int
) -> exp.Expr:
    """With G = 1, what a unit's groups before the r-th (r >= 2) removed, computed by the rank's
    own window (``steps``: the kept and dropped step columns k, d; ``order``: the rank's)::

        _dp_sc<i> = COALESCE(SUM(d) OVER w, 0) - FIRST_VALUE(d - k) OVER w
        w = (PARTITION BY _dp_unit ORDER BY <order> ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)

    The earlier groups of the r-th are the first (kept: k) and the 2nd to (r-1)-th (dropped: d),
    so ``before`` = k_1 + d_2 + ... + d_(r-1) = (d_1 + ... + d_(r-1)) - (d_1 - k_1): the running
    sum after the rank (:func:`_before`) with the same number and type (bigint), in the rank's
    window, with no second window; the first group's ``before`` is 0 (measure_dropped's CASE)."""
    if_kept, if_dropped = steps
    assert if_dropped is not None
    w = {
        "partition_by": [exp.column("_dp_unit")],
        "order": exp.Order(expressions=[exp.Ordered(this=o.copy()) for o in order]),
    }
    total = exp.Coalesce(this=exp.Window(this=exp.Sum(this=exp.column(if_dropped)),
                                         spec=earlier_rows(), **w),
                         expressions=[exp.Literal.number(0)])  # fmt: skip
    lost = exp.Sub(this=exp.column(if_dropped), expression=exp.column(if_kept))
    first = exp.Window(this=exp.FirstValue(this=lost), spec=earlier_rows(), **w)
    return exp.alias_(exp.Sub(this=total, expression=first), f"_dp_sc{index}", copy=False)


def earlier_rows() -> exp.WindowSpec:
    """``ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING``: a unit's earlier groups."""
    return exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING",
                          end=exp.Literal.number(1), end_side="PRECEDING")  # fmt: skip


def _before(col: exp.Expr, order: Sequence[exp.Expr]) -> exp.Expr:
    """``COALESCE(SUM(col) OVER (PARTITION BY _dp_unit ORDER BY <order> ROWS BETWEEN UNBOUNDED
    PRECEDING AND 1 PRECEDING), 0)``: ``col`` over the unit's earlier groups."""
    w = exp.Window(
        this=exp.Sum(this=col.copy()),
        partition_by=[exp.column("_dp_unit")],
        order=exp.Order(expressions=[exp.Ordered(this=o.copy()) for o in order]),
        spec=earlier_rows(),
    )
    return exp.Coalesce(this=w, expressions=[exp.Literal.number(0)])

"""Bound contributions on per-unit partial aggregates (decomposable measures only).

COUNT(*), COUNT(x), COUNT(DISTINCT unit), SUM and the centered sums behind AVG/VAR/STDDEV add up
over rows, so each privacy unit's rows in one group are first summarized by one *partial* row,
and groups are chosen per unit on those (far fewer) rows::

    WITH _dp_rows AS (<the query's rows: _dp_unit, _dp_g*, _dp_v*>),
         _dp_parts AS (SELECT _dp_unit, _dp_g*, <partial_i> AS _dp_p<i>
                       FROM _dp_rows GROUP BY _dp_unit, _dp_g*),
         _dp_bounded AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY _dp_unit
                             ORDER BY hashtextextended(salt|unit|keys, 0), _dp_g*) AS _dp_gr
                         FROM _dp_parts)
    SELECT _dp_g*, COALESCE(SUM(_dp_p<i>), 0) AS _dp_m<i>
    FROM _dp_bounded WHERE _dp_gr <= max_groups_per_unit GROUP BY _dp_g*

The rows are aggregated once into partials (nothing in it is volatile: parallel safe); only the
partials, one per (unit, group), are ranked, by a keyed hash of (unit, keys) with the keys
themselves breaking ties, so the choice is a function of the unit's own groups and the
statement's salt (docs/mechanisms.md, "Choosing rows and groups"). With a rank the rows are
aggregated in (unit, keys) order (:func:`_rows_source`: the rank's sort is then one of each
unit's few partials); without GROUP BY, or when the declared keys leave at most G groups, there
is nothing to choose (``needs_group_rank``), no window, and the aggregation is hashed.

Partials of one unit in one group, with R = max_rows_per_unit, n = COUNT(v) its non-NULL values
(n = COUNT(*) for COUNT(*)), and each row's summand ``b`` in [a, c] (``v``, ``v - mid`` or
``(v - mid)^2`` for a value ``v`` clamped into [lo, hi]):

* COUNT(*), COUNT(v): ``LEAST(n, R)`` -- exactly what keeping R rows gave;
* COUNT(DISTINCT unit): 1 (one partial row per unit and group);
* sums: ``SUM(b)`` when n <= R, else ``SUM(b) * R / n`` (rounded to an integer for integer
  sums), then clamped into [R·min(a, 0), R·max(c, 0)]. A unit with more than R values thus counts
  as R values at its own mean: the expectation of keeping R of its rows at random (the old plan),
  without the sampling noise, and consistent with the LEAST(n, R) count, so AVG stays the mean of
  the kept values. The clamp is a no-op for honest partials and makes the bound hold whatever the
  arithmetic does.

An L1 cap over groups (``Measure.total`` = L): :mod:`dpsql.sql.rewrite.l1_cap` scales or apportions
the unit's kept partials of such a measure so that they add up to at most L in absolute value,
each at most its unscaled self in magnitude, with its sign; a function of the unit's own
partials and the salt: the argument below holds with min(G·R·c, L) in L1 (and L2).

Sensitivity (the plan's, unchanged): neighbouring databases differ by all rows of one unit. That
unit has at most one partial row per group and keeps at most G = max_groups_per_unit of them (the
ranking is a function of the unit's own groups only); every other unit's partials and choices are
identical in both databases. Each kept partial of measure m lies in an interval containing 0 of
magnitude at most R·c_m, where c_m = ``Measure.per_row()`` (1 for counts; max(|lo|, |hi|) for SUM;
(hi - lo)/2 and ((hi - lo)/2)^2 for the centered sums), and 1 for COUNT(DISTINCT unit). So a
group's total moves by at most R·c_m (Linf), the vector of all groups by at most G·R·c_m (L1) and
sqrt(G)·R·c_m (L2): the bounds :mod:`dpsql.sql.plan` states for row truncation, which keep
holding. Integer sums stay integers (rounded partials), so the release grid of 1 needs no slack.
"""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Measure, needs_group_rank
from dpsql.sql.bias import BiasTarget, bias_targets
from dpsql.sql.nodes import POSTGRES, cte_name, table
from dpsql.sql.rewrite import l1_cap
from dpsql.sql.rewrite.keyed_hash import group_hash
from dpsql.sql.rewrite.literals import numeric
from dpsql.sql.rewrite.measure_dropped import (
    constant_steps,
    earlier_rows,
    first_kept_window,
    kept_only,
    kept_partial,
    measure_dropped,
    raw_partial_sql,
    removed_steps,
)

__all__ = ["bound_partials", "group_hash", "partial_sql", "sum_total"]


def _least(node: exp.Expr, r: int) -> exp.Expr:
    return exp.Least(this=node, expressions=[exp.Literal.number(r)])


def _summand_range(m: Measure) -> tuple[Fraction, Fraction]:
    """The range [a, c] of a sum measure's per-row summand (``v``, ``v - mid``, ``(v - mid)^2``)."""
    if m.kind == "sum":
        return m.lo, m.hi
    half = (m.hi - m.lo) / 2
    if m.kind == "sum_centered":
        return -half, half
    return Fraction(0), half * half


def sum_total(m: Measure, v: exp.Expr, n: exp.Expr | None = None) -> exp.Expr:
    """``SUM`` of a sum measure's per-row summand over NUMERIC values ``v`` (NULL when no value);
    ``n``: a column non-NULL exactly where ``v`` is (``COUNT(n)`` stands for ``COUNT(v)``: see
    :func:`~dpsql.sql.rewrite.row_values.count_column`).

    The centered sums are written from the plain sums, which PostgreSQL computes once however
    many measures (and the removed-mass partials) read them, with no per-row subtraction::

        SUM(v - mid)       = SUM(v) - mid * COUNT(v)
        SUM((v - mid)^2)   = SUM(v * v) - 2 * mid * SUM(v) + mid^2 * COUNT(v)

    exactly: ``v`` is NUMERIC (clamped: :func:`~dpsql.sql.rewrite.clamp_values.clamp`) and
    NUMERIC addition and multiplication do not round. With no non-NULL value both sides are NULL.
    """
    s = exp.Sum(this=v.copy())
    if m.kind == "sum":
        return s
    count = exp.Count(this=(v if n is None else n).copy())
    shift = exp.Mul(this=numeric(m.mid), expression=count)
    if m.kind == "sum_centered":
        return exp.Paren(this=exp.Sub(this=s, expression=shift))
    squares = exp.Sum(this=exp.Mul(this=v.copy(), expression=v.copy()))
    linear = exp.Mul(this=numeric(2 * m.mid), expression=s)
    constant = exp.Mul(this=numeric(m.mid * m.mid), expression=count.copy())
    return exp.Paren(
        this=exp.Add(this=exp.Sub(this=squares, expression=linear), expression=constant)
    )


def partial_sql(
    m: Measure, v: exp.Expr | None, r: int, counted: exp.Expr | None = None
) -> exp.Expr | None:
    """One unit's partial of measure ``m`` in one group (None for COUNT(DISTINCT unit));
    ``counted``: a column non-NULL exactly where ``v`` is, counted instead of ``v``
    (:func:`sum_total`)."""
    if m.kind == "count_units":
        return None
    if m.kind == "count_rows":
        return _least(exp.Count(this=exp.Star()), r)
    assert v is not None
    n = exp.Count(this=(v if counted is None else counted).copy())
    if m.kind == "count_values":
        return _least(n, r)
    a, c = _summand_range(m)
    total = sum_total(m, v, counted)
    scaled: exp.Expr = exp.Div(
        this=exp.Mul(this=total.copy(), expression=exp.Literal.number(r)),
        # n > R >= 1 in this branch; NULLIF keeps the division total whatever the evaluation order
        expression=exp.Nullif(this=n.copy(), expression=exp.Literal.number(0)),
        typed=True,  # NUMERIC / bigint: exact PostgreSQL division, no cast to float
    )
    if m.integral:
        scaled = exp.Round(this=scaled)
    kept = exp.Case(
        ifs=[exp.If(this=exp.LTE(this=n, expression=exp.Literal.number(r)), true=total)],
        default=scaled,
    )
    part = exp.Coalesce(this=kept, expressions=[exp.Literal.number(0)])
    lo, hi = r * min(a, Fraction(0)), r * max(c, Fraction(0))
    return exp.Least(
        this=exp.Greatest(this=part, expressions=[numeric(lo)]), expressions=[numeric(hi)]
    )


def _count_of(m: Measure, v: exp.Expr | None, counted: exp.Expr | None) -> exp.Expr | None:
    """The n of :func:`partial_sql`'s measure ``m``: ``COUNT(*)`` or ``COUNT(counted or v)``."""
    if m.kind == "count_rows":
        return exp.Count(this=exp.Star())
    if m.kind not in ("count_values", "sum", "sum_centered") or v is None:
        return None
    return exp.Count(this=(v if counted is None else counted).copy())


def kept_whole(
    a: Analysis,
    t: BiasTarget,
    values: list[exp.Expr | None],
    counts: list[exp.Expr | None] | None,
    raw_values: dict[int, exp.Expr] | None,
) -> exp.Expr | None:
    """``n <= R``: a condition on a partial's aggregates under which bias target ``t``'s kept
    partial in a kept group equals its raw partial exactly, so it lost nothing (its removed
    steps are 0: :func:`~dpsql.sql.rewrite.measure_dropped.removed_steps`); None when that
    can't be said of the SQL alone.

    With n <= R values a count's partial ``LEAST(n, R)`` is n, its raw partial; a SUM's partial
    is ``SUM(b)`` (the branch n <= R) clamped into [R·min(a, 0), R·max(c, 0)], and n summands in
    [a, c] add up to a number in [n·a, n·c], inside that range: the clamp leaves it, and the
    raw partial is that same ``SUM(v)`` (NUMERIC, exact; rounding only in the n > R branch);
    AVG's (centred sum + mid · count, :func:`kept_partial`) is ``SUM(v) - mid·n + mid·n`` when
    its count counts the same column. Only when the raw partial reads the measure's own value
    column (not a wider declared clamp: ``raw_values``, ``clamp: auto``) and n counts what the
    partial counts (a raw column of the same SQL: the chosen clamp is the declared range)."""
    m, v = a.measures[t.index], values[t.index]
    raw = (raw_values or {}).get(t.index)
    if raw is not None and (v is None or raw.sql(POSTGRES) != v.sql(POSTGRES)):
        return None  # clamped-off mass is removed too, whatever n
    n = _count_of(m, v, counts[t.index] if counts else None)
    if n is None:
        return None
    if t.count_index is not None:  # AVG: its count must count the same column
        c = a.measures[t.count_index]
        nc = _count_of(c, values[t.count_index], counts[t.count_index] if counts else None)
        if nc is None or nc.sql(POSTGRES) != n.sql(POSTGRES):
            return None
    return exp.LTE(this=n, expression=exp.Literal.number(a.max_rows))


_COUNTS = ("count_rows", "count_values", "count_units")


def sorted_rows(a: Analysis, rank: bool) -> bool:
    """The partials are aggregated from rows sorted by (unit, keys) (:func:`_rows_source`): with
    a group rank, or with GROUP BY keys and a measure that sums values (SUM, AVG, VARIANCE,
    STDDEV: a NUMERIC sum's transition state in every (unit, group) of a hash table). Without
    a rank there is no later sort to share; the sorted aggregation still wins where each
    (unit, group) holds a NUMERIC sum, and loses where it holds counts only (small states: the
    hash table is cheaper than the sort) or where the WHERE clause leaves one key of a GROUP BY
    column (``category = 'books' ... GROUP BY category, region``: PostgreSQL reads the key as
    a constant and, on the fewer rows left, aggregates the sorted rows in a hash table anyway).
    Measured on the demo (backend CPU, medians of 11-15 interleaved runs,
    bench/policy_5e50bd1.yaml, no parallel workers, load 14-20): category, COUNT(*),
    SUM(amount) 139.9 -> 126.2 ms (0.90); category, AVG(amount), STDDEV(quantity) 303.1 -> 224.1
    (0.74); region, AVG(quantity) 163.6 -> 142.3 (0.87); category, SUM(quantity) WHERE amount >
    100 63.5 -> 56.3 (0.89); region, SUM(amount) WHERE category = 'books' 41.7 -> 35.9 (0.86);
    category, COUNT(DISTINCT user_id), SUM(amount) 136.9 -> 124.8 (0.91); and with work_mem at
    64MB (no spill to disk) 0.76 and 0.88 for the first two. Left hashed: region, COUNT(*)
    (sorted 1.16 to 1.25), category, region, SUM(amount) WHERE category = 'books' (sorted 1.18),
    and without GROUP BY (one group per unit: AVG(amount) WHERE quantity > 2 is 7% faster
    hashed, 2ca07d6)."""
    if rank:
        return True
    keys = a.group_keys
    if not keys or any(k.domain_size == 1 for k in keys):
        return False
    return any(m.kind not in _COUNTS for m in a.measures)


def _rows_source(ordered: bool, keys: list[exp.Column]) -> exp.Expr:
    """What ``_dp_parts`` aggregates: ``_dp_rows``, or when ``ordered`` (:func:`sorted_rows`)
    ``(SELECT * FROM _dp_rows ORDER BY _dp_unit, _dp_g*) AS _dp_sorted``, its rows sorted by the
    partials' own grouping keys, so PostgreSQL aggregates them in order (a sorted
    GroupAggregate: its partials come out ordered by unit, and a group rank's sort by (unit,
    hash, keys) is an incremental sort of each unit's few partials) instead of a hash table of
    every (unit, group) (about 120,000 entries for the demo's GROUP BY purchased_at, spilled to
    disk past work_mem) followed by a full sort of the partials. A plan choice, not a result:
    the GROUP BY, and so the partials, are the same (PostgreSQL misestimates the number of
    groups of (unit, keys) by ~10x and so would choose the hash table; it keeps a subquery's
    ORDER BY). Measured on the demo with a rank (backend CPU, median of 11 interleaved runs):
    GROUP BY purchased_at 247 -> 211 ms, by date_trunc('month') 548 -> 486 ms, by category,
    region 438 -> 380 ms."""
    rows = table("_dp_rows")
    if not ordered:
        return rows
    order = [exp.Ordered(this=k.copy()) for k in keys]
    ordered_rows = exp.select(exp.Star()).from_(rows, copy=False).order_by(*order, copy=False)
    return ordered_rows.subquery("_dp_sorted", copy=False)


def bound_partials(
    a: Analysis,
    rows: exp.Select,
    values: list[exp.Expr | None],
    salt: str,
    raw_values: dict[int, exp.Expr] | None = None,
    counts: list[exp.Expr | None] | None = None,
    outside: dict[int, exp.Expr] | None = None,
    *,
    steps_with_partials: bool = True,
) -> exp.Select:
    """The private SQL for decomposable measures (``values[i]``: measure i's value column;
    ``raw_values[i]``: the raw value column of bias target i when it differs; ``counts[i]``: a
    column non-NULL exactly where ``values[i]`` is, cheaper to count: :func:`sum_total`;
    ``outside[i]``: a row column true when bias target i's value lies outside its declared
    bounds). ``steps_with_partials``: compute the removed steps of the targets that allow it
    with the partials (False: all of them after the ranking, as before; the same columns, for
    tests that compare the two)."""
    unit = exp.column("_dp_unit")
    gcols = [exp.column(f"_dp_g{i}") for i in range(len(a.group_keys))]
    targets = bias_targets(a)
    rank = needs_group_rank(a)
    keep = (
        exp.LTE(this=exp.column("_dp_gr"), expression=exp.Literal.number(a.max_groups))
        if rank
        else None
    )
    parts: dict[str, exp.Expr] = {}
    kept: dict[int, str] = {}
    measures: list[exp.Expr] = []
    scaled: list[exp.Expr] = []  # capped measures' partials scaled into their L1 cap
    running: list[exp.Expr] = []  # integer capped measures' running sums (apportioned)
    apportioned: list[exp.Expr] = []
    # a unit's groups in the order of its group rank (the salted hash of (unit, keys), then the
    # keys): the rank's window and the apportionment's running sums share its sort
    order: list[exp.Expr] = []
    if gcols:
        hashed = group_hash(salt, unit, gcols, a.hashed_keys, a.unit_type, a.hashed_key_types)
        order = [hashed, *[g.copy() for g in gcols]]
    for i, m in enumerate(a.measures):
        p = partial_sql(m, values[i], a.max_rows, counts[i] if counts else None)
        if p is None:
            out: exp.Expr = exp.Count(this=exp.Star())
        else:
            key = p.sql(POSTGRES, copy=False)  # p is fresh: generated in place
            if key not in parts:
                parts[key] = exp.alias_(p, f"_dp_p{len(parts)}", copy=False)
            kept[i] = parts[key].alias
            if l1_cap.capped(m) and m.integral:
                run, total, share = l1_cap.apportioned(
                    m, parts[key].alias, i, keep, order, l1_cap.fits_bigint(a, m)
                )
                if not apportioned:  # the first: the unit offset once for all
                    (running if rank else scaled).append(l1_cap.offset_column(salt, a.unit_type))
                (running if rank else scaled).append(run)
                scaled.append(total)
                apportioned.append(exp.alias_(share, f"_dp_s{i}", copy=False))
                kept[i] = f"_dp_s{i}"
            elif l1_cap.capped(m):
                scaled.append(
                    exp.alias_(l1_cap.scaled(m, parts[key].alias, keep), f"_dp_s{i}", copy=False)
                )
                kept[i] = f"_dp_s{i}"
            col = exp.column(kept[i])
            out = exp.Coalesce(this=exp.Sum(this=col), expressions=[exp.Literal.number(0)])
        if targets or outside:
            out = kept_only(out, keep)
        measures.append(exp.alias_(out, f"_dp_m{i}", copy=False))
    raw_of = {**{t.index: values[t.index] for t in targets}, **(raw_values or {})}
    # A target whose bounded partials are the partials themselves (not scaled into an L1 cap
    # by a window) has its removed steps computed with them, once per (unit, group), if its
    # group is kept and if it is dropped (measure_dropped.removed_steps); the others from
    # their raw partial ``_dp_r<i>`` after the ranking.
    exprs = {alias.alias: alias.this for alias in parts.values()}
    steps_of: dict[int, tuple[str, str | None]] = {}
    fixed: set[int] = set()  # targets whose steps are constants: before without a window
    steps: list[exp.Expr] = []
    raws: list[exp.Expr] = []
    for t in targets:
        raw = raw_partial_sql(t, raw_of[t.index])
        uses = [i for i in (t.index, t.count_index) if i is not None and i in kept]
        in_cap = any(kept[i] not in exprs for i in uses)  # scaled into an L1 cap: after the window
        if in_cap or not steps_with_partials:
            raws.append(exp.alias_(raw, f"_dp_r{t.index}", copy=False))
            continue
        cap = t.cap_steps if rank else t.group_cap_steps
        of_kept = None if t.index not in kept else lambda i: exprs[kept[i]]
        names = (f"_dp_ek{t.index}", f"_dp_ed{t.index}" if rank else None)
        whole = kept_whole(a, t, values, counts, raw_values)
        if_kept = removed_steps(t, raw, kept_partial(t, of_kept), cap, whole)
        steps.append(exp.alias_(if_kept, names[0], copy=False))
        if names[1] is not None:
            if_dropped = removed_steps(t, raw, None, cap)
            if constant_steps(if_kept, if_dropped):
                fixed.add(t.index)
            steps.append(exp.alias_(if_dropped, names[1], copy=False))
        steps_of[t.index] = names
    raws += steps
    # the outside flags: the bias targets', then the VARIANCE alarms' (dpsql.sql.bias), in the
    # order of ``outside`` (their _dp_x columns' order: dpsql.execute.noise)
    flags = {i: f"_dp_o{i}" for i in (outside or {})}
    raws += [
        exp.alias_(exp.LogicalOr(this=(outside or {})[i].copy()), c, copy=False)
        for i, c in flags.items()
    ]
    # every node below is fresh (built here or handed over by the caller): no builder copies
    q = exp.select(*[g.copy() for g in gcols], *measures)
    q = q.with_(cte_name("_dp_rows"), as_=rows, copy=False)
    keys = [unit, *gcols]
    partial = exp.select(*[k.copy() for k in keys], *parts.values(), *raws)
    partial = partial.from_(_rows_source(sorted_rows(a, rank), keys), copy=False)
    partial = partial.group_by(*[k.copy() for k in keys], copy=False)
    q = q.with_(cte_name("_dp_parts"), as_=partial, copy=False)
    src = "_dp_parts"
    first_only: dict[int, exp.Expr] = {}
    if rank:
        # Groups are ranked per unit on the partials (one row per unit and group), not on the
        # rows: the hash is computed, and the window sorts, once per partial.
        # With G = 1 the targets' before is computed in this window (first_kept_window): the
        # rank takes its frame (ROW_NUMBER ignores it) so that PostgreSQL computes all in one
        # WindowAgg
        first_only = {
            i: first_kept_window(names, order, i)
            for i, names in steps_of.items()
            if a.max_groups == 1 and i not in fixed
        }
        ranking = exp.Window(
            this=exp.RowNumber(),
            partition_by=[unit.copy()],
            order=exp.Order(expressions=[exp.Ordered(this=t.copy()) for t in order]),
            spec=earlier_rows() if first_only else None,
        )
        bounded = exp.select(
            exp.Star(), exp.alias_(ranking, "_dp_gr", copy=False), *running, *first_only.values()
        )
        bounded = bounded.from_(table(src), copy=False)
        q = q.with_(cte_name("_dp_bounded"), as_=bounded, copy=False)
        src = "_dp_bounded"
    if scaled:
        scaling = exp.select(exp.Star(), *scaled).from_(table(src), copy=False)
        q = q.with_(cte_name("_dp_scaled"), as_=scaling, copy=False)
        src = "_dp_scaled"
    if apportioned:
        keeping = exp.select(exp.Star(), *apportioned).from_(table(src), copy=False)
        q = q.with_(cte_name("_dp_apportioned"), as_=keeping, copy=False)
        src = "_dp_apportioned"
    q = q.from_(table(src), copy=False)
    if targets or flags:
        # without ranking, declared keys leave <= G groups: each target splits its cap over
        # them (no window)
        by_rank = [exp.column("_dp_gr")] if rank else None
        selecting = rank and a.needs_selection
        q = measure_dropped(
            q, src, targets, kept, keep, by_rank, selecting, flags, steps_of, frozenset(fixed),
            frozenset(first_only),
        )  # fmt: skip
    elif keep is not None:
        q = q.where(keep, copy=False)
    return q.group_by(*[g.copy() for g in gcols], copy=False) if gcols else q

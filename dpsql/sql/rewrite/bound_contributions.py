"""Bound each privacy unit's contribution and aggregate per group inside PostgreSQL.

When every measure adds up over rows (COUNT, SUM, AVG, VAR, STDDEV, COUNT(DISTINCT unit)), the
bounding runs on one partial aggregate per (unit, group): see
:mod:`dpsql.sql.rewrite.bound_partials`. Otherwise (COUNT(DISTINCT x), quantiles, MIN/MAX, mode)
it keeps rows, and the query becomes::

    WITH _dp_rows AS (SELECT unit AS _dp_unit, <group keys> AS _dp_g*, <values> AS _dp_v*
                      FROM t WHERE <filter>),
         _dp_bounded AS (SELECT *,
             ROW_NUMBER() OVER (PARTITION BY _dp_unit, _dp_h, _dp_g*
                                ORDER BY hashtextextended(salt | _dp_rt, 0), _dp_rt) AS _dp_rn,
             DENSE_RANK() OVER (PARTITION BY _dp_unit ORDER BY _dp_h, _dp_g*) AS _dp_gr
           FROM (SELECT *, ROW(_dp_unit, _dp_g*, _dp_v*)::text AS _dp_rt,
                           hashtextextended(salt | unit | keys, 0) AS _dp_h FROM _dp_rows))
    SELECT _dp_g*, <measures> FROM _dp_bounded
    WHERE _dp_rn <= max_rows_per_unit AND _dp_gr <= max_groups_per_unit GROUP BY _dp_g*

so each unit keeps at most ``max_rows_per_unit`` rows in each group and touches at most
``max_groups_per_unit`` groups, both chosen by keyed hashes (:mod:`dpsql.sql.rewrite.keyed_hash`:
a function of the unit's own rows and the statement's salt, never ``random()`` or ``ctid``), ties
broken by the row's or group's own values (skipped when the declared keys leave fewer groups
than ``max_groups_per_unit``). ``_dp_h`` is a function of (unit, keys), so partitioning the
first window by it too changes nothing, but makes both windows read one sort order
(unit, hash, keys, row hash): PostgreSQL sorts the rows once instead of twice, in parallel
workers when it likes (nothing is volatile).
When every measure is a quantile (or a count of rows or units: :func:`~dpsql.sql.rewrite.rank_rows.pre_bucketed`), the
rows are ordered by a keyed hash of their clamped values instead of their text, and each row
carries its buckets (``_dp_q<j>``) through the sort instead of the NUMERIC values.
With ``privacy_unit: row``, or when the catalog proves one row per unit (``unique_unit``:
:mod:`dpsql.execute.unique_units`), no bounding is needed: the plain aggregate of clamped values.
The proxy receives one row per group whatever the table size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Measure, decomposable
from dpsql.sql.nodes import POSTGRES, cast
from dpsql.sql.rewrite.bound_partials import bound_partials, sum_total
from dpsql.sql.rewrite.buckets import outside_counts
from dpsql.sql.rewrite.literals import numeric
from dpsql.sql.rewrite.make_total import make_total
from dpsql.sql.rewrite.rank_rows import (
    left_out_rows,
    outside_conditions,
    pre_bucketed,
    pre_buckets,
    rank_rows,
    typed_values,
    unranked_alarms,
)
from dpsql.sql.rewrite.row_values import (
    alarmed_values,
    count_column,
    flagged_values,
    hashed_values,
    outside_flags,
    raw_columns,
    value_column,
    value_sql,
)
from dpsql.sql.rewrite.source_rows import source_select


def bound_contributions(a: Analysis, salt: str) -> exp.Select:
    """The full private SQL for an analysis (pure; ``salt`` orders group choices)."""
    gcols = [exp.column(f"_dp_g{i}") for i in range(len(a.group_keys))]
    inner: list[exp.Expr] = []
    if not a.private.row_privacy:
        unit = exp.column(a.private.privacy_unit, table=a.alias, quoted=True)
        inner.append(exp.alias_(unit, "_dp_unit", copy=False))
    inner += [
        exp.alias_(make_total(g.expr, a.column), f"_dp_g{i}", copy=False)
        for i, g in enumerate(a.group_keys)
    ]
    vcols: dict[str, exp.Expr] = {}
    values: list[exp.Expr | None] = []
    for m in a.measures:
        values.append(None if m.arg is None else value_column(value_sql(a, m), inner, vcols))
    counts = [count_column(a, m, inner, vcols) for m in a.measures]
    raw_values = raw_columns(a, inner, vcols)
    outside = outside_flags(a, inner, vcols)
    hashed = hashed_values(a, inner, vcols) if pre_bucketed(a) else {}
    alarmed = alarmed_values(a, inner, vcols, hashed) if hashed else {}
    flagged = {} if hashed else flagged_values(a, inner, vcols)
    if not inner:
        inner.append(exp.alias_(exp.Literal.number(1), "_dp_one", copy=False))
    late = late_keys(a)
    early = [i for i in range(len(a.group_keys)) if i not in late]
    filters = [c for c in (a.where, _key_filter(a, only=early)) if c is not None]
    rows = source_select(a, salt, *inner)
    if filters:
        cond = exp.and_(*[exp.Paren(this=make_total(f, a.column)) for f in filters], copy=False)
        rows = rows.where(cond, copy=False)

    if not a.private.row_privacy and not a.unique_unit and decomposable(a):
        return bound_partials(a, rows, values, salt, raw_values, counts, outside)
    counted, buckets = pre_buckets(a, values, hashed, alarmed) if hashed else (values, [])
    ranked = not a.private.row_privacy and not a.unique_unit  # rows ranked by rank_rows
    measures = [
        exp.alias_(_measure_sql(m, v, a.unique_unit, n, ranked), f"_dp_m{i}", copy=False)
        for i, (m, v, n) in enumerate(zip(a.measures, counted, counts, strict=True))
    ]
    alarm_counts = [
        *unranked_alarms(a, outside),
        *outside_counts(a, outside_conditions(a, counted, alarmed, flagged)),
    ]
    if not a.unique_unit:  # (one row per unit: after the targets' own outside counts)
        measures += alarm_counts
    if not ranked:  # nothing to bound: one row per unit
        src: exp.Expr = rows.subquery("_dp_rows", copy=False)
        out = exp.select(*gcols, *measures).from_(src, copy=False)
    else:
        order_values = list({c.name: c for c in hashed.values()}.values())
        typed = typed_values(a, a.measures, values)
        dropped = left_out_rows(a, counted)
        out = rank_rows(a, rows, gcols, measures, salt, buckets, order_values, typed, dropped)
    if a.unique_unit:
        out = _unique_dropped(a, out, values, raw_values, outside, alarm_counts)
    if gcols:
        out = out.group_by(*[g.copy() for g in gcols], copy=False)
    return _test_groups(a, out, late) if late else out


def _unique_dropped(
    a: Analysis,
    q: exp.Select,
    values: Sequence[exp.Expr | None],
    raw_values: dict[int, exp.Expr],
    outside: dict[int, exp.Expr],
    alarm_counts: Sequence[exp.Expr] = (),
) -> exp.Select:
    """The removed-mass columns the plan measures (``_dp_x<i>``, ``_dp_b<i>``, ``_dp_k<i>``: see
    :func:`dpsql.sql.rewrite.measure_dropped.measure_dropped`) when the catalog proves one row per
    unit. No row and no group is dropped, so a count removes nothing (0); but a SUM (or AVG's
    centred sum) clamped narrower than its declared range (``clamp: auto``) still loses what the
    clamp cut off: each row (= unit, in its one group) loses ``raw - kept`` (its value clamped into
    the declared range, less its value clamped into the chosen one), counted as for a unit of
    the bounded path, in grid steps rounded up, up to the cap C (one unit, one group: the L1
    sensitivity C of the plan's release holds; with a split cap too, as the unit is in one group
    only); a unit past C is counted once in ``over_cap``, and a unit whose value lies outside
    its declared range once in ``outside``."""
    from dpsql.sql.bias import bias_targets
    from dpsql.sql.rewrite.measure_dropped import dropped_columns, outside_count

    zero = exp.Literal.number(0)
    targets = bias_targets(a)
    cols: list[exp.Expr] = [
        exp.alias_(outside_count(outside[t.index]), f"_dp_x{t.index}")
        for t in targets
        if t.index in outside
    ]
    cols += [c.copy() for c in alarm_counts]  # then the alarms' (dpsql.execute.noise's order)
    for t in targets:
        kept, raw = values[t.index], raw_values.get(t.index)
        # counts, sums clamped to their declared range, and a chosen clamp equal to it (the
        # same value column: raw - kept is 0 on every row)
        if kept is None or raw is None or raw.sql(POSTGRES) == kept.sql(POSTGRES):
            cols += [exp.alias_(zero.copy(), f"_dp_{c}{t.index}") for c in ("b", "k")]
            continue
        d: exp.Expr = exp.Sub(this=raw.copy(), expression=kept.copy())
        if t.sign < 0:
            d = exp.Neg(this=exp.Paren(this=d))
        if t.grid != 1:
            d = exp.Div(this=exp.Paren(this=d), expression=numeric(t.grid), typed=True)
        e = cast(exp.Greatest(this=exp.Ceil(this=d), expressions=[zero.copy()]), "bigint")
        got = dropped_columns(replace(t, split=1), e, None)
        cols += [exp.alias_(got[0], f"_dp_b{t.index}"), exp.alias_(got[1], f"_dp_k{t.index}")]
    return q.select(*cols, copy=False) if cols else q


def _measure_sql(
    m: Measure,
    v: exp.Expr | None,
    unique: bool,
    counted: exp.Expr | None = None,
    ranked: bool = False,
) -> exp.Expr:
    if m.kind == "count_rows" or (m.kind == "count_units" and unique):
        return exp.Count(this=exp.Star())  # a unique, NOT NULL unit: one row per unit
    if m.kind == "count_units" and ranked:
        return first_rows()
    if m.kind == "count_units":
        return exp.Count(this=exp.Distinct(expressions=[exp.column("_dp_unit")]))
    assert v is not None
    if m.kind in ("count_values", "quantile", "mode", "count_keys"):  # per bucket: bucket_values
        return exp.Count(this=v.copy())
    if m.kind == "count_distinct":
        return exp.Count(this=exp.Distinct(expressions=[v.copy()]))
    return exp.Coalesce(this=sum_total(m, v, counted), expressions=[exp.Literal.number(0)])


def first_rows() -> exp.Expr:
    """The units of a group among rows ranked by :func:`~dpsql.sql.rewrite.rank_rows.rank_rows`: ``COUNT(*) FILTER (WHERE
    _dp_rn = 1 AND _dp_unit IS NOT NULL)``. ``_dp_rn`` numbers a unit's rows in one group (its
    window is partitioned by the unit, the group's hash -- a function of unit and keys -- and
    the keys), so each unit with a kept row in the group has exactly one row numbered 1, and it
    is kept (``max_rows_per_unit`` >= 1, the group rank is the same on all the unit's rows of the
    group): the same number as ``COUNT(DISTINCT _dp_unit)``, NULL units left out as there. But a
    count of rows adds up over any split of the group's rows: over bucket cells
    (:func:`~dpsql.sql.rewrite.bucket_values.bucket_values` sums cells, which Citus aggregates on
    the workers; a ``COUNT(DISTINCT)`` there needs grouping sets over the rows, which Citus runs
    on the coordinator) and without a sort for the DISTINCT."""
    cond = exp.and_(
        exp.EQ(this=exp.column("_dp_rn"), expression=exp.Literal.number(1)),
        exp.Not(this=exp.Is(this=exp.column("_dp_unit"), expression=exp.Null())),
    )
    return exp.Filter(this=exp.Count(this=exp.Star()), expression=exp.Where(this=cond))


def canonical_integer(text: str) -> bool:
    """True when ``text`` is how PostgreSQL prints an integer (``int8out``): ``0``, ``-12``;
    not ``+1``, ``007``, ``-0``, ``1.0`` or `` 1``.

    >>> [canonical_integer(t) for t in ("0", "-12", "+1", "007", "-0", "1.0", " 1", "")]
    [True, True, False, False, False, False, False, False]
    """
    digits = text[1:] if text.startswith("-") else text
    return (
        digits.isascii()
        and digits.isdigit()
        and (digits == "0" or not digits.startswith("0"))
        and text != "-0"
    )


def _as_integers(a: Analysis, i: int) -> bool:
    """Key ``i`` is of an integer type (``Analysis.integer_keys``) and its declared keys are all
    canonical integers: an integer's text is one of them exactly when the integer equals one."""
    keys = a.group_keys[i].keys
    return keys is not None and i in a.integer_keys and all(canonical_integer(k) for k in keys)


def _key_filter(
    a: Analysis, on: Sequence[exp.Expr] | None = None, only: Sequence[int] | None = None
) -> exp.Expr | None:
    """Rows whose declared keys are listed: ``CAST(k AS TEXT) IN (<keys>)``, or ``k IN (<keys as
    integers>)`` for a key :func:`_as_integers`. ``on``: the key expressions to test (default:
    the query's); ``only``: the keys to test (default: all with declared keys)."""
    conds: list[exp.Expr] = []
    for i, g in enumerate(a.group_keys):
        if g.keys is not None and (only is None or i in only):
            e = (on[i] if on is not None else g.expr).copy()
            as_int = _as_integers(a, i)
            key = e.copy() if as_int else cast(e.copy(), "text")
            vals = [exp.Literal.number(k) if as_int else exp.Literal.string(k) for k in g.keys]
            cond: exp.Expr = exp.In(this=key, expressions=vals) if vals else exp.false()
            if g.null_key:
                null = exp.Is(this=e.copy(), expression=exp.null())
                cond = exp.Paren(this=exp.or_(cond, null, copy=False))
            conds.append(cond)
    if not conds:
        return None
    return exp.and_(*conds, copy=False)


def late_keys(a: Analysis) -> tuple[int, ...]:
    """The declared keys tested on the groups instead of on every row: with one row per unit
    (``a.unique_unit``), the keys :func:`_as_integers`, when no measure counts buckets.

    Identical result: a key's test is a function of the key's value, and an integer group holds
    exactly the rows whose key equals its value (no two distinct integers are equal, unlike
    ``1.0`` and ``1.00``, or two strings under a case-insensitive collation), so a group passes
    the test exactly when all its rows would have, and the groups that pass hold the same rows
    and the same aggregates. Nothing is bounded per unit on this path (no ranking of a unit's
    groups could see the rows of undeclared keys). PostgreSQL then tests a few groups instead of
    every row (a ``= ANY`` per row costs 20-25% of a plain ``GROUP BY``). The plain query
    aggregates every group of the column too, so the groups this adds are never more than the
    ones it computes."""
    if not a.unique_unit or any(m.selected for m in a.measures):
        return ()
    return tuple(i for i in range(len(a.group_keys)) if _as_integers(a, i))


def _test_groups(a: Analysis, q: exp.Select, late: Sequence[int]) -> exp.Select:
    """``q``'s groups whose keys ``late`` are declared::

        SELECT <q's columns> FROM (q OFFSET 0) AS _dp_groups WHERE _dp_g<i> IN (<keys>)

    ``OFFSET 0`` keeps PostgreSQL from pushing the test down to the rows."""
    names = [e.alias_or_name for e in q.expressions]
    gcols = [exp.column(f"_dp_g{i}") for i in range(len(a.group_keys))]
    cond = _key_filter(a, on=gcols, only=late)
    assert cond is not None
    inner = q.offset(exp.Literal.number(0), copy=False).subquery("_dp_groups", copy=False)
    out = exp.select(*[exp.column(n) for n in names]).from_(inner, copy=False)
    return out.where(cond, copy=False)

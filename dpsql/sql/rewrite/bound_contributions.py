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
When every measure is a quantile (or a count of rows or units: :func:`pre_bucketed`), the
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

from dpsql.sql.analysis import Analysis, Measure, decomposable, needs_group_rank
from dpsql.sql.nodes import cast, cte_name, table
from dpsql.sql.rewrite.bound_partials import bound_partials, sum_total
from dpsql.sql.rewrite.buckets import (
    bucket_specs,
    outside_codes,
    outside_counts,
    pre_bucket,
    spec,
)
from dpsql.sql.rewrite.clamp_values import clamp_values
from dpsql.sql.rewrite.keyed_hash import (
    group_hash,
    row_identity,
    row_order,
    value_hash_order,
    value_order,
)
from dpsql.sql.rewrite.literals import numeric
from dpsql.sql.rewrite.make_total import make_total
from dpsql.sql.rewrite.source_rows import source_select


def value_sql(a: Analysis, m: Measure) -> exp.Expr:
    """A measure's per-row value: made total, clamped into its range for sums and quantiles.

    An integral SUM (integer columns and bounds, dpsql.sql.analyze_aggregates._integral) is also rounded
    per row: its noise is calibrated on a grid of 1 with no rounding slack, which is sound only
    if every sum really is an integer. A policy that declares ``type: integer`` for a column that
    holds fractions upstream (``dpsql check`` reports it) would otherwise release fractional
    sums snapped to integers, and one unit could move a snapped sum by its sensitivity plus one.
    """
    assert m.arg is not None
    arg = make_total(m.arg, a.column)
    if integer_quantile(a, m):
        return arg if _proven_column(a, arg, m) else integer_clamp(arg, m)
    if m.kind in ("sum", "sum_centered", "sum_sq_centered", "quantile"):
        v = clamp_values(arg, a.column, m.lo, m.hi, a.proven_bounds)
        return exp.Round(this=v) if m.kind == "sum" and m.integral else v
    return arg


def _proven_column(a: Analysis, arg: exp.Expr, m: Measure) -> bool:
    """``arg`` is a column whose values the catalog proves lie in its declared bounds
    (``a.proven_bounds``), and ``m`` clamps it into exactly those bounds."""
    if not isinstance(arg, exp.Column) or arg.name not in a.proven_bounds:
        return False
    col = a.column(arg)
    return col is not None and col.bounds is not None and (col.lo, col.hi) == (m.lo, m.hi)


def integer_quantile(a: Analysis, m: Measure) -> bool:
    """A quantile over an argument of an integer type (``Analysis.integer_values``) with integer
    bounds: clamped (:func:`integer_clamp`) and bucketed in integers."""
    return (
        m.kind == "quantile"
        and m.arg is not None
        and m.arg.sql("postgres") in a.integer_values
        and m.lo.denominator == 1
        and m.hi.denominator == 1
    )


def integer_clamp(arg: exp.Expr, m: Measure) -> exp.Expr:
    """``CASE WHEN arg < lo THEN lo WHEN arg > hi THEN hi ELSE arg END`` for an integer ``arg``:
    the value NUMERIC's clamp gives (an integer in [lo, hi]), NULL staying NULL (both tests are
    NULL, so the ELSE branch returns it), in the argument's own type: no NUMERIC per row."""
    lo, hi = exp.Literal.number(int(m.lo)), exp.Literal.number(int(m.hi))
    return exp.Case(
        ifs=[
            exp.If(this=exp.LT(this=arg.copy(), expression=lo), true=lo.copy()),
            exp.If(this=exp.GT(this=arg.copy(), expression=hi), true=hi.copy()),
        ],
        default=arg.copy(),
    )


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
    """The units of a group among rows ranked by :func:`_bounded`: ``COUNT(*) FILTER (WHERE
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
        values.append(None if m.arg is None else _value_column(value_sql(a, m), inner, vcols))
    counts = [count_column(a, m, inner, vcols) for m in a.measures]
    raw_values = _raw_values(a, inner, vcols)
    outside = _outside_flags(a, inner, vcols)
    hashed = _hashed_values(a, inner, vcols) if pre_bucketed(a) else {}
    alarmed = _alarmed_values(a, inner, vcols, hashed) if hashed else {}
    flagged = {} if hashed else _flagged_values(a, inner, vcols)
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
    counted, buckets = _pre_buckets(a, values, hashed, alarmed) if hashed else (values, [])
    ranked = not a.private.row_privacy and not a.unique_unit  # rows ranked by _bounded
    measures = [
        exp.alias_(_measure_sql(m, v, a.unique_unit, n, ranked), f"_dp_m{i}", copy=False)
        for i, (m, v, n) in enumerate(zip(a.measures, counted, counts, strict=True))
    ]
    alarm_counts = [
        *_unranked_alarms(a, outside),
        *outside_counts(a, _outside_conditions(a, counted, alarmed, flagged)),
    ]
    if not a.unique_unit:  # (one row per unit: after the targets' own outside counts)
        measures += alarm_counts
    if not ranked:  # nothing to bound: one row per unit
        src: exp.Expr = rows.subquery("_dp_rows", copy=False)
        out = exp.select(*gcols, *measures).from_(src, copy=False)
    else:
        order_values = list({c.name: c for c in hashed.values()}.values())
        out = _bounded(a, rows, gcols, measures, salt, buckets, order_values)
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
        if kept is None or raw is None or raw.sql("postgres") == kept.sql("postgres"):
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


VALUE_ORDERED = frozenset({"quantile", "count_rows", "count_units"})
"""Measure kinds that read nothing of a row but its clamped quantile values' equality classes (a
bucket of a NUMERIC, or of an integer clamped in integers) and its unit: rows of such statements
are ordered by :func:`~dpsql.sql.rewrite.keyed_hash.value_order`."""


def pre_bucketed(a: Analysis) -> bool:
    """Rows bounded per unit (:func:`_bounded`) whose measures are all :data:`VALUE_ORDERED`:
    each row's quantile buckets are computed before the rows are ranked (:func:`_pre_buckets`),
    and the rows are ranked by their values' hash, ties broken by those buckets: the sort
    carries an integer per bucketing instead of the NUMERIC values (14% of the CPU of a median
    at 1M rows)."""
    return (
        not a.private.row_privacy
        and not a.unique_unit
        and not decomposable(a)
        and all(m.kind in VALUE_ORDERED for m in a.measures)
    )


def _hashed_values(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> dict[int, exp.Expr]:
    """For each quantile measure, by index, a row-value column (added to ``inner``) holding its
    argument unclamped, as NUMERIC (``CAST(x AS NUMERIC)``: a no-op for a NUMERIC column): what
    a pre-bucketed statement's rows are ordered by the hash of (:func:`_bounded`), and what its
    buckets test for NULL (the clamp is strict: NULL exactly when the argument is). The clamp
    is then computed once per row, for the bucket (PostgreSQL inlines the rows' columns into
    every expression that reads them: hashing and testing the clamped value computed it three
    times)."""
    out: dict[int, exp.Expr] = {}
    for i, m in enumerate(a.measures):
        if m.kind == "quantile" and m.arg is not None:
            raw = cast(make_total(m.arg, a.column), "numeric")
            out[i] = _value_column(raw, inner, vcols)
    return out


def _alarmed_values(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr], hashed: dict[int, exp.Expr]
) -> dict[int, exp.Expr]:
    """For each quantile whose outside count is released (:func:`dpsql.sql.bias.quantile_alarms`:
    the first measure of its bucketing), by measure index, its value unclamped in the type it is
    bucketed in: the NUMERIC of ``hashed``, or for an :func:`integer_quantile` its argument (a
    row-value column added to ``inner``), which :func:`~dpsql.sql.rewrite.buckets.pre_bucket`
    tests against the range and buckets instead of the clamped value."""
    from dpsql.sql.bias import quantile_alarms

    out: dict[int, exp.Expr] = {}
    for i, _, _ in quantile_alarms(a):
        m = a.measures[i]
        if integer_quantile(a, m):
            assert m.arg is not None
            out[i] = _value_column(make_total(m.arg, a.column), inner, vcols)
        else:
            out[i] = hashed[i]
    return out


def _flagged_values(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> dict[int, exp.Expr]:
    """On the row path without pre-bucketing (a quantile beside a SUM, AVG or COUNT(DISTINCT
    x), ...; every quantile of rows not ranked per unit): for each quantile whose outside count
    is released, by measure index, its value unclamped as NUMERIC (an
    :func:`integer_quantile`'s in its own integer type: no NUMERIC per row), a row-value column
    added to ``inner``, which the count tests against the range."""
    from dpsql.sql.bias import quantile_alarms

    out: dict[int, exp.Expr] = {}
    for i, _, _ in quantile_alarms(a):
        m = a.measures[i]
        assert m.arg is not None
        raw = make_total(m.arg, a.column)
        if not integer_quantile(a, m):
            raw = exp.cast(raw, "numeric")
        out[i] = _value_column(raw, inner, vcols)
    return out


def _outside_conditions(
    a: Analysis,
    counted: Sequence[exp.Expr | None],
    alarmed: dict[int, exp.Expr],
    flagged: dict[int, exp.Expr],
) -> dict[int, exp.Expr]:
    """Each quantile alarm's test of a kept row, by measure index: its bucket code below or
    above the range (pre-bucketed: ``(_dp_q<j> = -1 OR _dp_q<j> = B)``), else its unclamped
    value (``(raw < lo OR raw > hi)``; NULL for a NULL value: not counted)."""
    out: dict[int, exp.Expr] = {}
    for i in alarmed:
        q = counted[i]
        assert isinstance(q, exp.Column)
        below, above = outside_codes(a.measures[i])
        codes = [exp.EQ(this=q.copy(), expression=exp.Literal.number(c)) for c in (below, above)]
        out[i] = exp.Paren(this=exp.or_(*codes))
    for i, raw in flagged.items():
        m = a.measures[i]
        integer = integer_quantile(a, m)
        lo, hi = (exp.Literal.number(int(x)) if integer else numeric(x) for x in (m.lo, m.hi))
        out[i] = exp.Paren(
            this=exp.or_(
                exp.LT(this=raw.copy(), expression=lo), exp.GT(this=raw.copy(), expression=hi)
            )
        )
    return out


def _pre_buckets(
    a: Analysis,
    values: Sequence[exp.Expr | None],
    hashed: dict[int, exp.Expr],
    alarmed: dict[int, exp.Expr] | None = None,
) -> tuple[list[exp.Expr | None], list[tuple[exp.Alias, int, bool]]]:
    """(what each measure counts, the bucket columns and their bucket counts): a quantile
    counts its bucketing's column ``_dp_q<j>`` (:func:`~dpsql.sql.rewrite.buckets.pre_bucket`
    of its clamped value: NULL exactly when the value is, so its COUNT is the value's; tested on
    its argument unclamped, ``hashed``), ``j`` its bucketing's index in
    :func:`~dpsql.sql.rewrite.buckets.bucket_specs` (as ``bucket_values`` numbers its cells).
    A bucketing with an outside count (``alarmed``, by its first measure's index) codes values
    outside the range as -1 and B (:func:`~dpsql.sql.rewrite.buckets.pre_bucket`): the third
    element says so (:func:`_packed_order` then shifts the codes by one)."""
    specs = bucket_specs(a)
    counted = list(values)
    made: dict[int, tuple[exp.Alias, int, bool]] = {}
    for i, (m, v) in enumerate(zip(a.measures, values, strict=True)):
        if m.kind != "quantile" or v is None:
            continue
        j = specs.index(spec(m))
        if j not in made:
            out = (alarmed or {}).get(i)
            b = pre_bucket(m, v, integer_quantile(a, m), hashed.get(i), out)
            alias = exp.Alias(this=b, alias=exp.to_identifier(f"_dp_q{j}"))
            made[j] = (alias, m.buckets, out is not None)
        counted[i] = exp.column(f"_dp_q{j}")
    return counted, list(made.values())


PACKED_BITS = 31
"""A bucketing of at most 2^PACKED_BITS - 1 buckets is packed into the low bits of the order
hash (:func:`_packed_order`)."""


def _packed_order(
    hv: exp.Expr, bucket: exp.Alias, size: int, coded: bool = False
) -> tuple[exp.Expr, exp.Expr] | None:
    """(the order key, the bucket read back from it) for one bucketing of ``size`` buckets
    (None when it doesn't fit): with ``b`` the bit length of ``size + 2``, the key is
    ``(hv & -2^b) | COALESCE(bucket, size)`` (the value's hash ``hv`` with its low ``b`` bits
    replaced by the row's bucket, ``size`` for a NULL value), and the bucket after the ranking
    ``NULLIF(CAST(key & (2^b - 1) AS INT), size)``. The rows then sort by one bigint where they
    sorted by the hash and the bucket (a narrower sort: 10-15% of a median's CPU); two rows
    tie on it only when they agree on the hash's high bits *and* on the bucket, the only thing
    their measures read of them.

    ``coded``: the bucket codes values outside the range as -1 and ``size``
    (:func:`~dpsql.sql.rewrite.buckets.pre_bucket`); the key then holds the code plus one
    (0 .. ``size + 1``; ``size + 2`` for a NULL), read back as ``NULLIF(..., size + 2) - 1``:
    rows tied on the hash's high bits (``hash_numeric`` ignores the sign: 0.7 and -0.7 tie)
    sort as their clamped values' buckets did. ``b`` is the width the codes need whether or not
    the statement codes them (``size + 2`` may need one more bit than ``size``: 7 buckets fit
    in 3 bits, their codes in 4), so the same high bits of the hash decide in both keys and the
    kept rows hold the same buckets (rows ordered differently tie on everything the measures
    read: a value below the range and one in bucket 0, one above and one in the bucket of
    ``hi``)."""
    null = size + 2 if coded else size
    bits = (size + 2).bit_length()
    if size < 1 or bits > PACKED_BITS:
        return None
    null_lit = exp.Literal.number(null)
    code = bucket.this.copy()
    if coded:
        code = exp.Add(this=code, expression=exp.Literal.number(1))
    cell = exp.Coalesce(this=code, expressions=[null_lit.copy()])
    high = exp.BitwiseAnd(this=exp.Paren(this=hv), expression=exp.Literal.number(-(2**bits)))
    key = exp.BitwiseOr(this=exp.Paren(this=high), expression=cell)
    low = exp.BitwiseAnd(this=exp.column("_dp_o"), expression=exp.Literal.number(2**bits - 1))
    back: exp.Expr = exp.Nullif(this=cast(exp.Paren(this=low), "int"), expression=null_lit)
    if coded:
        back = exp.Sub(this=back, expression=exp.Literal.number(1))
    return key, back


def _bounded(
    a: Analysis,
    rows: exp.Select,
    gcols: Sequence[exp.Expr],
    measures: list[exp.Expr],
    salt: str,
    buckets: Sequence[tuple[exp.Alias, int, bool]] = (),
    order_values: Sequence[exp.Expr] = (),
) -> exp.Select:
    unit = exp.column("_dp_unit")
    h = exp.column("_dp_h")
    rank = needs_group_rank(a)
    names = [e.alias_or_name for e in rows.expressions]
    typed = all(m.kind in VALUE_ORDERED for m in a.measures)
    ghash = group_hash(salt, unit, gcols, a.hashed_keys, a.unit_type, a.hashed_key_types)
    ided: list[exp.Expr] = [exp.Star()]
    unpacked: list[exp.Expr] = []
    if typed:
        # a quantile's rows: ordered by a hash of their values (unclamped: order_values)
        # seeded with the group's hash (its expression: a column of this subquery can't be
        # read in its own SELECT), ties broken by their buckets; the rows carry their unit,
        # keys, order and buckets only (one bucketing: packed into the order, _packed_order)
        values = list(order_values) or [exp.column(n) for n in names if n.startswith("_dp_v")]
        hv = value_hash_order(ghash, values)
        kept = [n for n in names if not buckets or not n.startswith("_dp_v")]
        ided = [exp.column(n) for n in kept]
        packed = _packed_order(hv, *buckets[0]) if len(buckets) == 1 else None
        if packed is not None:
            order = value_order(exp.column("_dp_o"), [])
            ided.append(exp.alias_(packed[0], "_dp_o"))
            unpacked.append(exp.alias_(packed[1], buckets[0][0].alias))
        else:
            ties = [exp.column(b.alias) for b, _, _ in buckets] if buckets else values
            order = value_order(exp.column("_dp_o"), ties)
            ided.append(exp.alias_(hv, "_dp_o"))
            ided += [b.copy() for b, _, _ in buckets]
    else:
        order = row_order(salt, exp.column("_dp_rt"))
    rn = exp.Window(
        this=exp.RowNumber(),
        partition_by=[unit, *([h] if rank else []), *gcols],
        order=exp.Order(expressions=order),
    )
    extra = [exp.alias_(rn, "_dp_rn")]
    conds: list[exp.Expr] = [
        exp.LTE(this=exp.column("_dp_rn"), expression=exp.Literal.number(a.max_rows))
    ]
    if not typed:
        identity = row_identity([exp.column(n) for n in names])
        ided.append(exp.alias_(identity, "_dp_rt"))
    if rank:
        # The unit is part of the hash so each unit draws its own order of its groups.
        ided.append(exp.alias_(ghash.copy(), "_dp_h"))
        gr = exp.Window(
            this=exp.Anonymous(this="dense_rank"),
            partition_by=[unit.copy()],
            order=exp.Order(
                expressions=[
                    exp.Ordered(this=h.copy()),
                    *[exp.Ordered(this=g.copy()) for g in gcols],
                ]
            ),
        )
        extra.append(exp.alias_(gr, "_dp_gr"))
        conds.append(
            exp.LTE(this=exp.column("_dp_gr"), expression=exp.Literal.number(a.max_groups))
        )
    src = exp.select(*ided).from_(table("_dp_rows"), copy=False)
    hashed_rows = src.subquery("_dp_hashed", copy=False)
    bounded = exp.select(exp.Star(), *extra).from_(hashed_rows, copy=False)
    ranked: exp.Expr = table("_dp_bounded")
    if unpacked:
        # read back after the ranking, from the ranked rows' column: in the ranking's own
        # SELECT it would make PostgreSQL carry the unit and value through the sort and
        # compute the packed key again
        unpack = exp.select(exp.Star(), *unpacked).from_(table("_dp_bounded"), copy=False)
        ranked = unpack.subquery("_dp_kept", copy=False)
    out = exp.select(*[g.copy() for g in gcols], *measures).from_(ranked, copy=False)
    out = out.where(exp.and_(*conds, copy=False), copy=False)
    out = out.with_(cte_name("_dp_rows"), as_=rows, copy=False)
    return out.with_(cte_name("_dp_bounded"), as_=bounded, copy=False)


def _raw_values(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> dict[int, exp.Expr]:
    """For each SUM bias target whose measure is clamped narrower than the declared bounds
    (``clamp: auto``), a row-value column clamped into the declared bounds instead (added to
    ``inner``): its raw partial then counts the clamped-off mass as removed (dpsql.sql.bias)."""
    from dpsql.sql.bias import bias_targets

    out: dict[int, exp.Expr] = {}
    for t in bias_targets(a):
        if not t.raw_clamp or t.measure.arg is None:
            continue
        m = replace(t.measure, kind="sum", lo=t.raw_lo, hi=t.raw_hi)
        out[t.index] = _value_column(value_sql(a, m), inner, vcols)
    return out


def _outside_flags(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> dict[int, exp.Expr]:
    """For each bias target with ``declared`` columns, then each VARIANCE's or STDDEV's alarm
    (:func:`dpsql.sql.bias.alarm_measures`), by measure index, a row-value column (added to
    ``inner``) true when one of them lies outside its declared bounds (its clamp changes it);
    NULL values are not outside (the clamp keeps them NULL)."""
    from dpsql.sql.bias import alarm_measures, bias_targets
    from dpsql.sql.rewrite.measure_dropped import never, outside_sql

    out: dict[int, exp.Expr] = {}
    wanted = [(t.index, t.measure, t.declared) for t in bias_targets(a)]
    wanted += [(i, a.measures[i], cols) for i, cols in alarm_measures(a)]
    for i, m, declared in wanted:
        cond = outside_sql(a, m, declared)
        if cond is not None:
            # the constant FALSE of proven columns needs no column of its own
            out[i] = cond if never(cond) else _value_column(cond, inner, vcols)
    return out


def _unranked_alarms(a: Analysis, outside: dict[int, exp.Expr]) -> list[exp.Expr]:
    """Rows not ranked per unit (:func:`dpsql.sql.bias.unranked`): each SUM/AVG/VARIANCE alarm's
    count (:func:`dpsql.sql.bias.alarm_measures`, in its order, before the quantiles'),
    ``_dp_x<i>`` = ``COUNT(*) FILTER (WHERE <a declared column outside its bounds>)``: every row
    outside, each unit's one row in its one group (L1 sensitivity 1)."""
    from dpsql.sql.bias import alarm_measures, unranked
    from dpsql.sql.rewrite.measure_dropped import outside_count

    if not unranked(a):
        return []
    return [exp.alias_(outside_count(outside[i]), f"_dp_x{i}") for i, _ in alarm_measures(a)]


def _value_column(v: exp.Expr, inner: list[exp.Expr], vcols: dict[str, exp.Expr]) -> exp.Expr:
    """The row-value column ``_dp_v<k>`` computing ``v`` (added to ``inner`` the first time)."""
    key = v.sql("postgres", copy=False)  # v is fresh: generated in place
    if key not in vcols:
        vcols[key] = exp.column(f"_dp_v{len(vcols)}")
        inner.append(exp.alias_(v, f"_dp_v{len(vcols) - 1}", copy=False))
    return vcols[key]


def count_column(
    a: Analysis, m: Measure, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> exp.Expr | None:
    """For a sum measure over a bare column, that column unclamped (a row-value column, added to
    ``inner`` unless AVG's ``COUNT(x)`` already reads it), else None.

    Its ``COUNT`` is the ``COUNT`` of the measure's clamped value (the number of values the sum
    adds up, behind the centred sums and a partial's ``n``): the clamp of a column,
    ``numeric_smaller(numeric_larger(CAST(x AS NUMERIC), lo), hi)`` possibly inside another such
    clamp and a ``ROUND``, is NULL exactly when ``x`` is (every function in it is strict, and none
    returns NULL for a non-NULL input), so the two counts agree row by row. Counting the column
    spares PostgreSQL a second evaluation of the clamp per row (it evaluates each aggregate's
    argument separately). Not for an expression: ``NULLIF(x, 0)`` is NULL for ``x = 0`` while its
    clamp (of ``x`` into [1, 9]) is not."""
    if m.kind not in ("sum", "sum_centered", "sum_sq_centered") or m.arg is None:
        return None
    if integer_quantile(a, m):
        return None
    arg = make_total(m.arg, a.column)
    if not isinstance(arg, exp.Column):
        return None
    return _value_column(arg, inner, vcols)

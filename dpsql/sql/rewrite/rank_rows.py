"""Rows kept per privacy unit, ranked by keyed hashes (the row-keeping path of
:func:`~dpsql.sql.rewrite.bound_contributions.bound_contributions`: its module docstring shows
the query): :func:`rank_rows` numbers each unit's rows in a group and ranks its groups; a
statement whose measures read only their values' buckets (:func:`pre_bucketed`) carries the
buckets through the sort instead of the values (:func:`pre_buckets`, :func:`packed_order`)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dpsql.sql.analysis import ROW_VALUE_KINDS, Analysis, Measure, decomposable, needs_group_rank
from dpsql.sql.nodes import cast, cte_name, table
from dpsql.sql.rewrite.buckets import bucket_specs, outside_codes, pre_bucket, spec
from dpsql.sql.rewrite.keyed_hash import (
    ROW_ORDER_TYPES,
    group_hash,
    row_identity,
    row_order,
    typed_row_order,
    typed_row_ties,
    value_hash_order,
    value_order,
)
from dpsql.sql.rewrite.literals import numeric
from dpsql.sql.rewrite.row_values import integer_quantile

VALUE_ORDERED = frozenset({"quantile", "count_rows", "count_units"})
"""Measure kinds that read nothing of a row but its clamped quantile values' equality classes (a
bucket of a NUMERIC, or of an integer clamped in integers) and its unit: rows of such statements
are ordered by :func:`~dpsql.sql.rewrite.keyed_hash.value_order`."""


def pre_bucketed(a: Analysis) -> bool:
    """Rows bounded per unit (:func:`rank_rows`) whose measures are all :data:`VALUE_ORDERED`:
    each row's quantile buckets are computed before the rows are ranked (:func:`pre_buckets`),
    and the rows are ranked by their values' hash, ties broken by those buckets: the sort
    carries an integer per bucketing instead of the NUMERIC values (14% of the CPU of a median
    at 1M rows)."""
    return (
        not a.private.row_privacy
        and not a.unique_unit
        and not decomposable(a)
        and all(m.kind in VALUE_ORDERED for m in a.measures)
    )


def outside_conditions(
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


def pre_buckets(
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
    element says so (:func:`packed_order` then shifts the codes by one)."""
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
hash (:func:`packed_order`)."""


def packed_order(
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


def rank_rows(
    a: Analysis,
    rows: exp.Select,
    gcols: Sequence[exp.Expr],
    measures: list[exp.Expr],
    salt: str,
    buckets: Sequence[tuple[exp.Alias, int, bool]] = (),
    order_values: Sequence[exp.Expr] = (),
    value_types: dict[str, str] | None = None,
    dropped: tuple[int, list[exp.Expr]] | None = None,
) -> exp.Select:
    """The ranked rows (see the module docstring); ``value_types``: the PostgreSQL types of the
    rows' value columns (``_dp_v<k>``) of a type in
    :data:`~dpsql.sql.rewrite.keyed_hash.ROW_ORDER_TYPES` (:func:`typed_values`)."""
    unit = exp.column("_dp_unit")
    h = exp.column("_dp_h")
    rank = needs_group_rank(a)
    names = [e.alias_or_name for e in rows.expressions]
    typed = all(m.kind in VALUE_ORDERED for m in a.measures)
    own: list[tuple[exp.Expr, str]] = []
    ghash = group_hash(salt, unit, gcols, a.hashed_keys, a.unit_type, a.hashed_key_types)
    ided: list[exp.Expr] = [exp.Star()]
    unpacked: list[exp.Expr] = []
    if typed:
        # a quantile's rows: ordered by a hash of their values (unclamped: order_values)
        # seeded with the group's hash (its expression: a column of this subquery can't be
        # read in its own SELECT), ties broken by their buckets; the rows carry their unit,
        # keys, order and buckets only (one bucketing: packed into the order, packed_order)
        values = list(order_values) or [exp.column(n) for n in names if n.startswith("_dp_v")]
        hv = value_hash_order(ghash, values)
        kept = [n for n in names if not buckets or not n.startswith("_dp_v")]
        ided = [exp.column(n) for n in kept]
        packed = packed_order(hv, *buckets[0]) if len(buckets) == 1 else None
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
        own = _row_values(names, gcols, value_types or {})
        if own:
            # rows whose measures read only values of ROW_ORDER_TYPES: ordered by a hash of
            # the values seeded with the group's hash, ties broken by the values' bytes
            ided.append(exp.alias_(typed_row_order(ghash, own), "_dp_o"))
            order = value_order(exp.column("_dp_o"), typed_row_ties(own))
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
    if not typed and not own:
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
    if dropped is not None:
        # the rows a quantile's bounds leave out are counted too (left_out_rows): the rows
        # numbered up to E + C + 1 are read, every other aggregate keeps its R
        conds[0] = exp.LTE(this=exp.column("_dp_rn"), expression=exp.Literal.number(dropped[0]))
        measures = [kept_only(e, a.max_rows) for e in measures] + dropped[1]
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


def _row_values(
    names: Sequence[str], gcols: Sequence[exp.Expr], value_types: dict[str, str]
) -> list[tuple[exp.Expr, str]]:
    """The rows' columns besides the unit and the keys with their types, when every one of them
    is a value column of a known type of :data:`~dpsql.sql.rewrite.keyed_hash.ROW_ORDER_TYPES`
    (:func:`typed_values`); else [] (the rows are ordered by their text)."""
    keys = {"_dp_unit", *(g.alias_or_name for g in gcols)}
    rest = [n for n in names if n not in keys]
    if not rest or any(n not in value_types for n in rest):
        return []
    return [(exp.column(n), value_types[n]) for n in rest]


def typed_values(
    a: Analysis, measures: Sequence[Measure], values: Sequence[exp.Expr | None]
) -> dict[str, str]:
    """The value columns (``_dp_v<k>``, by name) of ``measures`` that read their argument as it
    is (a COUNT of declared keys, COUNT(DISTINCT x), a mode, COUNT(x)) with its type, when the
    type probe found it among :data:`~dpsql.sql.rewrite.keyed_hash.ROW_ORDER_TYPES`
    (``Analysis.row_value_types``)."""
    types = dict(a.row_value_types)
    out: dict[str, str] = {}
    for m, v in zip(measures, values, strict=True):
        if m.kind not in ROW_VALUE_KINDS or m.arg is None or not isinstance(v, exp.Column):
            continue
        t = types.get(m.arg_sql)
        if t in ROW_ORDER_TYPES:
            out[v.name] = t
    return out


def unranked_alarms(a: Analysis, outside: dict[int, exp.Expr]) -> list[exp.Expr]:
    """Rows not ranked per unit (:func:`dpsql.sql.bias.unranked`): each SUM/AVG/VARIANCE alarm's
    count (:func:`dpsql.sql.alarms.alarm_measures`, in its order, before the quantiles'),
    ``_dp_x<i>`` = ``COUNT(*) FILTER (WHERE <a declared column outside its bounds>)``: every row
    outside, each unit's one row in its one group (L1 sensitivity 1)."""
    from dpsql.sql.alarms import alarm_measures
    from dpsql.sql.bias import unranked
    from dpsql.sql.rewrite.measure_dropped import outside_count

    if not unranked(a):
        return []
    return [exp.alias_(outside_count(outside[i]), f"_dp_x{i}") for i, _ in alarm_measures(a)]


def kept_only(e: exp.Expr, r: int) -> exp.Expr:
    """An aggregate column over the rows the bounds keep only (``_dp_rn <= R``), where the
    query reads rows past R too (:func:`left_out_rows`): each aggregate gets ``FILTER (WHERE
    _dp_rn <= R)``, ANDed to its own filter (a count of units' first rows, an alarm's)."""
    keep = exp.LTE(this=exp.column("_dp_rn"), expression=exp.Literal.number(r))

    def fix(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Filter):
            where = node.expression
            cond = where.this if isinstance(where, exp.Where) else where
            both = exp.and_(keep.copy(), exp.Paren(this=cond.copy()))
            return exp.Filter(this=node.this.copy(), expression=exp.Where(this=both))
        if isinstance(node, exp.AggFunc):
            return exp.Filter(this=node.copy(), expression=exp.Where(this=keep.copy()))
        return node

    return e.transform(fix)


def left_out_rows(
    a: Analysis, counted: Sequence[exp.Expr | None]
) -> tuple[int, list[exp.Expr]] | None:
    """The row number the ranked rows are read up to and the columns of the quantile bias
    targets (:func:`dpsql.sql.bias.quantile_targets`), None without any. Per target t (its
    measure's counted value v; E = END_ROWS R the rows its interval ends rank, cap C)::

        _dp_lb<t> = COUNT(v) FILTER (WHERE _dp_rn > E AND _dp_rn <= E + C)
        _dp_lk<t> = COUNT(*) FILTER (WHERE _dp_rn = E + C + 1)

    and, after every target's two, ``_dp_le<t> = COUNT(v) FILTER (WHERE _dp_rn > R AND _dp_rn
    <= E)``: per bucket cell, the rows the ends rank besides the R the answer does. Read with
    ``_dp_rn <= E + C_max + 1`` instead of ``<= R`` (the measures keep R by their own filter:
    :func:`kept_only`). A unit's rows are numbered 1, 2, ... in one window (no GROUP BY), so it
    adds min(C, its non-NULL values past E) <= C to ``_dp_lb`` (all of them when it has at most
    E + C rows) and at most 1 to ``_dp_lk`` (``_dp_b<j>`` names a bucket here). All are counts
    of rows: they add up over the bucket cells (:mod:`dpsql.sql.rewrite.bucket_values`)."""
    from dpsql.sql.bias import bias_targets, end_rows

    targets = [t for t in bias_targets(a) if t.measure.kind == "quantile"]
    if not targets:
        return None
    r = a.max_rows
    rn = exp.column("_dp_rn")

    def between(lo: int, hi: int) -> exp.Expr:
        return exp.and_(
            exp.GT(this=rn.copy(), expression=exp.Literal.number(lo)),
            exp.LTE(this=rn.copy(), expression=exp.Literal.number(hi)),
        )

    cols: list[exp.Expr] = []
    more: list[exp.Expr] = []
    last = r
    for t in targets:
        v = counted[t.index]
        assert v is not None
        e, c = end_rows(a, t.measure), t.group_cap_steps  # (C/K per group: bias.quantile_targets)
        over = exp.EQ(this=rn.copy(), expression=exp.Literal.number(e + c + 1))
        b = exp.Filter(this=exp.Count(this=v.copy()), expression=exp.Where(this=between(e, e + c)))
        k = exp.Filter(this=exp.Count(this=exp.Star()), expression=exp.Where(this=over))
        cols += [exp.alias_(b, f"_dp_lb{t.index}"), exp.alias_(k, f"_dp_lk{t.index}")]
        m = exp.Filter(this=exp.Count(this=v.copy()), expression=exp.Where(this=between(r, e)))
        more.append(exp.alias_(m, f"_dp_le{t.index}"))
        last = max(last, e + c + 1)
    return last, cols + more

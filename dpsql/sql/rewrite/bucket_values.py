"""Count rows per bucket (quantiles) or per public candidate (mode) inside PostgreSQL.

Runs on the output of :func:`~dpsql.sql.rewrite.bound_contributions.bound_contributions`, whose
final SELECT aggregates the bounded rows per group (``_dp_m<i>`` = ``COUNT(_dp_v<k>)`` for a
quantile or mode measure). For each distinct bucketing of a value column this pass adds one
grouping set, so that one scan of the bounded rows gives both the per-group measures and the
per-group, per-bucket counts::

    SELECT _dp_g*, _dp_m*, <b_0> AS _dp_b0, ..., GROUPING(<b_0>, ...) AS _dp_set
    FROM ... GROUP BY GROUPING SETS ((_dp_g*), (_dp_g*, <b_0>), ...)

with, for a quantile over the clamped value v (public grid of B buckets over [lo, hi))::

    b = LEAST(GREATEST(width_bucket(v, lo, hi, B), 1), B) - 1

and for mode() over a column with public keys ``CASE WHEN CAST(v AS TEXT) IN (<keys>) THEN
CAST(v AS TEXT) END``, so a value outside the keys is never returned. Rows of the grouping set
(_dp_g*) (``_dp_set`` = 2^n - 1) carry the measures as before; a row of set j carries bucket
``_dp_b<j>`` and, in each ``_dp_m<i>`` of that bucketing, the number of rows in that bucket.
The proxy receives at most one row per group and bucket, never a row of the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.rewrite.bound_contributions import integer_quantile
from dpsql.sql.rewrite.literals import numeric


def bucket_specs(a: Analysis) -> list[tuple[str, ...]]:
    """The distinct bucketings of the analysis's quantile/mode measures, in order of first use."""
    out: list[tuple[str, ...]] = []
    for m in a.measures:
        if m.selected and _spec(m) not in out:
            out.append(_spec(m))
    return out


def _spec(m: Measure) -> tuple[str, ...]:
    arg = m.arg.sql("postgres") if m.arg is not None else ""
    if m.kind == "quantile":
        return ("quantile", arg, str(m.lo), str(_grid_hi(m)), str(m.buckets))
    return ("mode", arg, repr(m.candidates), str(m.candidates_from))  # count_keys: the same


def _grid_hi(m: Measure) -> Fraction:
    return m.grid_hi if m.grid_hi is not None else m.hi


def _finite_decimal(x: Fraction) -> bool:
    """True when ``x`` is a finite decimal (its denominator has no prime factor but 2 and 5)."""
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _scaled_bucket(m: Measure, v: exp.Expr, integer: bool = False) -> exp.Expr | None:
    """``LEAST(GREATEST(CAST(FLOOR((v - lo) * k) AS INT), 0), B - 1)`` with ``k = B / (grid_hi -
    lo)``, when ``k`` is a finite decimal (else None): the bucket ``width_bucket`` gives for
    ``v`` in [lo, hi], without a NUMERIC division per row. For such ``v``, ``width_bucket(v, lo,
    grid_hi, B)`` is ``trunc((v - lo) * B / (grid_hi - lo)) + 1`` below ``grid_hi`` and ``B + 1``
    at or above it (PostgreSQL's ``compute_bucket``: exact, truncating); the product by ``k`` is
    exact in NUMERIC and ``v - lo >= 0``, so ``FLOOR`` is that truncation. NULL goes to bucket 0,
    as ``LEAST(GREATEST(NULL, 1), B) - 1`` did (its rows count nothing: ``COUNT(v)``). The
    largest value before the ``LEAST``, ``(hi - lo) * k``, is known here: the ``INT`` cast can't
    overflow for any row (else None)."""
    width = _grid_hi(m) - m.lo
    if width <= 0 or m.buckets < 1:
        return None
    k = Fraction(m.buckets) / width
    if not _finite_decimal(k) or (m.hi - m.lo) * k >= 2**31 - 1:
        return None
    if integer and k.denominator == 1:
        # an integer v in [lo, hi] (clamped in integers): (v - lo) * k is an integer in
        # [0, (hi - lo) * k], below 2^31: no FLOOR, no NUMERIC, no overflow
        d: exp.Expr = v.copy()
        if m.lo != 0:
            d = exp.Paren(this=exp.Sub(this=d, expression=exp.Literal.number(int(m.lo))))
        if k != 1:
            d = exp.Mul(this=d, expression=exp.Literal.number(int(k)))
        low = exp.Greatest(this=d, expressions=[exp.Literal.number(0)])
        return exp.Least(this=low, expressions=[exp.Literal.number(m.buckets - 1)])
    shifted = (
        v.copy() if m.lo == 0 else exp.Paren(this=exp.Sub(this=v.copy(), expression=numeric(m.lo)))
    )
    scaled = shifted if k == 1 else exp.Mul(this=shifted, expression=numeric(k))
    floor = exp.cast(exp.Floor(this=scaled), "int")
    low = exp.Greatest(this=floor, expressions=[exp.Literal.number(0)])
    return exp.Least(this=low, expressions=[exp.Literal.number(m.buckets - 1)])


def _bucket(m: Measure, v: exp.Expr, integer: bool = False) -> exp.Expr:
    if m.kind == "quantile":
        fast = _scaled_bucket(m, v, integer)
        if fast is not None:
            return fast
        if integer:
            v = exp.cast(v.copy(), "numeric")
        wb = exp.Anonymous(
            this="width_bucket",
            expressions=[v, numeric(m.lo), numeric(_grid_hi(m)), exp.Literal.number(m.buckets)],
        )
        one = exp.Literal.number(1)
        clamped = exp.Least(
            this=exp.Greatest(this=wb, expressions=[one]),
            expressions=[exp.Literal.number(m.buckets)],
        )
        return exp.Sub(this=clamped, expression=one.copy())
    text = exp.cast(v.copy(), "text")
    if m.candidates is not None:
        cond: exp.Expr = exp.In(
            this=text, expressions=[exp.Literal.string(c) for c in m.candidates]
        )
    else:
        assert m.candidates_from is not None
        parts = m.candidates_from.split(".")
        col = exp.cast(exp.column(parts[-1], quoted=True), "text")
        public = exp.select(col).from_(exp.to_table(".".join(parts[:-1])))
        cond = exp.In(this=text, query=public.subquery())
    return exp.Case(ifs=[exp.If(this=cond, true=text.copy())])


def bucket_values(q: exp.Select, a: Analysis) -> exp.Select:
    """Add the per-bucket grouping sets for the analysis's quantile and mode measures (pure)."""
    specs = bucket_specs(a)
    if not specs:
        return q
    q = q.copy()
    items = {e.alias: e for e in q.expressions if isinstance(e, exp.Alias)}
    buckets: list[exp.Expr | None] = [None] * len(specs)
    for i, m in enumerate(a.measures):
        if not m.selected:
            continue
        j = specs.index(_spec(m))
        if buckets[j] is None:
            count = items[f"_dp_m{i}"].this
            assert isinstance(count, exp.Count)
            buckets[j] = _bucket(m, count.this, integer_quantile(a, m))
    exprs = [b for b in buckets if b is not None]
    gcols = [exp.column(f"_dp_g{i}") for i in range(len(a.group_keys))]
    if all(_summable(e.this) for e in q.expressions if isinstance(e, exp.Alias)):
        return _summed_cells(q, gcols, exprs)
    sets: list[exp.Expr] = [exp.Tuple(expressions=[g.copy() for g in gcols])]
    sets += [exp.Tuple(expressions=[*[g.copy() for g in gcols], b.copy()]) for b in exprs]
    extra = [exp.alias_(b.copy(), f"_dp_b{j}") for j, b in enumerate(exprs)]
    grouping = exp.Grouping(expressions=[b.copy() for b in exprs])
    q.set("expressions", [*q.expressions, *extra, exp.alias_(grouping, "_dp_set")])
    q.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
    return q


def _summable(e: exp.Expr) -> bool:
    """A measure whose per-group value is the sum of its per-(group, bucket) values."""
    if isinstance(e, exp.Count):
        return not isinstance(e.this, exp.Distinct)
    return isinstance(e, exp.Coalesce) and isinstance(e.this, exp.Sum)


def _summed_cells(
    q: exp.Select, gcols: Sequence[exp.Expr], exprs: Sequence[exp.Expr]
) -> exp.Select:
    """The grouping sets over the cells of one plain GROUP BY (keys, buckets)::

        SELECT _dp_g*, SUM(_dp_m*), _dp_b*, GROUPING(_dp_b*) AS _dp_set
        FROM (SELECT _dp_g*, <measures>, <b_j> AS _dp_b<j> FROM ... GROUP BY _dp_g*, _dp_b*)
        GROUP BY GROUPING SETS ((_dp_g*), (_dp_g*, _dp_b0), ...)

    The same rows as grouping sets over the bounded rows (every measure is a count or a sum,
    so a group's value is the sum over its cells), but the rows are aggregated by one plain
    GROUP BY, which Citus runs on the workers (it can't push GROUPING SETS down unless they
    group by the distribution column); the grouping sets then read one row per cell.
    """
    cells = [exp.alias_(b.copy(), f"_dp_b{j}") for j, b in enumerate(exprs)]
    inner = q.copy()
    ctes = inner.args.get("with_")
    inner.set("with_", None)
    inner.set("expressions", [*inner.expressions, *cells])
    keys = [g.copy() for g in gcols] + [exp.column(c.alias) for c in cells]
    inner.set("group", exp.Group(expressions=keys))
    outer_cols: list[exp.Expr] = [g.copy() for g in gcols]
    for e in q.expressions:
        if not isinstance(e, exp.Alias) or e.alias.startswith("_dp_g"):
            continue
        total: exp.Expr = exp.Sum(this=exp.column(e.alias))
        if isinstance(e.this, exp.Count):
            total = exp.cast(
                exp.Coalesce(this=total, expressions=[exp.Literal.number(0)]), "bigint"
            )
        outer_cols.append(exp.alias_(total, e.alias))
    bcols = [exp.column(c.alias) for c in cells]
    outer_cols += [exp.alias_(b.copy(), b.name) for b in bcols]
    outer_cols.append(exp.alias_(exp.Grouping(expressions=[b.copy() for b in bcols]), "_dp_set"))
    sets: list[exp.Expr] = [exp.Tuple(expressions=[g.copy() for g in gcols])]
    sets += [exp.Tuple(expressions=[*[g.copy() for g in gcols], b.copy()]) for b in bcols]
    out = exp.select(*outer_cols).from_(inner.subquery("_dp_cells"))
    out.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
    if ctes is not None:
        out.set("with_", ctes)
    return out

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
When the rows were ranked by their values' hash (quantiles alone, bounded per unit:
:func:`~dpsql.sql.rewrite.rank_rows.pre_bucketed`), each row already carries its
bucket, ``_dp_q<j>`` (NULL for a NULL value; computed before the sort, which then carries an
integer instead of the NUMERIC value): the measure is ``COUNT(_dp_q<j>)`` and the cell
``COALESCE(_dp_q<j>, 0)``, the same rows in the same cells (:mod:`dpsql.sql.rewrite.buckets`).
The proxy receives at most one row per group and bucket, never a row of the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dpsql.sql.analysis import Analysis
from dpsql.sql.nodes import cast
from dpsql.sql.rewrite.buckets import bucket_specs, cell_of, spec
from dpsql.sql.rewrite.row_values import integer_quantile


def bucket_values(q: exp.Select, a: Analysis) -> exp.Select:
    """Add the per-bucket grouping sets for the analysis's quantile and mode measures (pure)."""
    specs = bucket_specs(a)
    if not specs:
        return q
    items = {e.alias: e for e in q.expressions if isinstance(e, exp.Alias)}
    buckets: list[exp.Expr | None] = [None] * len(specs)
    for i, m in enumerate(a.measures):
        if not m.selected:
            continue
        j = specs.index(spec(m))
        if buckets[j] is None:
            count = items[f"_dp_m{i}"].this
            if isinstance(count, exp.Filter):  # kept rows only (rank_rows.kept_only)
                count = count.this
            assert isinstance(count, exp.Count)
            buckets[j] = cell_of(m, count.this, integer_quantile(a, m))
    exprs = [b for b in buckets if b is not None]
    gcols = [exp.column(f"_dp_g{i}") for i in range(len(a.group_keys))]
    if all(
        _summable(e.this) or _distinct_of(e.this) is not None
        for e in q.expressions
        if isinstance(e, exp.Alias)
    ):
        return _summed_cells(q, gcols, exprs, _cell_columns(a))  # reads q, changes a copy
    q = q.copy()
    sets: list[exp.Expr] = [exp.Tuple(expressions=[g.copy() for g in gcols])]
    sets += [exp.Tuple(expressions=[*[g.copy() for g in gcols], b.copy()]) for b in exprs]
    extra = [exp.alias_(b.copy(), f"_dp_b{j}") for j, b in enumerate(exprs)]
    grouping = exp.Grouping(expressions=[b.copy() for b in exprs])
    cells = _cell_columns(a)
    for e in q.expressions:
        if isinstance(e, exp.Alias) and not e.alias.startswith("_dp_g") and e.alias not in cells:
            e.set("this", _groups_only(e.this, grouping, len(exprs)))
    q.set("expressions", [*q.expressions, *extra, exp.alias_(grouping, "_dp_set")])
    q.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
    return q


def _cell_columns(a: Analysis) -> frozenset[str]:
    """The columns a row of a bucketing's set is read for
    (:func:`dpsql.execute.selected_measures.split_bucket_rows`): each selected measure's count
    (``_dp_m<i>``) and each quantile's rows past R its interval ends rank (``_dp_le<i>``).
    Every other column (the other measures, the selection count, the outside, alarm and
    removed-mass counts) is read in the groups' rows only."""
    counts = {f"_dp_m{i}" for i, m in enumerate(a.measures) if m.selected}
    return frozenset(
        counts | {f"_dp_le{i}" for i, m in enumerate(a.measures) if m.kind == "quantile"}
    )


def _groups_only(e: exp.Expr, grouping: exp.Expr, n: int) -> exp.Expr:
    """``CASE WHEN GROUPING(<b_0>, ...) = 2^n - 1 THEN e END``: ``e`` in the groups' rows, NULL
    in the rows per bucket, which never read it (thousands of rows per quantile: a NULL is
    neither sent as digits nor converted by the proxy)."""
    full = exp.EQ(this=grouping.copy(), expression=exp.Literal.number(2**n - 1))
    return exp.Case(ifs=[exp.If(this=full, true=e)])


def _summable(e: exp.Expr) -> bool:
    """A measure whose per-group value is the sum of its per-(group, bucket) values (a count of
    units is one, counted as rows: :func:`~dpsql.sql.rewrite.bound_contributions.first_rows`)."""
    if isinstance(e, exp.Filter):
        e = e.this
    if isinstance(e, exp.Count):
        return not isinstance(e.this, exp.Distinct)
    return isinstance(e, exp.Coalesce) and isinstance(e.this, exp.Sum)


def _distinct_of(e: exp.Expr) -> exp.Expr | None:
    """``x`` of a ``COUNT(DISTINCT x)`` measure, else None."""
    if isinstance(e, exp.Count) and isinstance(e.this, exp.Distinct):
        xs = e.this.expressions
        return xs[0] if len(xs) == 1 else None
    return None


def _summed_cells(
    q: exp.Select,
    gcols: Sequence[exp.Expr],
    exprs: Sequence[exp.Expr],
    needed: frozenset[str] = frozenset(),
) -> exp.Select:
    """The grouping sets over the cells of one plain GROUP BY (keys, buckets)::

        SELECT _dp_g*, SUM(_dp_m*), _dp_b*, GROUPING(_dp_b*) AS _dp_set
        FROM (SELECT _dp_g*, <measures>, <b_j> AS _dp_b<j> FROM ... GROUP BY _dp_g*, _dp_b*)
        GROUP BY GROUPING SETS ((_dp_g*), (_dp_g*, _dp_b0), ...)

    The same rows as grouping sets over the bounded rows (every measure is a count or a sum,
    so a group's value is the sum over its cells), but the rows are aggregated by one plain
    GROUP BY, which Citus runs on the workers (it can't push GROUPING SETS down unless they
    group by the distribution column); the grouping sets then read one row per cell.
    A ``COUNT(DISTINCT x)`` measure (of a column without public keys) does not add up over
    cells: ``x`` becomes one more key of the cells (``x AS _dp_m<i>``) and the grouping sets
    count its distinct values, ``COUNT(DISTINCT _dp_m<i>)``: the same distinct values, NULL
    left out as before, in a set's cells as in its rows (more cells, never a unit's row).
    A column not in ``needed`` (:func:`_cell_columns`) is NULL in the rows per bucket.
    """
    cells = [exp.alias_(b.copy(), f"_dp_b{j}") for j, b in enumerate(exprs)]
    inner = q.copy()
    ctes = inner.args.get("with_")
    inner.set("with_", None)
    distinct: list[str] = []
    cols: list[exp.Expr] = []
    for e in inner.expressions:
        x = _distinct_of(e.this) if isinstance(e, exp.Alias) else None
        if x is not None:
            distinct.append(e.alias)
            e = exp.alias_(x.copy(), e.alias)
        cols.append(e)
    inner.set("expressions", [*cols, *cells])
    keys = [g.copy() for g in gcols] + [exp.column(c) for c in distinct]
    keys += [exp.column(c.alias) for c in cells]
    inner.set("group", exp.Group(expressions=keys))
    bcols = [exp.column(c.alias) for c in cells]
    grouping = exp.Grouping(expressions=[b.copy() for b in bcols])
    outer_cols: list[exp.Expr] = [g.copy() for g in gcols]
    for e in q.expressions:
        if not isinstance(e, exp.Alias) or e.alias.startswith("_dp_g"):
            continue
        total: exp.Expr = exp.Sum(this=exp.column(e.alias))
        if e.alias in distinct:
            total = exp.Count(this=exp.Distinct(expressions=[exp.column(e.alias)]))
        elif isinstance(e.this, (exp.Count, exp.Filter)):  # a count, or a count of units
            total = cast(exp.Coalesce(this=total, expressions=[exp.Literal.number(0)]), "bigint")
        if e.alias not in needed:
            total = _groups_only(total, grouping, len(bcols))
        outer_cols.append(exp.alias_(total, e.alias, copy=False))
    outer_cols += [exp.alias_(b.copy(), b.name) for b in bcols]
    outer_cols.append(exp.alias_(grouping, "_dp_set"))
    sets: list[exp.Expr] = [exp.Tuple(expressions=[g.copy() for g in gcols])]
    sets += [exp.Tuple(expressions=[*[g.copy() for g in gcols], b.copy()]) for b in bcols]
    out = exp.select(*outer_cols).from_(inner.subquery("_dp_cells", copy=False), copy=False)
    out.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
    if ctes is not None:
        out.set("with_", ctes)
    return out

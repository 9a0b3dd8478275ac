"""The row-value columns of the private rows a bounded statement reads (``_dp_v<k>``): each
measure's value made total and clamped (:func:`value_sql`), and the unclamped copies that the
removed-mass, outside and alarm counts test (:mod:`dpsql.sql.bias`). One column per distinct
expression (:func:`value_column`), added to the rows' SELECT list; used by
:func:`~dpsql.sql.rewrite.bound_contributions.bound_contributions`."""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.nodes import POSTGRES, cast
from dpsql.sql.rewrite.clamp_values import clamp_values
from dpsql.sql.rewrite.make_total import make_total


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
        and m.arg_sql in a.integer_values
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


def value_column(v: exp.Expr, inner: list[exp.Expr], vcols: dict[str, exp.Expr]) -> exp.Expr:
    """The row-value column ``_dp_v<k>`` computing ``v`` (added to ``inner`` the first time)."""
    key = v.sql(POSTGRES, copy=False)  # v is fresh: generated in place
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
    return value_column(arg, inner, vcols)


def raw_columns(
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
        out[t.index] = value_column(value_sql(a, m), inner, vcols)
    return out


def outside_flags(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> dict[int, exp.Expr]:
    """For each bias target with ``declared`` columns, then each VARIANCE's or STDDEV's alarm
    (:func:`dpsql.sql.alarms.alarm_measures`), by measure index, a row-value column (added to
    ``inner``) true when one of them lies outside its declared bounds (its clamp changes it);
    NULL values are not outside (the clamp keeps them NULL)."""
    from dpsql.sql.alarms import alarm_measures
    from dpsql.sql.bias import bias_targets
    from dpsql.sql.rewrite.measure_dropped import never, outside_sql

    out: dict[int, exp.Expr] = {}
    wanted = [(t.index, t.measure, t.declared) for t in bias_targets(a)]
    wanted += [(i, a.measures[i], cols) for i, cols in alarm_measures(a)]
    for i, m, declared in wanted:
        cond = outside_sql(a, m, declared)
        if cond is not None:
            # the constant FALSE of proven columns needs no column of its own
            out[i] = cond if never(cond) else value_column(cond, inner, vcols)
    return out


def hashed_values(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> dict[int, exp.Expr]:
    """For each quantile measure, by index, a row-value column (added to ``inner``) holding its
    argument unclamped, as NUMERIC (``CAST(x AS NUMERIC)``: a no-op for a NUMERIC column): what
    a pre-bucketed statement's rows are ordered by the hash of
    (:func:`~dpsql.sql.rewrite.rank_rows.rank_rows`), and what its buckets test for NULL (the
    clamp is strict: NULL exactly when the argument is). The clamp
    is then computed once per row, for the bucket (PostgreSQL inlines the rows' columns into
    every expression that reads them: hashing and testing the clamped value computed it three
    times)."""
    out: dict[int, exp.Expr] = {}
    for i, m in enumerate(a.measures):
        if m.kind == "quantile" and m.arg is not None:
            raw = cast(make_total(m.arg, a.column), "numeric")
            out[i] = value_column(raw, inner, vcols)
    return out


def alarmed_values(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr], hashed: dict[int, exp.Expr]
) -> dict[int, exp.Expr]:
    """For each quantile whose outside count is released (:func:`dpsql.sql.alarms.quantile_alarms`:
    the first measure of its bucketing), by measure index, its value unclamped in the type it is
    bucketed in: the NUMERIC of ``hashed``, or for an :func:`integer_quantile` its argument (a
    row-value column added to ``inner``), which :func:`~dpsql.sql.rewrite.buckets.pre_bucket`
    tests against the range and buckets instead of the clamped value."""
    from dpsql.sql.alarms import quantile_alarms

    out: dict[int, exp.Expr] = {}
    for i, _, _ in quantile_alarms(a):
        m = a.measures[i]
        if integer_quantile(a, m):
            assert m.arg is not None
            out[i] = value_column(make_total(m.arg, a.column), inner, vcols)
        else:
            out[i] = hashed[i]
    return out


def flagged_values(
    a: Analysis, inner: list[exp.Expr], vcols: dict[str, exp.Expr]
) -> dict[int, exp.Expr]:
    """On the row path without pre-bucketing (a quantile beside a SUM, AVG or COUNT(DISTINCT
    x), ...; every quantile of rows not ranked per unit): for each quantile whose outside count
    is released, by measure index, its value unclamped as NUMERIC (an
    :func:`integer_quantile`'s in its own integer type: no NUMERIC per row), a row-value column
    added to ``inner``, which the count tests against the range."""
    from dpsql.sql.alarms import quantile_alarms

    out: dict[int, exp.Expr] = {}
    for i, _, _ in quantile_alarms(a):
        m = a.measures[i]
        assert m.arg is not None
        raw = make_total(m.arg, a.column)
        if not integer_quantile(a, m):
            raw = exp.cast(raw, "numeric")
        out[i] = value_column(raw, inner, vcols)
    return out

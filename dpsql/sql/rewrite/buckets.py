"""A quantile's bucket and a mode's candidate of a value, as SQL: the cells bucketed measures count.

:func:`bucket_sql` writes, for a quantile over the clamped value v (public grid of B buckets over
[lo, grid_hi)), ``LEAST(GREATEST(width_bucket(v, lo, grid_hi, B), 1), B) - 1`` (or the same
number without a NUMERIC division per row: :func:`_scaled_bucket`), and for mode() the value's
text when it is a public candidate. :mod:`dpsql.sql.rewrite.bucket_values` groups the bounded
rows by them; :mod:`dpsql.sql.rewrite.bound_contributions` computes a quantile's bucket before
the rows are ranked, so that the sort carries an integer (``pre_bucketed``).
"""

from __future__ import annotations

import math
from fractions import Fraction

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Measure, needs_group_rank
from dpsql.sql.nodes import cast
from dpsql.sql.rewrite.literals import numeric


def bucket_specs(a: Analysis) -> list[tuple[str, ...]]:
    """The distinct bucketings of the analysis's quantile/mode measures, in order of first use."""
    out: list[tuple[str, ...]] = []
    for m in a.measures:
        if m.selected and spec(m) not in out:
            out.append(spec(m))
    return out


def spec(m: Measure) -> tuple[str, ...]:
    arg = m.arg_sql
    if m.kind == "quantile":
        return ("quantile", arg, str(m.lo), str(grid_hi(m)), str(m.buckets))
    return ("mode", arg, repr(m.candidates), str(m.candidates_from))  # count_keys: the same


def grid_hi(m: Measure) -> Fraction:
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
    width = grid_hi(m) - m.lo
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
    floor = cast(exp.Floor(this=scaled), "int")
    low = exp.Greatest(this=floor, expressions=[exp.Literal.number(0)])
    return exp.Least(this=low, expressions=[exp.Literal.number(m.buckets - 1)])


def bucket_sql(m: Measure, v: exp.Expr, integer: bool = False) -> exp.Expr:
    if m.kind == "quantile":
        fast = _scaled_bucket(m, v, integer)
        if fast is not None:
            return fast
        if integer:
            v = cast(v.copy(), "numeric")
        wb = exp.Anonymous(
            this="width_bucket",
            expressions=[v, numeric(m.lo), numeric(grid_hi(m)), exp.Literal.number(m.buckets)],
        )
        one = exp.Literal.number(1)
        clamped = exp.Least(
            this=exp.Greatest(this=wb, expressions=[one]),
            expressions=[exp.Literal.number(m.buckets)],
        )
        return exp.Sub(this=clamped, expression=one.copy())
    text = cast(v.copy(), "text")
    if m.candidates is not None:
        cond: exp.Expr = (
            exp.In(this=text, expressions=[exp.Literal.string(c) for c in m.candidates])
            if m.candidates
            else exp.false()  # no candidate: no value is ever returned
        )
    else:
        assert m.candidates_from is not None
        parts = m.candidates_from.split(".")
        col = cast(exp.column(parts[-1], quoted=True), "text")
        public = exp.select(col).from_(exp.to_table(".".join(parts[:-1])))
        cond = exp.In(this=text, query=public.subquery())
    return exp.Case(ifs=[exp.If(this=cond, true=text.copy())])


PRE_BUCKETED = "_dp_q"
"""Prefix of the row columns that hold a quantile's bucket computed before the rows are ranked
(:func:`pre_bucket`): ``_dp_q<j>`` for the bucketing ``j`` of :func:`bucket_specs`."""


def pre_bucket(
    m: Measure,
    v: exp.Expr,
    integer: bool = False,
    raw: exp.Expr | None = None,
    outside: exp.Expr | None = None,
) -> exp.Expr:
    """``CASE WHEN v IS NULL THEN NULL ELSE <bucket of v> END``: a quantile's bucket of the
    clamped value ``v`` (:func:`bucket_sql`), NULL exactly when ``v`` is, so that ``COUNT`` of it
    is ``COUNT(v)`` (:func:`bucket_sql` puts NULL in bucket 0, whose count it doesn't add to).
    ``raw``: the value unclamped, NULL exactly when ``v`` is (the clamp is strict), tested
    instead of ``v`` (which PostgreSQL would compute for the test too).

    ``outside``: the value unclamped in the type ``v`` is bucketed in (given with ``raw``):
    a value below ``lo`` gets the code -1, one above ``hi`` the code B (:func:`outside_codes`),
    any other the bucket of ``outside`` itself (it equals its clamp there)::

        CASE WHEN raw IS NULL THEN NULL WHEN outside < lo THEN -1
             WHEN outside > hi THEN B ELSE <bucket of outside> END

    so the row says whether its clamp changed it (a quantile's outside count reads that:
    dpsql.sql.alarms.quantile_alarms) at no more cost than the clamp (the same two tests); the
    codes sort as the clamped values' buckets (0, the bucket of ``hi``) do among themselves and
    the other buckets, so rows ranked by them are ranked as before; :func:`code_bucket` maps a
    code back to the bucket its clamped value is in."""
    null = exp.Is(this=(v if raw is None else raw).copy(), expression=exp.null())
    if outside is None:
        return exp.Case(ifs=[exp.If(this=null, true=exp.null())], default=bucket_sql(m, v, integer))
    below, above = outside_codes(m)
    lo, hi = (exp.Literal.number(int(x)) if integer else numeric(x) for x in (m.lo, m.hi))
    return exp.Case(
        ifs=[
            exp.If(this=null, true=exp.null()),
            exp.If(this=exp.LT(this=outside.copy(), expression=lo), true=_number(below)),
            exp.If(this=exp.GT(this=outside.copy(), expression=hi), true=_number(above)),
        ],
        default=bucket_sql(m, outside, integer),
    )


def _number(n: int) -> exp.Expr:
    return exp.Literal.number(n)


def outside_codes(m: Measure) -> tuple[int, int]:
    """The bucket codes of a value below and above a quantile's range (:func:`pre_bucket`):
    -1 and B (the buckets are 0 .. B - 1)."""
    return -1, m.buckets


def code_bucket(m: Measure, code: int) -> int:
    """The bucket of a code :func:`pre_bucket` gives: itself for a bucket, else the bucket of
    the clamped value: 0 for ``lo``, ``min(floor((hi - lo) B / (grid_hi - lo)), B - 1)`` for
    ``hi`` (what :func:`bucket_sql` gives ``hi``: ``width_bucket`` truncates, and a value at
    ``grid_hi`` or above goes to the last bucket)."""
    below, above = outside_codes(m)
    if code == below:
        return 0
    if code == above:
        width = grid_hi(m) - m.lo
        return min(math.floor((m.hi - m.lo) * m.buckets / width), m.buckets - 1)
    return code


def cell_of(m: Measure, counted: exp.Expr, integer: bool = False) -> exp.Expr:
    """The cell (bucket or candidate) of a row whose measure counts ``counted``: for a column
    :func:`pre_bucket` filled, ``COALESCE(_dp_q<j>, 0)`` (bucket 0 for NULL, as
    :func:`bucket_sql` puts it); else :func:`bucket_sql` of the value."""
    if isinstance(counted, exp.Column) and counted.name.startswith(PRE_BUCKETED):
        return exp.Coalesce(this=counted.copy(), expressions=[exp.Literal.number(0)])
    return bucket_sql(m, counted, integer)


def outside_counts(a: Analysis, conditions: dict[int, exp.Expr]) -> list[exp.Expr]:
    """Each quantile alarm's count, ``_dp_x<i>`` after the measures: ``COUNT(*) FILTER (WHERE
    _dp_rn = 1 [AND _dp_gr = 1] AND <outside>)``, the units whose first kept row (of their first
    kept group when groups are ranked) lies outside the range (``conditions``, by the index of
    the bucketing's first measure: its bucket code, :func:`pre_bucket`, or its unclamped
    value): one row per unit (per declared group when nothing is ranked, at most K of them), so
    L1 sensitivity 1 (K). Rows not bounded per unit (``privacy_unit: row``, or one row per unit
    proven: :func:`dpsql.sql.bias.unranked`) have no row number: ``COUNT(*) FILTER (WHERE
    <outside>)`` counts every row outside, each unit's one row in its one group (L1
    sensitivity 1). A count of rows: it adds up over the bucket cells
    (:mod:`dpsql.sql.rewrite.bucket_values`)."""
    ranked = not a.private.row_privacy and not a.unique_unit  # as dpsql.sql.bias.unranked
    out: list[exp.Expr] = []
    for i, cond in conditions.items():
        conds: list[exp.Expr] = []
        if ranked:
            conds.append(exp.EQ(this=exp.column("_dp_rn"), expression=exp.Literal.number(1)))
            if needs_group_rank(a):
                conds.append(exp.EQ(this=exp.column("_dp_gr"), expression=exp.Literal.number(1)))
        conds.append(cond.copy())
        count = exp.Filter(
            this=exp.Count(this=exp.Star()), expression=exp.Where(this=exp.and_(*conds))
        )
        out.append(exp.alias_(count, f"_dp_x{i}"))
    return out

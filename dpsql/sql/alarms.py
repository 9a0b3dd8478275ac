"""The outside counts of statistics whose bias is not estimated (issue 16): a VARIANCE's or
STDDEV's centred sum, a SUM or AVG where no bias target counts (rows not ranked per unit, a join
capped before joining), and each quantile's bucketing (MEDIAN, percentiles, MIN, MAX). Each
counts the units with a kept value outside a declared range: it tells when the interval's
premise (values inside the declared bounds) is plainly false. The removed-mass estimates of
COUNT and one-signed SUM are :mod:`dpsql.sql.bias`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.dp.accounting import Cost
from dpsql.dp.mechanisms import Laplace
from dpsql.sql.analysis import Analysis, Measure, decomposable, needs_group_rank
from dpsql.sql.bias import (
    BIAS_SHARE,
    DROPPED_SHARE,
    OUTSIDE_SHARE,
    bias_targets,
    declared_columns,
    unranked,
)

ALARM_SHARE = BIAS_SHARE * (1 - DROPPED_SHARE) * OUTSIDE_SHARE  # 1/80: a SUM's outside count's


@dataclass(frozen=True)
class AlarmPlan:
    """The outside count of a statistic whose bias is not estimated (VARIANCE, STDDEV): the
    units with a kept value of a ``declared`` column outside its declared range, one total over
    the groups (each unit once in its first kept group that holds one: L1 sensitivity 1; without
    a group order, in each such group, at most ``split`` declared groups), as a SUM's
    ``outside`` count (:class:`BiasTarget`) but at ``ALARM_SHARE`` of the statement's epsilon
    taken from the answer (the charge is unchanged). ``index``: the measure whose argument
    holds the columns (its centred sum)."""

    index: int
    measure: Measure
    declared: tuple[str, ...]
    outside: Laplace
    # a quantile's alarm (:func:`quantile_alarms`): the keys of the other quantile measures
    # of the same bucketing (MIN(x) beside MAX(x)), whose statistics it speaks for too
    also: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.measure.key

    @property
    def keys(self) -> tuple[str, ...]:
        """The measures whose statistics this count speaks for."""
        return (self.measure.key, *self.also)

    @property
    def cost(self) -> Cost:
        return self.outside.cost


VARIANCES = ("var_samp", "var_pop", "stddev_samp", "stddev_pop", "variance", "stddev")


def alarm_measures(a: Analysis) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """(measure index, declared columns) for each VARIANCE/STDDEV statistic's centred sum whose
    declared columns no bias target's outside count already holds, on the partials path.

    Rows not ranked per unit (``privacy_unit: row``, or one row per unit proven by the catalog:
    :func:`unranked`): also each SUM's sum and AVG's centred sum (no bias target measures them
    there, unless clamped narrower than declared): every row outside is counted, in its one
    group (the unit's one row), L1 sensitivity 1
    (:func:`dpsql.sql.rewrite.bound_contributions.bound_contributions`).

    A join of private tables capped at R before joining has no bias target: its SUM's and
    AVG's centred sums get the alarm too (the joined rows are ranked per unit as one table's).
    () for grouping sets (each set's own plan counts) and the ranked row path."""
    if a.grouping_sets:
        return ()
    flat = unranked(a)
    if not flat and (a.private.row_privacy or not decomposable(a)):
        return ()
    # a join of private tables capped at R before joining: no bias target (its removal is not
    # measured), but the joined rows are ranked per unit as one table's: the same count holds
    capped = sum(1 for _, _, p in a.sources if p is not None) > 1 and not a.pre_join_rows
    counted = {c for t in bias_targets(a) for c in t.declared}
    index = {m.key: i for i, m in enumerate(a.measures)}
    out: dict[int, tuple[str, ...]] = {}
    funcs = VARIANCES + (("sum", "avg") if flat or capped else ())
    for s in a.statistics:
        if s.func not in funcs:
            continue
        for key in s.measures:
            i = index[key]
            m = a.measures[i]
            if m.kind not in ("sum_centered", "sum") or i in out:
                continue
            cols = tuple(c for c in declared_columns(a, m) if c not in counted)
            if cols:
                out[i] = cols
                counted.update(cols)
    return tuple(out.items())


def quantile_alarms(a: Analysis) -> tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...]:
    """(measure index, declared columns, the other measures' keys) for each bucketing of a
    quantile (MEDIAN, percentiles, MIN, MAX) whose argument reads columns with declared
    bounds the catalog does not prove, when the rows are ranked per unit (the row path), on
    one private table.

    Its count: the units whose first kept row (in the keyed-hash order of their rows) in
    their first kept group (the group rank's first; in each group when nothing is ranked, at
    most the declared combinations) has a value outside the range the quantile clamps into,
    which the row's bucket code says (:func:`dpsql.sql.rewrite.buckets.pre_bucket`, every
    measure a quantile or a count: :func:`dpsql.sql.rewrite.rank_rows.pre_bucketed`)
    or its unclamped value (beside other measures): each unit once, a lower bound on the
    units with a kept value outside. After a join (of private tables, on their units; or with
    public ones) the rows are bounded per unit as one table's are, so the same count holds.

    Nothing ranked (``privacy_unit: row``, or one row per unit proven by the catalog:
    :func:`unranked`): every row outside is counted, in its one group (the unit's one row):
    L1 sensitivity 1, the exact number. Grouping sets: each set's own analysis
    (:func:`dpsql.sql.grouping_sets.set_analysis`) has its count, in that set's plan."""
    if a.grouping_sets or decomposable(a):
        return ()
    out: dict[tuple[str, ...], tuple[int, tuple[str, ...], tuple[str, ...]]] = {}
    for i, m in enumerate(a.measures):
        if m.kind != "quantile" or m.arg is None:
            continue
        shape = (m.arg_sql, str(m.lo), str(m.hi), str(m.grid_hi), str(m.buckets))
        if shape in out:
            j, cols, also = out[shape]
            out[shape] = (j, cols, (*also, m.key))
            continue
        cols = _bounded_columns(a, m)
        if cols:
            out[shape] = (i, cols, ())
    # beside other measures (the row path): a SUM, AVG, VARIANCE or STDDEV of the same argument
    # has no count of its own there (no bias target, no VARIANCE alarm): the quantile's speaks
    # for it too (the same values, the same range)
    return tuple((j, cols, (*also, *_same_values(a, j))) for j, cols, also in out.values())


def _same_values(a: Analysis, j: int) -> tuple[str, ...]:
    """The keys of the SUM-like measures (sums, AVG's and VARIANCE's centred sums) of quantile
    ``j``'s argument clamped into its range."""
    q = a.measures[j]
    assert q.arg is not None
    return tuple(
        m.key
        for m in a.measures
        if m.kind in ("sum", "sum_centered", "sum_sq_centered")
        and m.arg is not None
        and m.arg_sql == q.arg_sql
        and (m.lo, m.hi) == (q.lo, q.hi)
    )


def _bounded_columns(a: Analysis, m: Measure) -> tuple[str, ...]:
    """The columns of ``m``'s argument with declared bounds, not a per-unit table's capped
    ones, and none of them proven by the catalog (then no value is outside: ())."""
    assert m.arg is not None
    out: dict[str, None] = {}
    for c in m.arg.find_all(exp.Column):
        col = a.column(c)
        if col is None or col.bounds is None or c.name in a.capped_columns:
            continue
        if c.name in a.proven_bounds:
            return ()
        out.setdefault(c.name, None)
    return tuple(out)


def alarm_plans(a: Analysis, epsilon: Fraction) -> tuple[AlarmPlan, ...]:
    """The outside counts of :func:`alarm_measures` and :func:`quantile_alarms`, sharing
    ``epsilon`` evenly."""
    wanted = [(i, cols, ()) for i, cols in alarm_measures(a)] + list(quantile_alarms(a))
    if not wanted:
        return ()
    one = needs_group_rank(a) or unranked(a)  # each unit counted once (in one group)
    k = Fraction(1 if one else _domain_combinations(a))
    each = epsilon / len(wanted)
    return tuple(
        AlarmPlan(i, a.measures[i], cols, Laplace(k, each, Fraction(1)), also)
        for i, cols, also in wanted
    )


def _domain_combinations(a: Analysis) -> int:
    """The groups a unit may touch without ranking: the declared key combinations (<= G)."""
    k = 1
    for g in a.group_keys:
        k *= g.domain_size or 1
    return max(1, min(k, a.max_groups))

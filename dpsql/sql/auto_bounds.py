"""Contribution bounds chosen per query (``auto`` in the policy): what to choose.

A private query over a table whose policy says ``max_rows_per_unit: auto``,
``max_groups_per_unit: auto`` or (a column's) ``clamp: auto`` needs, before it is planned:

* ``rows``: R, rows of one unit kept per group, from each unit's largest row count in a group
  (without GROUP BY: its row count; with grouping sets: its row count, the coarsest group);
  near the top, or at the median unit when every statistic is an AVG, VAR, STDDEV or a quantile;
* ``groups``: G, groups one unit may touch, from each unit's number of groups (GROUP BY only;
  with few declared keys, their number, free: :func:`declared_groups`). Partition selection's
  threshold grows with G: for many small groups without declared keys (days), a fixed
  ``max_groups_per_unit`` may serve better;
* ``value_hi`` / ``value_lo``: the clamping range of a summed or averaged column, inside its
  declared bounds, from each unit's largest (smallest) value; one side is chosen when the
  declared range lies on one side of 0 (e.g. [0, 500]: the top only).

Each is one release of :class:`dpsql.dp.bounds.TopRank` over a public grid (this module) on
per-unit numbers counted by PostgreSQL (:mod:`dpsql.sql.rewrite.measure_bounds`), at a share of
the statement's epsilon (:data:`AUTO_SHARE`, split evenly over the items not chosen yet). The
execution side (:mod:`dpsql.execute.auto_bounds`) charges and stores each choice in the ledger;
later statements over the same slice reuse it free.

Soundness does not depend on the choice: the rewrite and the plan read the same R, G and range
from the resolved :class:`~dpsql.sql.analysis.Analysis`
(:func:`dpsql.sql.apply_bounds.apply_bounds`), as they read fixed numbers from the policy.

Joins of several private tables (always on their privacy units: :mod:`dpsql.sql.sources`) choose
the same way, from the joined rows: a joined row carries one unit's value, so each unit is still
one number per item (docs/mechanisms.md). R is chosen when every joined private table leaves
``max_rows_per_unit`` to ``auto`` (each then keeps a public P rows per unit before the join:
:mod:`dpsql.sql.join_cap`), G when every one leaves ``max_groups_per_unit`` to it, a clamp per
column as for one table; otherwise the smallest of the tables' numbers is kept (1 for ``auto``),
and the notice says so. No L1 cap over groups for joins (:func:`total_mode`).
"""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from dpsql.dp.bounds import integer_grid, value_grid
from dpsql.policy.tables import Column
from dpsql.sql.analysis import Analysis, Measure, Statistic, decomposable
from dpsql.sql.auto_bound_types import (
    DECLARED,
    DECLARED_TOTAL,
    ONE_ROW,
    RATIO_ROWS,
    TOTAL_ROWS,
    AutoItem,
    ChosenBound,
)
from dpsql.sql.join_cap import private_tables
from dpsql.sql.join_cap import privates as _privates
from dpsql.sql.nodes import POSTGRES

AUTO_SHARE = Fraction(1, 5)
"""The share of a statement's epsilon spent on the bounds it still needs (none when reused)."""

CLAMPED_KINDS = ("sum", "sum_centered", "sum_sq_centered")
_RATIOS = ("avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp")


def _rated(a: Analysis) -> list[Statistic]:
    """The statistics R is chosen for: all but COUNT(DISTINCT <privacy unit>), a count of
    units, which R does not move. A unit in a group keeps at least one of its rows there at any
    R >= 1 and counts once, so the count's value, its sensitivity (G: one per group, never R,
    :func:`dpsql.sql.plan._make_plan`) and what the bounds leave out of it (units past G only)
    are the same at every R (docs/mechanisms.md, "COUNT(DISTINCT unit) and the choice of R")."""
    return [
        s
        for s in a.statistics
        if not (
            s.func == "count_distinct"
            and all(a.measure(k).kind == "count_units" for k in s.measures)
        )
    ]


def _slice(a: Analysis, groups: bool) -> str:
    """The rows a choice is measured on, as text: tables, joins, filter (and grouping)."""
    parts = [a.table, a.alias]
    parts += [f"{al}={t}" for al, t, _ in a.sources]
    parts += [j.sql(POSTGRES) for j in a.joins]
    parts.append(a.where.sql(POSTGRES) if a.where is not None else "")
    if groups:
        parts += [g.expr.sql(POSTGRES) + f"{g.keys}" for g in a.group_keys]
        parts.append(str(a.grouping_sets))
    return "\x1f".join(parts)


def whole_table_rows(a: Analysis) -> tuple[AutoItem, ...]:
    """The item of R over the whole of ``a``'s table (``SELECT COUNT(*) FROM t``: rows per unit
    over all its rows, no filter, no grouping), under the aliases such a statement has (the
    table's name, or ``a``'s alias): their ledger keys. A unit has no more rows in any slice
    of the table, nor in any group of one, than in all of it, and touches no more groups than
    it has rows: such a bound, stored by an earlier statement (a released value), stands for
    a choice the guard refused here (too few units) better than the defaults (1 row, 1 group:
    an ordinary filtered COUNT 15-70% low, newcomer22 #10). Nothing for a join."""
    if a.joins or a.sources or not rows_auto(a):
        return ()
    out = []
    for alias in dict.fromkeys((a.table.rsplit(".", 1)[-1], a.alias)):
        whole = "\x1f".join([a.table, alias, ""])
        out.append(AutoItem("rows", (), whole, per_group=False))
    return tuple(out)


def wider_value(it: AutoItem, rows: Fraction) -> Fraction | None:
    """What item ``it`` keeps when its choice fell back and the table's rows per unit over all
    its rows is ``rows`` (:func:`whole_table_rows`): R for a top-aimed R, G (at most its grid's
    top), a COUNT's L1 cap over groups, a SUM's (``rows`` times its per-row bound); None for the
    others (a clamp keeps the declared range anyway; a median-aimed R, 1: less noise)."""
    if it.kind == "rows" and not it.median:
        return rows
    if it.kind == "groups":
        return min(rows, it.grid[-1]) if it.grid else rows
    if it.kind == "total" and it.measure is not None:
        return rows * it.measure.per_row()
    return None


def rows_auto(a: Analysis) -> bool:
    """R is left to ``auto`` by every private table ``a`` reads (one, or a join of several)."""
    return all(p.auto_rows for p in _privates(a))


def groups_auto(a: Analysis) -> bool:
    """G is left to ``auto`` by every private table ``a`` reads."""
    return all(p.auto_groups for p in _privates(a))


def auto_items(a: Analysis, totals: bool = True) -> tuple[AutoItem, ...]:
    """The bounds ``a`` needs chosen (none for fixed policies); ``totals=False``: R, G and
    clamps even where an L1 cap over groups applies (the bounds a policy can fix: the accuracy
    benchmark's hand-tuned search)."""
    if not a.measures:
        return ()  # nothing measured (SELECT DISTINCT of public keys): no bound to choose
    items: list[AutoItem] = []
    grouped_slice = _slice(a, True)
    if totals and total_mode(a):
        return _total_items(a, grouped_slice)
    one = one_row(a)  # R = G = 1, free (policy_choices)
    total = declared_total(a) is not None  # R (but a ratio's) and G at most N, free
    if (
        rows_auto(a)
        and not one
        and any(m.kind != "count_units" for m in a.measures)
        and not ratio_rows(a)
        and not (total and not all(s.func in _RATIOS for s in _rated(a)))
    ):
        per_group = a.grouped and not a.grouping_sets
        grid = tuple(Fraction(v) for v in integer_grid(rows_ceiling(a)))
        sl = grouped_slice if per_group else _slice(a, False)
        # A ratio (AVG, VAR, STDDEV) counts a unit's extra rows at its own mean: capping rows
        # only reweights units while R multiplies its noise, so R aims at the median unit. Not
        # lower: the reweighting's bias, chance alone when units' means do not depend on their
        # rows, is as large as the noise saved (docs/accuracy.md, "The two misses"). A quantile
        # (MEDIAN, percentiles, MIN, MAX) likewise: the rows a cap leaves out only reweight
        # units in the ranking, while its rank error grows with R (R rows per unit is its
        # utility's sensitivity): R = 363 put the benchmark's median 18,247 rows from its rank
        ratios = all(s.func in (*_RATIOS, "quantile") for s in _rated(a))
        items.append(AutoItem("rows", grid, sl, per_group=per_group, median=ratios))
    if groups_auto(a) and a.grouped and not one and declared_groups(a) is None and not total:
        grid = tuple(Fraction(v) for v in integer_grid(groups_ceiling(a)))
        items.append(AutoItem("groups", grid, grouped_slice))
    seen: set[str] = set()
    for m in a.measures:
        col = auto_column(a, m)
        if col is None or m.arg is None:
            continue
        text = m.arg_sql
        if text in seen:
            continue
        seen.add(text)
        anchor = min(max(Fraction(0), m.lo), m.hi)
        integer = col.family == "integer"
        # AVG per group at R = 1: partials are per-group means (not VAR / STDDEV, where a lower
        # clamp cuts the spread itself)
        means = ratio_rows(a) and all(s.func == "avg" for s in _rated(a))
        sl = grouped_slice if means else _slice(a, False)
        for kind, far in (("value_hi", m.hi), ("value_lo", m.lo)):
            if far != anchor:
                grid = value_grid(anchor, far, integer)
                items.append(
                    AutoItem(kind, grid, sl, text, m.arg, anchor, integer, group_mean=means)  # type: ignore[arg-type]
                )
    return tuple(items)


TOTAL_KINDS = ("count_rows", "count_values", "sum")
TOTAL_STEPS_BELOW = 20
"""A SUM's L1-cap grid runs from its per-row bound times the rows ceiling down to about 2^-20 of
the per-row bound, sqrt(2) apart: 2 (log2(ceiling) + 20) candidates (80 for 1,000,000 rows)."""


def total_mode(a: Analysis) -> bool:
    """True when ``auto`` bounds a unit's COUNT and SUM partials by an L1 cap over all its groups
    (Amin et al. 2019: a bound on the L1 norm of a user's contribution vector) instead of R rows
    in each of G groups: per-group COUNT and SUM statistics only (COUNT(DISTINCT unit) beside
    them keeps G), on partials (decomposable), one private table or a join of private tables
    with ``auto`` R (each keeps P rows per unit before the join). With grouping sets, one L
    per measure serves every set (each set's partials are scaled into L over that set's
    groups, as a plain GROUP BY's): a unit's total (its rows, its values, or SUM(|x|) of its
    clamped values: the number L is chosen from) bounds the L1 norm of its partials over the
    groups of any set, since each row lies in one group of each set.

    Why: the noise of G·R·c assumes a unit fills every one of its G groups with R rows of the
    clamp c, while a unit rarely does; a cap L on what it adds over all its groups bounds the
    same vector in L1 with noise L, chosen from each unit's own total (SUM(amount) by category
    on the accuracy benchmark: G·R·c = 8 · 64 · 442 = 226,000 against L of about 20,000).
    Rows per group are then not bounded apart (R = the rows ceiling, ``auto_max_rows_per_unit``)
    and values keep their declared range (no clamp to choose): both only add bias under L.
    """
    if not rows_auto(a) or (a.joins and not a.pre_join_rows):
        # a public table's fan-out is bounded by R (join_fanout), which this sets to its
        # ceiling; a join of private tables with auto R keeps P before the join (join_cap)
        return False
    return total_shape(a)


def total_shape(a: Analysis) -> bool:
    """Per-group COUNT and SUM statistics only (COUNT(DISTINCT unit) beside them), on partials
    (decomposable), rows not one per unit: the statements an L1 cap over a unit's groups
    bounds (:func:`total_mode`, :func:`declared_total`)."""
    if not (a.grouped and a.statistics) or not decomposable(a) or one_row(a):
        return False
    if not all(s.func in ("count", "sum", "count_distinct") for s in a.statistics):
        return False
    return any(m.kind in TOTAL_KINDS for m in a.measures)


def declared_total(a: Analysis) -> int | None:
    """N, the rows one unit has in all as the policy declares it (``max_rows_per_unit_total``),
    for a statement over that one private table (no join: a join's rows per unit are not the
    table's); None otherwise.

    A per-unit total bounds what a unit adds over all its groups (the L1 cap ``auto`` chooses
    from the data as L, :func:`total_mode`): a per-group COUNT's partials are scaled into N
    rows and a SUM's into N times its per-row bound (:func:`declared_choices`), and ``auto`` R
    and G are at most N, free (:func:`policy_choices`): a unit with N rows has at most N in a
    group and touches at most N groups. The rewrite enforces all three, so privacy does not
    rest on the number; that nothing is dropped does (the data owner's word, as for declared
    max_rows_per_unit)."""
    if a.joins or a.sources:
        return None
    return a.private.max_rows_per_unit_total


def declared_choices(a: Analysis) -> tuple[ChosenBound, ...]:
    """The L1 caps over groups a declared per-unit total N gives (:func:`declared_total`),
    whatever R and G are (declared or ``auto``): L = N per-row bounds for each per-group
    COUNT and SUM (rows: N; a SUM: N times its largest absolute value); none otherwise. Set
    by the analyzer (:func:`dpsql.sql.apply_bounds.with_declared_total`), nothing spent."""
    n = declared_total(a)
    if n is None or not total_shape(a):
        return ()
    out: dict[str, ChosenBound] = {}
    for m in a.measures:
        if m.kind not in TOTAL_KINDS or m.total is not None or m.per_row() <= 0:
            continue
        value = n * m.per_row()
        out.setdefault(
            total_column(m),
            ChosenBound("total", total_column(m), value, Fraction(0), 0, 0, rule=DECLARED_TOTAL),
        )
    return tuple(out.values())


def total_column(m: Measure) -> str:
    """The name of a measure's L1-cap item (kind and argument: COUNT(x) and SUM(x) differ)."""
    return f"{m.kind}({m.arg.sql('postgres') if m.arg is not None else ''})"


def _total_items(a: Analysis, grouped_slice: str) -> tuple[AutoItem, ...]:
    items: list[AutoItem] = []
    if groups_auto(a) and declared_groups(a) is None and declared_total(a) is None:
        grid = tuple(Fraction(v) for v in integer_grid(groups_ceiling(a)))
        items.append(AutoItem("groups", grid, grouped_slice))
    seen: set[str] = set()
    ceiling = rows_ceiling(a)
    for m in a.measures:
        name = total_column(m)
        if m.kind not in TOTAL_KINDS or name in seen or m.total is not None:
            continue  # (a declared per-unit total: L is the policy's, nothing to choose)
        seen.add(name)
        if m.kind == "sum":
            top = m.per_row() * ceiling
            if top <= 0:
                continue  # SUM of a constant 0 (or bounds [0, 0]): nothing to cap
            steps = 2 * (ceiling.bit_length() + TOTAL_STEPS_BELOW)
            grid = value_grid(Fraction(0), top, m.integral, steps)
        else:
            grid = tuple(Fraction(v) for v in integer_grid(ceiling))
        items.append(
            AutoItem("total", grid, grouped_slice, name, m.arg, integer=m.integral, measure=m)
        )
    return tuple(items)


DECLARED_GROUPS_MAX = 32
"""With declared keys on every GROUP BY key (``keys:``, or a ``keys_from`` table's, read when the
statement is prepared: :func:`dpsql.execute.group_keys.inline_key_tables`) and at most this many
combinations, auto G is their number: no unit can touch more, nothing is dropped, and nothing is
spent choosing it."""


def declared_groups(a: Analysis) -> int | None:
    """The number of declared key combinations, when it is G (see DECLARED_GROUPS_MAX)."""
    if not a.grouped:
        return None  # with grouping sets: the finest set's combinations bound every set's
    n = 1
    for g in a.group_keys:
        size = g.domain_size  # declared keys, narrowed by the WHERE clause
        if size is None:
            return None
        n *= size
    return max(n, 1) if n <= DECLARED_GROUPS_MAX else None  # none left by WHERE: one


def ratio_rows(a: Analysis) -> bool:
    """True when auto R is 1 without a choice: every statistic is a ratio (AVG, VAR, STDDEV) or
    a quantile (MEDIAN, percentiles, MIN, MAX) computed per group (GROUP BY, no grouping sets).

    A quantile per group likewise: the rows a cap leaves out only reweight units in the ranking
    while R rows per unit is its utility's sensitivity (session 27, the accuracy benchmark at
    epsilon 1, 200 runs: MEDIAN(amount) by category 0.0536 median relative error at the R chosen
    at the median unit, 6, against 0.00901 at R = 1, the best hand-tuned bound, covering 1.000;
    MAX(amount) by category 0.554 -> 0.526).

    A ratio's noise over its value is about G R c / (epsilon N_g(R)), where N_g(R), the rows a
    group keeps, grows more slowly than R (units with fewer than R rows in the group add fewer),
    so R = 1 gives the least noise; capping rows moves a ratio only by reweighting units
    (none when a unit's values do not depend on how many rows it has), not by removing mass.
    Per group the noise dominates (it grows with G while each group's rows shrink): on the
    accuracy benchmark AVG(amount) by category, 8 groups, went from 0.12 (R at the median unit,
    6) to 0.05 median relative error. With few groups the noise is small and the reweighting
    can dominate (PUMS, AVG(income) by sex: one row a person moves the women's average by 8%,
    two rows by 2%, as larger households earn less per row): so only when a unit may touch at
    least :data:`RATIO_ROWS_GROUPS` groups (G declared, or fixed, not chosen from the data);
    otherwise, and without GROUP BY, R is chosen at the median unit (:func:`auto_items`).
    """
    if not (rows_auto(a) and a.grouped and not a.grouping_sets and a.statistics):
        return False
    rated = _rated(a)  # (beside a COUNT(DISTINCT unit), which no R moves)
    if not rated or not all(s.func in (*_RATIOS, "quantile") for s in rated):
        return False
    g = declared_groups(a) if groups_auto(a) else min(p.groups_bound for p in _privates(a))
    return g is not None and g >= RATIO_ROWS_GROUPS


def rows_ceiling(a: Analysis) -> int:
    """The top of auto R's grid: the tables' ``auto_max_rows_per_unit`` (public; the smallest
    of a join's), and in a join at most P^k, the joined rows one unit can have
    (:mod:`dpsql.sql.join_cap`)."""
    top = min(p.auto_max_rows_per_unit for p in _privates(a))
    n = declared_total(a)
    if n is not None:  # no unit has more rows in a group than in all
        top = min(top, n)
    if a.pre_join_rows:
        top = min(top, a.pre_join_rows ** private_tables(a))
    return top


def groups_ceiling(a: Analysis) -> int:
    """The top of auto G's grid: the tables' ``auto_max_groups_per_unit`` (public)."""
    return min(p.auto_max_groups_per_unit for p in _privates(a))


RATIO_ROWS_GROUPS = 4
"""Per-group ratios keep R = 1 from this many groups per unit (:func:`ratio_rows`)."""


def policy_choices(a: Analysis) -> tuple[ChosenBound, ...]:
    """The auto bounds fixed without looking at the data (free): G from few declared keys, R = 1
    for per-group ratios (:func:`ratio_rows`)."""
    out = []
    if one_row(a):
        if rows_auto(a):
            out.append(ChosenBound("rows", "", Fraction(1), Fraction(0), 0, 0, rule=ONE_ROW))
        if groups_auto(a) and a.grouped:
            out.append(ChosenBound("groups", "", Fraction(1), Fraction(0), 0, 0, rule=ONE_ROW))
        return tuple(out)
    total = declared_total(a)
    rated = _rated(a)
    ratios = bool(rated) and all(s.func in _RATIOS for s in rated)
    if ratio_rows(a):
        out.append(ChosenBound("rows", "", Fraction(1), Fraction(0), 0, 0, rule=RATIO_ROWS))
    elif total_mode(a):
        ceiling = Fraction(rows_ceiling(a))
        rule = TOTAL_ROWS if total is None else DECLARED_TOTAL  # (R = N: a declared total's)
        out.append(ChosenBound("rows", "", ceiling, Fraction(0), 0, 0, rule=rule))
    elif total is not None and rows_auto(a) and not ratios:
        r = Fraction(min(total, rows_ceiling(a)))
        out.append(ChosenBound("rows", "", r, Fraction(0), 0, 0, rule=DECLARED_TOTAL))
    n = declared_groups(a) if groups_auto(a) else None
    if total is not None and groups_auto(a) and a.grouped:
        g = min(total, groups_ceiling(a), n if n is not None else total)
        out.append(ChosenBound("groups", "", Fraction(g), Fraction(0), 0, 0, rule=DECLARED_TOTAL))
    elif n is not None:
        out.append(ChosenBound("groups", "", Fraction(n), Fraction(0), 0, 0, rule=DECLARED))
    if total is not None and total_shape(a) and (rows_auto(a) or groups_auto(a)):
        caps = {  # the analyzer's caps (declared_choices), named in the notice
            total_column(m): m.total
            for m in a.measures
            if m.kind in TOTAL_KINDS and m.total is not None
        }
        out += [
            ChosenBound("total", name, cap, Fraction(0), 0, 0, rule=DECLARED_TOTAL)
            for name, cap in caps.items()
        ]
    return tuple(out)


def one_row(a: Analysis) -> bool:
    """The rows are one per unit: a per-unit derived table, or the catalog proves it
    (:mod:`dpsql.execute.unique_units`). Each unit then has one row in one group: R = G = 1
    drop nothing, and the answer's noise is the least (sensitivity G R c)."""
    return a.one_row_per_unit or a.unique_unit


def auto_column(a: Analysis, m: Measure) -> Column | None:
    """The policy column behind a clamped measure of one plain column with ``clamp: auto``."""
    if m.kind not in CLAMPED_KINDS or not isinstance(m.arg, exp.Column):
        return None
    col = a.column(m.arg)
    if col is None or col.bounds is None or col.clamp != "auto":
        return None
    if (m.lo, m.hi) != (col.lo, col.hi):
        return None
    return col

"""The SQL counting units per bucket of each ``auto`` bound's grid (:mod:`dpsql.sql.auto_bounds`).

One number per privacy unit and item, over the rows the query reads (its tables, joins with
public tables and, on their units, with other private tables, each capped at P rows per unit
before the join: :mod:`dpsql.sql.join_cap`; WHERE and, for declared keys, the key filter), then
the units per bucket, all from one pass over the rows::

    SELECT _dp_item, _dp_b, COUNT(*) AS _dp_c
    FROM (SELECT _dp_unit, MAX(_dp_n) AS _dp_rows_max, COUNT(*) AS _dp_groups,
                 SUM(_dp_n) AS _dp_rows_all, MAX(_dp_v0_max) AS _dp_v0_max, ...
          FROM (SELECT _dp_unit, COUNT(*) AS _dp_n, MAX(_dp_v0) AS _dp_v0_max, ...
                FROM (SELECT unit AS _dp_unit, <keys> AS _dp_g*, <clamped values> AS _dp_v*
                      FROM ... WHERE ...) AS _dp_r
                GROUP BY _dp_unit, _dp_g*) AS _dp_ug
          GROUP BY _dp_unit) AS _dp_u
    CROSS JOIN LATERAL (VALUES (0, width_bucket(<number>, '{<thresholds>}'::numeric[])),
                               (1, ...)) AS _dp_h(_dp_item, _dp_b)
    GROUP BY _dp_item, _dp_b

The (unit, group) level is there only when a number needs it (rows per group, groups, a
per-group mean); otherwise the rows are aggregated per unit directly. Each unit is counted once
per item (one bucket), which is what the selection's sensitivity needs. For a clamp of per-group
ratios at one row per unit per group (``AutoItem.group_mean``) the unit's number is its largest
(smallest) per-group mean instead of its largest value. Values are clamped into the declared
bounds first and measured as distances from the grid's anchor (NULL: distance 0). A unit's
largest value is the largest of its per-group largest values, its total the sum of its
per-group totals: the same numbers as aggregating its rows at once (NUMERIC: exact).
Deterministic SQL (no random(), no salt): the counts are a function of the data only.
"""

from __future__ import annotations

from itertools import product

from sqlglot import exp

from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bound_types import AutoItem
from dpsql.sql.auto_bounds import one_row
from dpsql.sql.nodes import cast
from dpsql.sql.rewrite.clamp_values import clamp_values
from dpsql.sql.rewrite.literals import number_text, numeric
from dpsql.sql.rewrite.make_total import make_total
from dpsql.sql.rewrite.row_values import value_sql
from dpsql.sql.rewrite.source_rows import source_select


def _key_filter(a: Analysis) -> list[exp.Expr]:
    """Rows whose declared keys (as text) are listed: as the bounded query filters them."""
    return [
        exp.In(
            this=cast(make_total(g.expr, a.column), "text"),
            expressions=[exp.Literal.string(k) for k in g.keys],
        )
        if g.keys
        else exp.false()  # no declared key left (WHERE k = 'a value not declared'): no row
        for g in a.group_keys
        if g.keys is not None
    ]


def _bucket(number: exp.Expr, item: AutoItem) -> exp.Expr:
    if not item.thresholds:  # a one-candidate grid: every unit is in bucket 0
        return exp.Literal.number(0)
    # one array literal of exact decimals (the same edges as ARRAY[CAST(t AS NUMERIC), ...])
    edges = "{" + ",".join(number_text(t) for t in item.thresholds) + "}"
    array = exp.cast(exp.Literal.string(edges), exp.DataType.build("numeric[]", "postgres"))
    return exp.Anonymous(this="width_bucket", expressions=[cast(number.copy(), "numeric"), array])


def _agg(fn: type[exp.AggFunc], name: str) -> exp.Expr:
    return fn(this=exp.column(name))


def measure_bounds(a: Analysis, items: tuple[AutoItem, ...]) -> exp.Select:
    """``SELECT _dp_item, _dp_b, _dp_c``: units per bucket of each item's grid (pure)."""
    assert items and not a.private.row_privacy
    unit = exp.column(a.private.privacy_unit, table=a.alias, quoted=True)
    cols: list[exp.Expr] = [exp.alias_(unit, "_dp_unit")]
    groups = [exp.column(f"_dp_g{i}") for i in range(len(a.group_keys))]
    cols += [
        exp.alias_(make_total(g.expr, a.column), f"_dp_g{i}") for i, g in enumerate(a.group_keys)
    ]
    values: dict[str, str] = {}
    totals: dict[int, exp.Expr] = {}  # total items: each unit's L1 over all its groups
    for i, it in enumerate(items):
        if it.kind == "total":
            totals[i] = _total_partial(a, it, cols, i)
            continue
        if it.arg is not None and it.column not in values:
            name = f"_dp_v{len(values)}"
            values[it.column] = name
            # clamped into the declared bounds (the measure's range before auto)
            col = a.column(it.arg) if isinstance(it.arg, exp.Column) else None
            assert col is not None and col.bounds is not None
            v = clamp_values(make_total(it.arg, a.column), a.column, col.lo, col.hi)
            cols.append(exp.alias_(v, name))
    # a join of private tables keeps P rows per unit of each before the join, as the answer's
    # SQL does (dpsql.sql.join_cap); which ones, by an unsalted keyed hash of the unit's own
    # rows: its numbers stay a function of its own rows (the answer's salt differs, so a unit
    # above P may keep other rows there: the choice's accuracy, not its privacy)
    rows = source_select(a, "", *cols)
    filters = ([a.where] if a.where is not None else []) + _key_filter(a)
    if filters:
        cond = exp.and_(*[exp.Paren(this=make_total(f, a.column)) for f in filters])
        rows = rows.where(cond, copy=False)
    means = any(it.group_mean for it in items)
    per_group = _needs_groups(items, groups, means)
    combos = _key_combinations(a, items) if per_group else None
    if one_row(a):  # the catalog proves one row per unit: nothing to group
        per_unit = _one_row_per_unit(rows, values, totals)
    elif per_group and combos is None:
        per_unit = _per_unit_and_group(rows, groups, values, totals, means)
    else:
        per_unit = _per_unit(rows, combos, values, totals, means)
    hist: list[exp.Expr] = []
    for i, it in enumerate(items):
        number: exp.Expr
        if it.kind == "rows":
            number = exp.column("_dp_rows_max" if it.per_group else "_dp_rows_all")
        elif it.kind == "groups":
            number = exp.column("_dp_groups")
        elif it.kind == "total":
            number = exp.column(f"_dp_t{i}_all")
        else:
            anchor = numeric(it.anchor)
            if it.kind == "value_hi":
                x = exp.column(f"{values[it.column]}_max")
                d: exp.Expr = exp.Sub(this=x, expression=anchor)
            else:
                x = exp.column(f"{values[it.column]}_min")
                d = exp.Sub(this=anchor, expression=x)
            number = exp.Greatest(
                this=exp.Coalesce(this=d, expressions=[exp.Literal.number(0)]),
                expressions=[exp.Literal.number(0)],
            )
        hist.append(exp.Tuple(expressions=[exp.Literal.number(i), _bucket(number, it)]))
    # each unit's row of numbers, unpivoted to one (item, bucket) per item: one pass over them
    unpivot = exp.Values(
        expressions=hist,
        alias=exp.TableAlias(
            this=exp.to_identifier("_dp_h"),
            columns=[exp.to_identifier("_dp_item"), exp.to_identifier("_dp_b")],
        ),
    )
    return (
        exp.select("_dp_item", "_dp_b", exp.alias_(exp.Count(this=exp.Star()), "_dp_c"))
        .from_(per_unit.subquery("_dp_u", copy=False), copy=False)
        .join(exp.Lateral(this=unpivot), join_type="cross", copy=False)
        .group_by("_dp_item", "_dp_b", copy=False)
    )


def _needs_groups(items: tuple[AutoItem, ...], groups: list[exp.Column], means: bool) -> bool:
    """Whether a unit's numbers need its per-group counts or means (rows per group, groups, a
    per-group mean), i.e. a (unit, group) level; without GROUP BY a unit is one group."""
    per_group = any(it.kind == "groups" or (it.kind == "rows" and it.per_group) for it in items)
    return bool(groups) and (per_group or means)


FILTER_COMBINATIONS = 8
"""Up to this many declared key combinations, a unit's per-group numbers are aggregates over its
rows with a FILTER per combination instead of a (unit, group) level: one hash aggregate per unit
(the bench statement, 5 categories: about 1.5x less CPU for this SQL; at 12 the two levels win)."""


def _key_combinations(a: Analysis, items: tuple[AutoItem, ...]) -> list[exp.Expr] | None:
    """One condition per declared key combination (``_dp_g0 = 'k0' AND ...``), when every group
    key is a column with declared ``keys`` (the rows are filtered to them: :func:`_key_filter`),
    there are at most :data:`FILTER_COMBINATIONS` and no item counts groups; else None.

    Each key is compared as an untyped literal, i.e. in the column's own type and collation, the
    equality GROUP BY uses: a row's group is the combination its text is declared as, so a
    combination's rows are exactly one group's (or none). Keys equal in that type (``1.0`` and
    ``1.00`` of a numeric) select the same rows, which changes no largest count or mean."""
    if any(it.kind == "groups" for it in items):
        return None  # (declared keys set G: only when a WHERE clause excludes every key)
    domains: list[list[exp.Expr]] = []
    n = 1
    for i, g in enumerate(a.group_keys):
        if g.keys is None or not g.keys or not isinstance(g.expr, exp.Column):
            return None
        n *= len(g.keys)
        if n > FILTER_COMBINATIONS:
            return None
        col = exp.column(f"_dp_g{i}")
        domains.append([exp.EQ(this=col.copy(), expression=exp.Literal.string(k)) for k in g.keys])
    return [exp.and_(*parts) if len(parts) > 1 else parts[0] for parts in product(*domains)]


def _per_unit(
    rows: exp.Select,
    combos: list[exp.Expr] | None,
    values: dict[str, str],
    totals: dict[int, exp.Expr],
    means: bool,
) -> exp.Select:
    """One row of numbers per unit from one aggregate per unit: ``_dp_rows_max`` (its largest
    row count in a group), ``_dp_rows_all``, ``<v>_max`` / ``<v>_min`` (its largest and smallest
    value, or per-group mean with ``means``), ``_dp_t<i>_all`` (a total item's sum over its
    groups), and ``_dp_groups`` without ``combos``.

    ``combos`` (:func:`_key_combinations`): a group's count or mean is the unit's aggregate over
    the rows of its key combination (``FILTER``), the largest (smallest) of them ``GREATEST``
    (``LEAST``, both ignoring NULL: a combination without rows or values); None: the unit is
    one group (no GROUP BY, or no number needs its groups)."""
    u = exp.column("_dp_unit")
    star = exp.Count(this=exp.Star())

    def per_group(agg: exp.Expr) -> list[exp.Expr]:
        if combos is None:
            return [agg.copy()]
        return [exp.Filter(this=agg.copy(), expression=exp.Where(this=c.copy())) for c in combos]

    def greatest(xs: list[exp.Expr]) -> exp.Expr:
        return exp.Greatest(this=xs[0], expressions=xs[1:]) if len(xs) > 1 else xs[0]

    def least(xs: list[exp.Expr]) -> exp.Expr:
        return exp.Least(this=xs[0], expressions=xs[1:]) if len(xs) > 1 else xs[0]

    out: list[exp.Expr] = [u.copy(), exp.alias_(greatest(per_group(star)), "_dp_rows_max")]
    if combos is None:
        out.append(exp.alias_(exp.Literal.number(1), "_dp_groups"))
    out.append(exp.alias_(star.copy(), "_dp_rows_all"))
    for name in values.values():
        if means:  # per-group ratios at R = 1: each unit's largest (smallest) per-group mean
            avg = exp.Avg(this=exp.column(name))
            hi, lo = greatest(per_group(avg)), least(per_group(avg))
        else:
            hi, lo = _agg(exp.Max, name), _agg(exp.Min, name)
        out += [exp.alias_(hi, f"{name}_max"), exp.alias_(lo, f"{name}_min")]
    for i, partial in totals.items():
        total = exp.Coalesce(this=partial, expressions=[exp.Literal.number(0)])
        out.append(exp.alias_(total, f"_dp_t{i}_all"))
    return _grouped(exp.select(*out), rows, "_dp_r", [u])


def _one_row_per_unit(
    rows: exp.Select, values: dict[str, str], totals: dict[int, exp.Expr]
) -> exp.Select:
    """:func:`_per_unit`'s numbers when each unit has one row (the catalog proves it, or a
    per-unit derived table: :func:`dpsql.sql.auto_bounds.one_row`), read off the row itself, with
    no aggregate: 1 row in 1 group, its value as its largest and smallest value (and as its
    one group's mean), a total item's partial over that row (:func:`_one_row_partial`). The same
    numbers as aggregating per unit, without a hash aggregate over every unit."""
    out: list[exp.Expr] = [
        exp.column("_dp_unit"),
        *[exp.alias_(exp.Literal.number(1), n) for n in ("_dp_rows_max", "_dp_groups")],
        exp.alias_(exp.Literal.number(1), "_dp_rows_all"),
    ]
    for name in values.values():
        out += [exp.alias_(exp.column(name), f"{name}_{end}") for end in ("max", "min")]
    for i, partial in totals.items():
        total = exp.Coalesce(this=_one_row_partial(partial), expressions=[exp.Literal.number(0)])
        out.append(exp.alias_(total, f"_dp_t{i}_all"))
    return exp.select(*out).from_(rows.subquery("_dp_r", copy=False), copy=False)


def _one_row_partial(partial: exp.Expr) -> exp.Expr:
    """A total item's aggregate (:func:`_total_partial`) over one row, as that row's value:
    ``COUNT(*)`` is 1, ``COUNT(x)`` 1 or 0 as x is NULL or not, ``SUM(ABS(x))`` ``ABS(x)``."""
    if isinstance(partial, exp.Count):
        if isinstance(partial.this, exp.Star):
            return exp.Literal.number(1)
        null = exp.Is(this=partial.this.copy(), expression=exp.null())
        return exp.Case(ifs=[exp.If(this=null, true=exp.Literal.number(0))],
                        default=exp.Literal.number(1))  # fmt: skip
    assert isinstance(partial, exp.Sum) and isinstance(partial.this, exp.Expr)
    return partial.this.copy()


def _per_unit_and_group(
    rows: exp.Select,
    groups: list[exp.Column],
    values: dict[str, str],
    totals: dict[int, exp.Expr],
    means: bool,
) -> exp.Select:
    """:func:`_per_unit`'s numbers (and ``_dp_groups``, the unit's number of groups) from two
    levels: the rows aggregated per (unit, group), those partials per unit."""
    u = exp.column("_dp_unit")
    star = exp.Count(this=exp.Star())
    inner: list[exp.Expr] = [u.copy(), exp.alias_(star.copy(), "_dp_n")]
    outer: list[exp.Expr] = [
        u.copy(),
        exp.alias_(_agg(exp.Max, "_dp_n"), "_dp_rows_max"),
        exp.alias_(star.copy(), "_dp_groups"),
        exp.alias_(_agg(exp.Sum, "_dp_n"), "_dp_rows_all"),
    ]
    for name in values.values():
        if means:  # per-group ratios at R = 1: each unit's largest (smallest) per-group mean
            inner.append(exp.alias_(exp.Avg(this=exp.column(name)), f"{name}_mean"))
            hi, lo = _agg(exp.Max, f"{name}_mean"), _agg(exp.Min, f"{name}_mean")
        else:
            inner.append(exp.alias_(_agg(exp.Max, name), f"{name}_max"))
            inner.append(exp.alias_(_agg(exp.Min, name), f"{name}_min"))
            hi, lo = _agg(exp.Max, f"{name}_max"), _agg(exp.Min, f"{name}_min")
        outer += [exp.alias_(hi, f"{name}_max"), exp.alias_(lo, f"{name}_min")]
    for i, partial in totals.items():
        inner.append(exp.alias_(partial, f"_dp_t{i}"))
        total = exp.Coalesce(this=_agg(exp.Sum, f"_dp_t{i}"), expressions=[exp.Literal.number(0)])
        outer.append(exp.alias_(total, f"_dp_t{i}_all"))
    ug = _grouped(exp.select(*inner), rows, "_dp_r", [u, *groups])
    return _grouped(exp.select(*outer), ug, "_dp_ug", [u])


def _grouped(q: exp.Select, source: exp.Select, alias: str, by: list[exp.Column]) -> exp.Select:
    """``q FROM (source) AS alias GROUP BY by``, built in place: ``q`` and ``source`` are this
    module's own fresh trees (no copy of the whole query at each step)."""
    sub = source.subquery(alias, copy=False)
    return q.from_(sub, copy=False).group_by(*[b.copy() for b in by], copy=False)


def _total_partial(a: Analysis, it: AutoItem, cols: list[exp.Expr], i: int) -> exp.Expr:
    """The aggregate of a total item over some of a unit's rows (adds its row value to
    ``cols``): their number (COUNT(*)), non-NULL values (COUNT(x)), or SUM(|x|) of the values
    clamped as the measure clamps them; summed over a unit's groups (NULL as 0), at least the
    L1 norm of its partials over all its groups."""
    m = it.measure
    assert m is not None
    if m.kind == "count_rows":
        return exp.Count(this=exp.Star())
    cols.append(exp.alias_(value_sql(a, m), f"_dp_t{i}"))
    v = exp.column(f"_dp_t{i}")
    if m.kind == "count_values":
        return exp.Count(this=v)
    return exp.Sum(this=exp.Abs(this=v))

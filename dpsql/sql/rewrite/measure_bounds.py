"""The SQL counting units per bucket of each ``auto`` bound's grid (:mod:`dpsql.sql.auto_bounds`).

One number per privacy unit and item, over the rows the query reads (its tables, joins with
public tables, WHERE and, for declared keys, the key filter), then the units per bucket::

    WITH _dp_rows AS (SELECT unit AS _dp_unit, <keys> AS _dp_g*, <clamped values> AS _dp_v*
                      FROM ... WHERE ...),
         _dp_ug AS (SELECT _dp_unit, COUNT(*) AS _dp_n FROM _dp_rows GROUP BY _dp_unit, _dp_g*),
         _dp_u AS (SELECT _dp_unit, MAX(_dp_n) AS _dp_rows_max, COUNT(*) AS _dp_groups,
                          SUM(_dp_n) AS _dp_rows_all FROM _dp_ug GROUP BY _dp_unit),
         _dp_x AS (SELECT _dp_unit, MAX(_dp_v0) AS _dp_x0, MIN(_dp_v0) AS ... GROUP BY _dp_unit)
    SELECT <item> AS _dp_item, width_bucket(<number>, ARRAY[<thresholds>]) AS _dp_b,
           COUNT(*) AS _dp_c FROM _dp_u GROUP BY 2
    UNION ALL ...

Each unit is counted once per item (one bucket), which is what the selection's sensitivity
needs. For a clamp of per-group ratios at one row per unit per group (``AutoItem.group_mean``)
the unit's number is its largest (smallest) per-group mean instead of its largest value. Values are clamped into the declared bounds first and measured as distances from the
grid's anchor (NULL: distance 0). Deterministic SQL (no random(), no salt): the counts are a
function of the data only.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bounds import AutoItem
from dpsql.sql.rewrite.bound_contributions import source_select, value_sql
from dpsql.sql.rewrite.clamp_values import clamp_values
from dpsql.sql.rewrite.literals import numeric
from dpsql.sql.rewrite.make_total import make_total


def _key_filter(a: Analysis) -> list[exp.Expr]:
    """Rows whose declared keys (as text) are listed: as the bounded query filters them."""
    return [
        exp.In(
            this=exp.cast(make_total(g.expr, a.column), "text"),
            expressions=[exp.Literal.string(k) for k in g.keys],
        )
        for g in a.group_keys
        if g.keys is not None
    ]


def _bucket(number: exp.Expr, item: AutoItem) -> exp.Expr:
    edges = exp.Array(expressions=[numeric(t) for t in item.thresholds])
    arg = exp.cast(number, "numeric")
    if not item.thresholds:  # a one-candidate grid: every unit is in bucket 0
        return exp.Literal.number(0)
    return exp.Anonymous(this="width_bucket", expressions=[arg, edges])


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
            totals[i] = _total_number(a, it, cols, i)
            continue
        if it.arg is not None and it.column not in values:
            name = f"_dp_v{len(values)}"
            values[it.column] = name
            # clamped into the declared bounds (the measure's range before auto)
            col = a.column(it.arg) if isinstance(it.arg, exp.Column) else None
            assert col is not None and col.bounds is not None
            v = clamp_values(make_total(it.arg, a.column), a.column, col.lo, col.hi)
            cols.append(exp.alias_(v, name))
    # one private table (auto_items): nothing is capped before a join, the salt is unused
    rows = source_select(a, "", *cols)
    filters = ([a.where] if a.where is not None else []) + _key_filter(a)
    if filters:
        rows = rows.where(exp.and_(*[exp.Paren(this=make_total(f, a.column)) for f in filters]))
    u = exp.column("_dp_unit")
    ug = (
        exp.select(u.copy(), exp.alias_(exp.Count(this=exp.Star()), "_dp_n"))
        .from_("_dp_rows")
        .group_by(u.copy(), *[g.copy() for g in groups])
    )
    n = exp.column("_dp_n")
    per_unit = (
        exp.select(
            u.copy(),
            exp.alias_(exp.Max(this=n.copy()), "_dp_rows_max"),
            exp.alias_(exp.Count(this=exp.Star()), "_dp_groups"),
            exp.alias_(exp.Sum(this=n.copy()), "_dp_rows_all"),
        )
        .from_("_dp_ug")
        .group_by(u.copy())
    )
    xs: list[exp.Expr] = [u.copy()]
    for name in values.values():
        xs.append(exp.alias_(exp.Max(this=exp.column(name)), f"{name}_max"))
        xs.append(exp.alias_(exp.Min(this=exp.column(name)), f"{name}_min"))
    for i, per_unit_total in totals.items():
        xs.append(exp.alias_(per_unit_total, f"_dp_t{i}_all"))
    source: exp.Expr = exp.to_table("_dp_rows")
    if any(it.group_mean for it in items):
        # per-group ratios at R = 1: each unit's largest (smallest) per-group mean
        means = [exp.alias_(exp.Avg(this=exp.column(n)), n) for n in values.values()]
        gm = exp.select(u.copy(), *means).from_("_dp_rows")
        source = gm.group_by(u.copy(), *[g.copy() for g in groups]).subquery("_dp_gm")
    per_value = exp.select(*xs).from_(source).group_by(u.copy())
    parts = []
    for i, it in enumerate(items):
        number: exp.Expr
        if it.kind == "rows":
            src, number = "_dp_u", exp.column("_dp_rows_max" if it.per_group else "_dp_rows_all")
        elif it.kind == "groups":
            src, number = "_dp_u", exp.column("_dp_groups")
        elif it.kind == "total":
            src, number = "_dp_x", exp.column(f"_dp_t{i}_all")
        else:
            src = "_dp_x"
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
        parts.append(
            exp.select(
                exp.alias_(exp.Literal.number(i), "_dp_item"),
                exp.alias_(_bucket(number, it), "_dp_b"),
                exp.alias_(exp.Count(this=exp.Star()), "_dp_c"),
            )
            .from_(src)
            .group_by(exp.Literal.number(1), exp.Literal.number(2))
        )
    body: exp.Query = parts[0]
    for p in parts[1:]:
        body = exp.union(body, p, distinct=False)
    out = exp.select("_dp_item", "_dp_b", "_dp_c").from_(body.subquery("_dp_hist"))
    out = out.with_("_dp_rows", as_=rows)
    if any(it.kind in ("rows", "groups") for it in items):
        out = out.with_("_dp_ug", as_=ug).with_("_dp_u", as_=per_unit)
    if values or totals:
        out = out.with_("_dp_x", as_=per_value)
    return out


def _total_number(a: Analysis, it: AutoItem, cols: list[exp.Expr], i: int) -> exp.Expr:
    """The per-unit aggregate of a total item (adds its row value to ``cols``): the unit's rows
    (COUNT(*)), non-NULL values (COUNT(x)), or SUM(|x|) of its values clamped as the measure
    clamps them -- at least the L1 norm of its partials over all its groups."""
    m = it.measure
    assert m is not None
    if m.kind == "count_rows":
        return exp.Count(this=exp.Star())
    cols.append(exp.alias_(value_sql(a, m), f"_dp_t{i}"))
    v = exp.column(f"_dp_t{i}")
    if m.kind == "count_values":
        return exp.Count(this=v)
    total = exp.Sum(this=exp.Abs(this=v))
    return exp.Coalesce(this=total, expressions=[exp.Literal.number(0)])

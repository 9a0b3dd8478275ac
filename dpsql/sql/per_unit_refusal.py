"""The words of a refused GROUP BY of the privacy unit: a table grouped by the unit and other
keys (a row per person per key), or by the unit alone in a shape dpsql does not read as a
per-person table (the statement's own rows, ordered and limited, joined, in a set operation).
Part of the analysis (:func:`dpsql.sql.analyze_aggregates.check_row_level`)."""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql import functions as fn
from dpsql.sql.sources import Ctx
from dpsql.sql.wording import plain_sql

__all__ = ["per_unit_alone", "per_unit_and_more"]


def _keys_written(block: exp.Select, group: exp.Group) -> list[exp.Expr]:
    """The GROUP BY's keys, ``GROUP BY 1, 2`` read as the select list's items."""
    keys = []
    for g in group.expressions:
        if isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit():
            i = int(g.this) - 1
            if 0 <= i < len(block.expressions):
                item = block.expressions[i]
                g = item.this if isinstance(item, exp.Alias) else item
        keys.append(g)
    return keys


_PICKS = (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET"))


def per_unit_alone(c: exp.Column, unit: str, table: str) -> tuple[str, str] | None:
    """The words and hint for a block grouped by the privacy unit alone that reached the
    row-level checks: dpsql reads such a block only as a derived table (or CTE) an aggregate
    outside it reads, so here it is the statement's own rows, or its ORDER BY/LIMIT picks units
    by their own values, or it is joined or in a set operation (newcomer31: the words said the
    unit 'can't be used in GROUP BY' and the hint grouped by it in a derived table, which each
    of these statements did). None for any other GROUP BY."""
    block = c.find_ancestor(exp.Select)
    group = block.args.get("group") if block is not None else None
    if block is None or group is None:
        return None
    keys = _keys_written(block, group)
    if len(keys) != 1 or not (isinstance(keys[0], exp.Column) and keys[0].name == unit):
        return None
    picked = " and ".join(w for k, w in _PICKS if block.args.get(k))
    why = (
        f" (here its {picked} would pick which {unit} to show by their own values)"
        if picked
        else ""
    )
    message = (
        f"a table grouped by {unit} alone has one row per {unit}, that {unit}'s own values{why}: "
        f"dpsql answers it only as a derived table or CTE that an aggregate outside it reads, "
        f"not returned as rows, ordered or limited inside, joined to another table or combined "
        f"by UNION, INTERSECT or EXCEPT"
    )
    per_unit = f"(SELECT {unit}, COUNT(*) AS n FROM {table} GROUP BY {unit}) t"
    hint = (
        f"aggregate its rows outside it, e.g. SELECT n, COUNT(*) FROM {per_unit} GROUP BY n; "
        f"for the top of the distribution a percentile: SELECT percentile_cont(0.99) WITHIN "
        f"GROUP (ORDER BY n) FROM {per_unit}"
    )
    return message, hint


def per_unit_and_more(ctx: Ctx, c: exp.Column, unit: str, table: str) -> tuple[str, str] | None:
    """The words and hint for a block grouped by the privacy unit AND other keys (``SELECT
    user_id, region, SUM(amount) ... GROUP BY user_id, region``, as a derived table to aggregate
    again): a row per person per region, which dpsql does not read as a per-person table;
    grouped by the unit alone, with the other key split out by FILTER, it answers; a count's
    average per person within each key is also its count over its distinct persons
    (newcomer22 #22: the words said the unit can't be grouped by, the hint grouped by it). None
    for any other GROUP BY."""
    block = c.find_ancestor(exp.Select)
    group = block.args.get("group") if block is not None else None
    if block is None or group is None:
        return None
    keys_written = _keys_written(block, group)  # GROUP BY 1, 2: the select list's items
    others = [g for g in keys_written if not (isinstance(g, exp.Column) and g.name == unit)]
    if not others or len(others) == len(keys_written):
        return None
    key = others[0]
    value = "<a value>"
    if isinstance(key, exp.Column):
        try:
            keys = ctx.column(key).keys
        except Exception:  # not a column of this table: the generic words
            keys = None
        if keys:
            value = f"'{keys[0]}'" if isinstance(keys[0], str) else str(keys[0])
    agg = next((n for e in block.expressions for n in e.walk() if fn.is_aggregate(n)), None)
    call = plain_sql(agg) if agg is not None and not agg.args.get("filter") else "COUNT(*)"
    ks = ", ".join(plain_sql(g) for g in others)
    message = (
        f"a derived table grouped by {unit} and {ks} has a row per {unit} for each {ks}, not "
        f"one per person: dpsql reads a per-person table only grouped by {unit} alone"
    )
    per_key = (
        f"the rows per {unit} within each {ks}, averaged, are SELECT {ks}, COUNT(*) * 1.0 / "
        f"COUNT(DISTINCT {unit}) FROM {table} GROUP BY {ks}; "
        if call == "COUNT(*)"
        else ""
    )
    return message, (
        f"{per_key}per person, dpsql answers a derived table grouped by {unit} alone (one row "
        f"per person): split {ks} out with FILTER, e.g. SELECT AVG(v) FROM (SELECT {unit}, "
        f"{call} FILTER (WHERE {plain_sql(key)} = {value}) AS v FROM {table} GROUP BY {unit}) t"
    )

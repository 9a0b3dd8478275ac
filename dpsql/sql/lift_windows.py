"""A SELECT that computes window functions over its own aggregates, split in two.

``SELECT k, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () FROM t GROUP BY k`` becomes the aggregate
block (a DP leaf of :mod:`dpsql.sql.tree`) and a windowing SELECT over it, aliased
:data:`WINDOW_ALIAS`: what PostgreSQL evaluates anyway (windows run after GROUP BY and HAVING,
before DISTINCT, ORDER BY and LIMIT). Same rows, same names, same order.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.model import Policy
from dpsql.sql import functions as fn
from dpsql.sql import grouping_sets as gs
from dpsql.sql.blocks import is_aggregate_block, own_nodes, private_tables, selects_below
from dpsql.sql.names import SPELLED
from dpsql.sql.nodes import POSTGRES

WINDOW_ALIAS = "_dp_w"


def lift_windows(tree: exp.Expr, policy: Policy) -> exp.Expr:
    """Split every aggregate SELECT over private rows that also computes window functions into
    an aggregate block and a windowing SELECT over it (same rows, same names, same order)."""
    for s in list(tree.find_all(exp.Select)):
        if not _has_window(s) or not is_aggregate_block(s) or not private_tables(s, policy):
            continue
        if any(is_aggregate_block(t) and private_tables(t, policy) for t in selects_below(s)):
            continue  # windows over a block above the leaves: post-processing as it is
        lifted = _lift(s)
        if s is tree:
            tree = lifted
        else:
            s.replace(lifted)
    return tree


def _has_window(s: exp.Select) -> bool:
    return any(isinstance(n, exp.Window) for n in own_nodes(s)) or bool(s.args.get("windows"))


def _lift(s: exp.Select) -> exp.Select:
    inner = exp.Select()
    for key in ("from_", "joins", "where", "group", "having", "with_"):
        v = s.args.get(key)
        if v is not None:
            inner.set(key, v.copy() if not isinstance(v, list) else [x.copy() for x in v])
    group = s.args.get("group")
    aliases = {e.alias: e.this for e in s.expressions if isinstance(e, exp.Alias)}
    keys: list[exp.Expr] = []
    raw = [g for st in gs.expand_group(group) for g in st] if group is not None else []
    for g in raw:
        if isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit():
            if not 1 <= int(g.this) <= len(s.expressions):
                continue  # the flat analysis refuses it
            item = s.expressions[int(g.this) - 1]
            g = item.this if isinstance(item, exp.Alias) else item
        elif isinstance(g, exp.Column) and not g.table and g.name in aliases:
            g = aliases[g.name]
        keys.append(g)
    keys = list({k.sql(POSTGRES): k for k in keys}.values())  # each key once, in order
    key_sql = {k.sql(POSTGRES): i for i, k in enumerate(keys)}
    aggs: dict[str, int] = {}
    agg_nodes: list[exp.Expr] = []

    def fix(n: exp.Expr) -> exp.Expr:
        sql = n.sql(POSTGRES)
        if sql in key_sql and not isinstance(n, exp.Literal):
            return exp.column(f"_dp_k{key_sql[sql]}", WINDOW_ALIAS)
        lifted = fn.is_aggregate(n) or isinstance(n, exp.Grouping)
        if lifted and not isinstance(n.parent, exp.Window):
            if sql not in aggs:
                aggs[sql] = len(aggs)
                agg_nodes.append(n.copy())
            return exp.column(f"_dp_a{aggs[sql]}", WINDOW_ALIAS)
        return n

    items = []
    for e in s.expressions:
        body = e.this if isinstance(e, exp.Alias) else e
        out = body.copy().transform(fix)
        name = e.alias if isinstance(e, exp.Alias) else _figure_name(body)
        items.append(exp.alias_(out, name, quoted=True) if name is not None else out)
    outer = exp.select(*items)
    for key in ("order", "windows"):
        v = s.args.get(key)
        if v is not None:
            outer.set(
                key,
                v.copy().transform(fix)
                if not isinstance(v, list)
                else [x.copy().transform(fix) for x in v],
            )
    for key in ("distinct", "limit", "offset"):
        v = s.args.get(key)
        if v is not None:
            outer.set(key, v.copy())
    inner.set(
        "expressions",
        [exp.alias_(k.copy(), f"_dp_k{i}") for i, k in enumerate(keys)]
        + [exp.alias_(a, f"_dp_a{j}") for j, a in enumerate(agg_nodes)],
    )
    if not inner.expressions:
        raise UnsupportedSql("window functions need an aggregate or a GROUP BY key to work on")
    outer.set("from_", exp.From(this=inner.subquery(WINDOW_ALIAS)))
    return outer


def _figure_name(e: exp.Expr) -> str | None:
    """PostgreSQL's name for an unaliased select item whose text the lift would change."""
    inner = e
    if isinstance(inner, exp.Column):
        return inner.name
    if fn.is_aggregate(inner):
        if isinstance(inner, exp.WithinGroup):
            inner = inner.this
        spelled = inner.meta.get(SPELLED)  # variance(x) is "variance", as PostgreSQL names it
        if isinstance(spelled, str) and (fn.aggregate_name(inner) or isinstance(inner, exp.Median)):
            return spelled.lower()
        name = fn.aggregate_name(inner)
        return name or (inner.sql_name().lower() if isinstance(inner, exp.Func) else None)
    return None

"""Conditions on per-unit values read their exact values (:func:`exact_filters`).

A unit is one row of a per-unit derived table (:mod:`dpsql.sql.per_unit`), so a condition on
its value sends the unit into one outer row or group whatever the value: no cap or clamp is
needed there. Values an aggregate sums or a key takes stay capped.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql import functions as fn
from dpsql.sql.analysis import Analysis
from dpsql.sql.per_unit_source import UnitSource


def exact_filters(s: exp.Select, alias: str, unit: UnitSource, view: bool = False) -> None:
    """Make the outer block ``s``'s conditions on per-unit values read their exact values.

    A condition (WHERE, a CASE's WHEN, a comparison in a grouping key) sends each unit, one row
    of the synthetic table, into one outer row or group, whatever the value it compares: the
    outer sensitivity (R = G = 1) holds for any value, so no cap or clamp is needed there, and
    none is applied: ``WHERE t > 100000`` counts the units whose total is above 100,000, as
    PostgreSQL does (capped at 50,000 it was a structural 0). The value an aggregate sums or a
    key takes as its value (``GROUP BY n``, ``AVG(t)``) stays capped, its bounds are the
    policy's. A COUNT column compared only with numbers below its cap R keeps the capped
    column (the same rows pass: a count is exact below R) so that ``WHERE n > 5 GROUP BY n``
    still narrows the declared keys 1..R. In a row-level ``view`` of the per-unit table every
    select item's conditions read exact values (its items are what the block above groups by
    or aggregates)."""
    exact, caps = dict(unit.exact), dict(unit.caps)
    if not exact:
        return

    def ours(c: exp.Column) -> bool:
        return c.name in exact and (not c.table or c.table == alias)

    # (root, whole): in WHERE and in a grouping key every condition reads the exact value; in
    # any other select item or ORDER BY item (computed from the keys after grouping) only the
    # conditions inside an aggregate's argument do: the rest must read the key as grouped
    roots: list[tuple[exp.Expr, bool]] = []
    where = s.args.get("where")
    if where is not None:
        roots.append((where, True))
    group = s.args.get("group")
    keys = list(group.expressions) if group is not None else []
    texts = {g.sql() for g in keys}
    named: set[str] = set()
    for g in keys:
        if isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit():
            i = int(g.this) - 1
            if 0 <= i < len(s.expressions):
                named.add(s.expressions[i].alias_or_name)
        elif isinstance(g, exp.Column) and not g.table:
            named.add(g.name)
    for e in s.expressions:
        body = e.this if isinstance(e, exp.Alias) else e
        key = view or body.sql() in texts or (isinstance(e, exp.Alias) and e.alias in named)
        roots.append((e, key))  # (a row view's items are the keys and values read above)
    roots += [(g, True) for g in keys]
    order = s.args.get("order")
    for o in order.expressions if order is not None else []:
        roots.append((o, o.this.sql() in texts))
    for root, whole in roots:
        for c in list(root.find_all(exp.Column)):
            if not ours(c) or _in_subquery(c, root):
                continue
            if not whole and not _in_aggregate(c, root):
                continue
            pred = _predicate(c, root, filtering=root is where)
            if pred is None:
                continue
            cap = caps.get(c.name)
            if cap is not None and isinstance(pred, exp.Predicate) and _below(pred, c, cap):
                continue
            new = exp.column(exact[c.name], c.table or None, quoted=True)
            c.replace(new)


def capped_values(a: Analysis, node: exp.Expr | None) -> tuple[str, ...]:
    """The capped columns of a per-unit table (:attr:`Analysis.capped_columns`) whose value
    ``node`` (an aggregate's argument) takes, once each: the cap moves what is computed from
    them. A condition there (a CASE's WHEN) reads a capped column only where
    :func:`exact_filters` found that the same units pass as on the exact value, so it is not
    one of them."""
    if node is None or not a.capped_columns:
        return ()
    names = (
        c.name
        for c in node.find_all(exp.Column)
        if c.name in a.capped_columns and _predicate(c, node, filtering=False) is None
    )
    return tuple(dict.fromkeys(names))


def _in_aggregate(c: exp.Expr, root: exp.Expr) -> bool:
    n = c.parent
    while n is not None and n is not root.parent:
        if fn.is_aggregate(n):
            return True
        n = n.parent
    return False


def _in_subquery(c: exp.Expr, root: exp.Expr) -> bool:
    n = c.parent
    while n is not None and n is not root:
        if isinstance(n, (exp.Select, exp.Subquery)):
            return True
        n = n.parent
    return False


def _predicate(c: exp.Expr, root: exp.Expr, filtering: bool) -> exp.Expr | None:
    """The nearest condition above ``c`` that only passes on a truth value (a comparison,
    IN, BETWEEN, IS, a CASE's WHEN), or the WHERE itself; None when ``c``'s value is taken
    as a value (an aggregate's argument, a key of its own, a CASE's result)."""
    n: exp.Expr = c
    while n is not root:
        p = n.parent
        if p is None or fn.is_aggregate(p) or isinstance(p, exp.Window):
            return None
        if isinstance(p, exp.Predicate) and not isinstance(p, (exp.And, exp.Or)):
            return p
        if isinstance(p, exp.If) and n is p.this:  # CASE WHEN <n> THEN ...
            return p
        if isinstance(p, exp.Case) and n is p.this:  # CASE <n> WHEN v THEN ...
            return p
        n = p
    return root if filtering else None


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def _below(pred: exp.Predicate, c: exp.Column, cap: float) -> bool:
    """``pred`` passes the same units on ``c`` capped at ``cap`` as on its exact value: it
    compares ``c`` with numbers below the cap only (a count is exact below it), or is
    ``c >= cap`` / ``c < cap`` (a count at the cap is at least the cap)."""
    if isinstance(pred, (exp.In, exp.Between)):
        if pred.this is not c:
            return False
        others = (
            list(pred.expressions)
            if isinstance(pred, exp.In)
            else [pred.args.get("low"), pred.args.get("high")]
        )
        return bool(others) and all(_number(o) is not None and _number(o) < cap for o in others)  # type: ignore[operator]
    if not isinstance(pred, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return False
    other = pred.expression if pred.this is c else pred.this
    x = _number(other)
    if x is None or (pred.this is not c and pred.expression is not c):
        return False
    if x < cap:
        return True
    op = type(pred) if pred.this is c else _FLIP.get(type(pred), type(pred))
    return x == cap and op in (exp.GTE, exp.LT)


def _number(e: exp.Expr | None) -> float | None:
    if isinstance(e, exp.Literal) and not e.is_string:
        try:
            return float(e.this)
        except ValueError:
            return None
    return None

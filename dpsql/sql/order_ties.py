"""Released rows in one order, ties included: an ORDER BY over noisy values gets a tie-break.

BI tools page a released result (``ORDER BY n DESC LIMIT 25 OFFSET 25``): one statement per
page, each over the same release. Where released values tie (rounded counts often do),
PostgreSQL may put the tied rows in any order, and a top-N sort with another LIMIT may pick
them differently: page 1 and page 2 then repeat one group and skip another. Appending a
deterministic total order after the statement's own terms makes every page cut the same
sequence: the group keys (one row per key combination, so they order every row) where the
post-processing query can read them, else its output columns (by position). Only the order of
rows that tie on every term the statement wrote changes; nothing is computed from the data.

>>> from sqlglot import parse_one
>>> q = parse_one("SELECT n FROM t ORDER BY n DESC LIMIT 2", read="postgres")
>>> order_ties(q, [parse_one("_dp._dp_g0")]).sql("postgres")
'SELECT n FROM t ORDER BY n DESC, _dp._dp_g0 LIMIT 2'
>>> q = parse_one("SELECT DISTINCT a, b FROM t ORDER BY b", read="postgres")
>>> order_ties(q).sql("postgres")
'SELECT DISTINCT a, b FROM t ORDER BY b, 1, 2'
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp


def order_ties(q: exp.Expr, keys: Sequence[exp.Expr] = ()) -> exp.Expr:
    """``q`` (changed in place) with each of its queries that has an ORDER BY tie-broken: the
    top query by ``keys`` when given and it may read them (no DISTINCT, GROUP BY or aggregate),
    every other query with an ORDER BY by its output columns' positions (left as is where a
    ``*`` hides how many there are). A window's ORDER BY is not a query's: left alone."""
    for node in list(q.find_all(exp.Select, exp.SetOperation)):
        order = node.args.get("order")
        if not isinstance(order, exp.Order) or not order.expressions:
            continue
        if node is q and keys and _reads_rows(node):
            extra = [k.copy() for k in keys]
        else:
            extra = [exp.Literal.number(i) for i in _positions(node)]
        order.set("expressions", [*order.expressions, *(exp.Ordered(this=e) for e in extra)])
    return q


def _reads_rows(q: exp.Expr) -> bool:
    """Whether ``q``'s ORDER BY may name a column of its FROM (each row one released group)."""
    if not isinstance(q, exp.Select) or q.args.get("distinct") or q.args.get("group"):
        return False
    return not any(
        not isinstance(agg.parent, exp.Window) and agg.parent_select is q
        for agg in q.find_all(exp.AggFunc)
    )


def _positions(q: exp.Expr) -> list[int]:
    """The positions (from 1) of ``q``'s output columns a tie-break may order by: none when a
    ``*`` hides how many there are; not one whose type may have no ordering operator (json,
    xml, the geometric types: PostgreSQL refuses ``ORDER BY`` on them, 42883, where the
    statement as written ran). Leaving a column out only leaves its ties to the others."""
    while isinstance(q, exp.SetOperation):
        q = q.this
    if not isinstance(q, exp.Select):
        return []
    outputs = q.expressions
    if any(isinstance(o, exp.Star) or isinstance(o.unalias(), exp.Star) for o in outputs):
        return []
    if any(isinstance(o, exp.Column) and isinstance(o.this, exp.Star) for o in outputs):
        return []
    return [i for i, o in enumerate(outputs, 1) if _orderable(o.unalias())]


_UNORDERED: tuple[str, ...] = ("json", "to_json", "row_to_json", "array_to_json", "xml")
_UNORDERED += ("query_to_xml", "point", "box", "circle", "polygon", "path", "lseg", "line")
"""Names (prefixes) of functions and types whose values may have no ordering operator."""


def _orderable(e: exp.Expr) -> bool:
    """False where ``e`` may be of a type without an ordering operator (by the names of the
    functions and casts in it, not its type, which is not known here: a miss only keeps a tie)."""
    for node in e.walk():
        name = ""
        if isinstance(node, exp.Anonymous):
            name = str(node.name)
        elif isinstance(node, exp.DataType):
            name = node.sql("postgres")
        elif isinstance(node, exp.Func):
            name = type(node).__name__
        if name.lower().startswith(_UNORDERED):
            return False
    return True


__all__ = ["order_ties"]

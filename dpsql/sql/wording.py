"""Words for notices, EXPLAIN and refusals: the user's own SQL, and counts with their nouns.

An aggregate is shown as the user wrote it (``MEDIAN(amount)``, ``variance(amount)``,
``SUM(v)`` over a CTE's column), from the text :func:`dpsql.sql.names.spell_functions` recorded
at parse time. An expression with no recorded text (a column a CTE or the analysis rewrote,
an aggregate dpsql made) is rendered in PostgreSQL's terms without dpsql's internals: columns
without the table qualifiers the analysis adds, no doubled brackets, functions under the name
the user wrote (sqlglot renders ``MEDIAN(x)`` as ``PERCENTILE_CONT(0.5) WITHIN GROUP (...)``,
``variance(x)`` as ``VAR_SAMP(x)``), ``numeric`` for sqlglot's ``DECIMAL``.

>>> import sqlglot
>>> node = sqlglot.parse_one('SELECT SUM(("purchases"."amount" * "p"."quantity"))').selects[0]
>>> plain_sql(node)
'SUM(amount * quantity)'
>>> plain_sql(sqlglot.parse_one("SELECT CAST(x AS decimal(10, 2)) + y::numeric", read="postgres").selects[0])
'CAST(x AS numeric(10, 2)) + y::numeric'
>>> plural(1, "row"), plural(3, "row"), plural(1.0, "group"), plural(2, "person", "people")
('1 row', '3 rows', '1 group', '2 people')
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql.sql.names import SPELLED, WRITTEN, cast_sql
from dpsql.sql.nodes import POSTGRES

_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_DECIMAL = re.compile(r"\bDECIMAL\b")
# aggregates sqlglot renders under another name than the user wrote, rendered as written
_RENAMED = (
    exp.Median,
    exp.Variance,
    exp.VariancePop,
    exp.Stddev,
    exp.StddevPop,
    exp.StddevSamp,
)


def plural(n: float, noun: str, many: str | None = None) -> str:
    """``n`` and its noun, singular for exactly 1: "1 row", "3 rows", "1,200 rows"."""
    x = float(n)
    shown = f"{x:,.0f}" if x == int(x) else f"{x:,.3g}"
    return f"{shown} {noun if x == 1 else (many or noun + 's')}"


def user_sql(node: exp.Expr) -> str:
    """An aggregate (or any expression) as the user wrote it, else :func:`plain_sql`."""
    for n in (node, node.this if isinstance(node, (exp.WithinGroup, exp.Filter)) else None):
        text = n.meta.get(WRITTEN) if isinstance(n, exp.Expr) else None
        if isinstance(text, str):
            return text
    return plain_sql(node)


def plain_sql(node: exp.Expr, *, qualified: bool = False) -> str:
    """``node`` in PostgreSQL's terms, without dpsql's internals (see the module docstring).
    ``qualified``: keep the columns' qualifiers, for a node read from the user's own tree (a
    correlated subquery's ``p.category = c.category`` means nothing without them)."""
    c = node.copy()
    for col in list(c.find_all(exp.Column)) if not qualified else ():
        for part in ("table", "db", "catalog"):
            col.set(part, None)
    for ident in c.find_all(exp.Identifier):
        if ident.quoted and _PLAIN_NAME.fullmatch(ident.name):
            ident.set("quoted", False)
    for p in list(c.find_all(exp.Paren)):
        if p.parent is not None and isinstance(p.parent, (exp.Paren, exp.Func, exp.Alias)):
            p.replace(p.this)
    while isinstance(c, exp.Paren):
        c = c.this
    for cast in reversed(list(c.find_all(exp.Cast))):  # innermost first
        shown = exp.var(cast_sql(cast))
        if cast is c:
            c = shown
        else:
            cast.replace(shown)
    return _DECIMAL.sub("numeric", _respelled(c).sql(POSTGRES))


def spelled_sql(node: exp.Expr) -> str:
    """``node`` as PostgreSQL SQL with the aggregates sqlglot renames spelled as written
    (``variance(x)``, not ``VAR_SAMP(x)``): it parses back to the same tree, so a statement
    re-read from it (a tree's leaf, :mod:`dpsql.execute.tree_prepare`) names them as the user
    did. Nothing else is changed.

    >>> from dpsql.sql.parse import parse_statement
    >>> spelled_sql(parse_statement("SELECT MEDIAN(x), variance(y) FROM t").tree)
    'SELECT MEDIAN(x), VARIANCE(y) FROM t'
    """
    return _respelled(node.copy()).sql(POSTGRES)


def _respelled(c: exp.Expr) -> exp.Expr:
    """``c`` (a copy, changed in place) with the ``_RENAMED`` aggregates under their spelled
    names."""
    for f in list(c.find_all(*_RENAMED)):
        spelled = f.meta.get(SPELLED)
        if isinstance(spelled, str) and not f.args.get("expressions"):
            call = exp.Anonymous(this=spelled, expressions=[f.this])
            call.meta.update(f.meta)
            if f is c:
                c = call
            else:
                f.replace(call)
    return c

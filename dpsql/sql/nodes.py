"""Nodes of the bounded SQL built without parsing text or copying subtrees.

sqlglot's builders parse their string arguments (a type name, a table or CTE name) and copy
the expression they extend (``copy=True``); the rewrite built each statement's SQL that way,
parsing the same constant fragments and copying its growing query at every step. These build
the same nodes (the same SQL text) from types and tables parsed once per process, and take
the nodes they are given as they are: pass a fresh node (or a ``.copy()``), never one that
is still used elsewhere.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

POSTGRES = Dialect.get_or_raise("postgres")
"""sqlglot's PostgreSQL dialect, made once: ``node.sql(POSTGRES)`` is ``node.sql("postgres")``
(the same settings, the same text) without looking the dialect up by name and building a new
instance at every call (about a third of the cost of generating a small expression's text; a
fresh private statement generates some twenty). A dialect is never changed after it is made:
one instance serves every thread."""


@lru_cache(maxsize=64)
def _data_type(to: str) -> exp.DataType:
    return exp.DataType.build(to)


def data_type(to: str) -> exp.DataType:
    """``exp.DataType.build(to)``: a fresh copy of the type parsed once (a new node over the
    same arguments for a plain type, whose arguments are no nodes: cheaper than a copy)."""
    built = _data_type(to)
    if any(isinstance(v, (exp.Expr, list)) for v in built.args.values()):
        return built.copy()
    return exp.DataType(**built.args)


def cast(node: exp.Expr, to: str) -> exp.Expr:
    """``exp.cast(node, to)`` taking ``node`` itself (no copy): ``CAST(node AS to)``, or
    ``node`` when it already is a cast to that type."""
    return exp.cast(node, data_type(to), copy=False)


_PLAIN = re.compile(r"_dp(_[a-z0-9_]*)?")  # dpsql's own names (CTEs, the post-processing input)


@lru_cache(maxsize=256)
def _table(name: str) -> exp.Table:
    table = exp.to_table(name)
    for node in table.walk():
        node._meta = None  # the parser's positions in ``name``: each copy would copy them
    return table


def table(name: str) -> exp.Table:
    """``exp.to_table(name)``: a new table node for one of dpsql's CTE names (``_dp_rows``),
    else a fresh copy of the table parsed once."""
    if _PLAIN.fullmatch(name):
        return exp.Table(this=exp.Identifier(this=name, quoted=False))
    return _table(name).copy()


def cte_name(name: str) -> exp.TableAlias:
    """The alias of a CTE named ``name`` (a plain identifier), as ``with_(name, ...)`` parses it."""
    return exp.TableAlias(this=exp.to_identifier(name))

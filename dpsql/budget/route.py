"""Answering the analyst's ledger statements: ``SHOW dpsql.budget`` and the two virtual tables.

The wire session hands statements of kind ``"dpsql"`` here::

    from dpsql.budget import route
    result = route.answer(ledger, session.analyst, prepared.tree or sql_text)
    columns = route.describe(prepared.tree or sql_text)      # RowDescription, no database access

Supported: ``SHOW dpsql.budget``; ``SELECT * | <columns> FROM dpsql.budget | dpsql.history
[ORDER BY <columns>] [LIMIT n] [OFFSET n]`` (``TABLE dpsql.history`` too). The rows are computed in
Python from the analyst's own ledger entries; nothing of the statement reaches a database, and
no other table of the ledger schema is reachable.

>>> [c.name for c in describe("SELECT name, epsilon_remaining FROM dpsql.budget")]
['name', 'epsilon_remaining']
>>> describe("SHOW dpsql.budget")[0].name
'dpsql.budget'
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from dpsql.budget import views
from dpsql.errors import (
    InvalidColumnReference,
    UndefinedColumn,
    UndefinedTable,
    UnsupportedSql,
)
from dpsql.result import Result, ResultColumn
from dpsql.sql.syntax_errors import syntax_error

if TYPE_CHECKING:
    from dpsql.budget.api import BudgetLedger

_SHOW = re.compile(r"^\s*show\s+dpsql\.budget\s*;?\s*$", re.IGNORECASE)
_TABLES = {"budget": views.BUDGET_COLUMNS, "history": views.HISTORY_COLUMNS}
_ALLOWED = frozenset({"expressions", "from", "from_", "order", "limit", "offset"})
_SHAPE_HINT = (
    "dpsql.budget and dpsql.history answer SELECT <columns> FROM dpsql.budget (or "
    "dpsql.history) [ORDER BY ...] [LIMIT n]; filter or join in your client"
)


def is_show_budget(text: str) -> bool:
    """Whether ``text`` is ``SHOW dpsql.budget`` (answered from the ledger, not a setting)."""
    return _SHOW.match(text) is not None


def _parse(statement: exp.Expr | str) -> exp.Expr | None:
    """The SELECT tree, or None for ``SHOW dpsql.budget``."""
    if isinstance(statement, str):
        if _SHOW.match(statement):
            return None
        try:
            tree: exp.Expr = sqlglot.parse_one(statement, read="postgres")
        except ParseError as e:
            raise syntax_error(statement, e) from e
    else:
        tree = statement
    if isinstance(tree, exp.Command) and _SHOW.match(
        f"{tree.name} {tree.expression.name if tree.expression else ''}"
    ):
        return None
    return tree


def _view(tree: exp.Expr) -> tuple[str, exp.Select]:
    if not isinstance(tree, exp.Select):
        raise UnsupportedSql("only SELECT reads the dpsql ledger views", hint=_SHAPE_HINT)
    table = tree.args.get("from_") or tree.args.get("from")
    src = table.this if isinstance(table, exp.From) else None
    if not isinstance(src, exp.Table) or src.text("db").lower() != "dpsql":
        raise UnsupportedSql("a dpsql ledger view must be read on its own", hint=_SHAPE_HINT)
    name = src.name.lower()
    if name not in _TABLES:
        raise UndefinedTable(
            f'relation "dpsql.{src.name}" does not exist',
            hint="the ledger views you can read are dpsql.budget and dpsql.history",
        )
    for arg, value in tree.args.items():
        if value and arg not in _ALLOWED:
            clause = arg.rstrip("_").upper()
            raise UnsupportedSql(f"{clause} is not supported on dpsql.{name}", hint=_SHAPE_HINT)
    return name, tree


def _column(view: str, node: exp.Expr) -> int:
    cols = [c.name for c in _TABLES[view]]
    if not isinstance(node, exp.Column) or node.name.lower() not in cols:
        shown = node.sql(dialect="postgres")
        if isinstance(node, exp.Column):
            raise UndefinedColumn(
                f'column "{shown}" does not exist in dpsql.{view}',
                hint="columns: " + ", ".join(cols),
            )
        raise UnsupportedSql(f"{shown}: only plain columns of dpsql.{view}", hint=_SHAPE_HINT)
    return cols.index(node.name.lower())


def _projection(view: str, tree: exp.Select) -> list[tuple[int, str]]:
    """(column index, output name) for each output column."""
    out: list[tuple[int, str]] = []
    for item in tree.expressions:
        if isinstance(item, exp.Star):
            out += [(i, c.name) for i, c in enumerate(_TABLES[view])]
            continue
        target = item.this if isinstance(item, exp.Alias) else item
        out.append((_column(view, target), item.alias_or_name))
    return out


def describe(statement: exp.Expr | str) -> tuple[ResultColumn, ...]:
    """The result columns of a ledger statement (no database access)."""
    tree = _parse(statement)
    if tree is None:
        return (ResultColumn("dpsql.budget", views.TEXT),)
    view, select = _view(tree)
    cols = _TABLES[view]
    return tuple(ResultColumn(name, cols[i].type_oid) for i, name in _projection(view, select))


def _int(node: exp.Expr | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.expression if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise UnsupportedSql(f"{what} takes a number here", hint=_SHAPE_HINT)


def _sort_key(view: str, node: exp.Expr, proj: list[tuple[int, str]]) -> int:
    """The view column an ORDER BY item names: a column, an output position, or an output alias."""
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        k = int(node.this)
        if not 1 <= k <= len(proj):
            raise InvalidColumnReference(
                f"ORDER BY position {k} is not in select list",
                hint=f"positions run from 1 to {len(proj)}",
            )
        return proj[k - 1][0]
    if isinstance(node, exp.Column) and not node.table:
        aliases = {name.lower(): i for i, name in proj}
        if node.name.lower() in aliases:
            return aliases[node.name.lower()]
    return _column(view, node)


def _sort(
    rows: list[tuple[Any, ...]], view: str, select: exp.Select, proj: list[tuple[int, str]]
) -> list[tuple[Any, ...]]:
    order = select.args.get("order")
    if order is None:
        return rows
    for o in reversed(order.expressions):
        i = _sort_key(view, o.this, proj)
        desc = bool(o.args.get("desc"))
        present = sorted((r for r in rows if r[i] is not None), key=lambda r: r[i], reverse=desc)
        nulls = [r for r in rows if r[i] is None]
        rows = nulls + present if desc else present + nulls  # PostgreSQL's default null order
    return rows


def answer(ledger: BudgetLedger, analyst: str, statement: exp.Expr | str) -> Result:
    """Run a ledger statement for ``analyst`` (their own budget and releases only)."""
    tree = _parse(statement)
    if tree is None:
        return Result(
            describe("SHOW dpsql.budget"), [(views.show_budget(ledger, analyst),)], "SHOW"
        )
    view, select = _view(tree)
    proj = _projection(view, select)
    offset = _int(select.args.get("offset"), "OFFSET") or 0
    limit = _int(select.args.get("limit"), "LIMIT")
    full = (views.budget_result if view == "budget" else views.history_result)(ledger, analyst)
    rows = _sort(list(full.rows), view, select, proj)[offset:]
    rows = rows[:limit] if limit is not None else rows
    out = [tuple(r[i] for i, _ in proj) for r in rows]
    return Result(describe(select), out, f"SELECT {len(out)}")

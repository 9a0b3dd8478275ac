"""``SELECT ... FROM dpsql.budget`` / ``dpsql.history``: the analyst's own view of the ledger.

The view's rows come from the ledger (only the asking analyst's budget, the dataset's, and their own
releases); the query itself (projection, WHERE, ORDER BY...) then runs in PostgreSQL over those
rows as a typed VALUES list, so any read-only SELECT shape works and nothing else is reachable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.errors import UndefinedTable, UnsupportedSql
from dpsql.execute.backend import type_name
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql.bind import literal
from dpsql.sql.classify import referenced_tables

if TYPE_CHECKING:
    from dpsql.engine import Engine


def _view(engine: Engine, name: str, analyst: str) -> Result:
    from dpsql.budget import views

    if engine.ledger is None:
        raise UnsupportedSql(
            "this dpsql runs without a budget ledger", hint="start dpsql with a ledger"
        )
    if name == "dpsql.budget":
        return views.budget_result(engine.ledger, analyst)
    if name == "dpsql.history":
        return views.history_result(engine.ledger, analyst)
    raise UndefinedTable(
        f'relation "{name}" does not exist', hint="dpsql.budget and dpsql.history are available"
    )


def _values(result: Result, alias: str) -> exp.Expression:
    cols = [c.name for c in result.columns]
    types = [type_name(c.type_oid) for c in result.columns]

    def cell(v: Any, t: str) -> exp.Expression:
        return exp.cast(literal(v if not hasattr(v, "isoformat") else v.isoformat()), t)

    if result.rows:
        rows = [
            exp.Tuple(expressions=[cell(v, t) for v, t in zip(r, types, strict=True)])
            for r in result.rows
        ]
        values = exp.Values(
            expressions=rows,
            alias=exp.TableAlias(
                this=exp.to_identifier(alias), columns=[exp.to_identifier(c) for c in cols]
            ),
        )
        return values
    empty = exp.select(
        *[exp.alias_(exp.cast(exp.null(), t), c) for c, t in zip(cols, types, strict=True)]
    ).where(exp.false())
    return empty.subquery(alias)


def run_view_query(engine: Engine, tree: exp.Expression, session: SessionContext) -> Result:
    """Run a SELECT over dpsql.budget / dpsql.history (and nothing else)."""
    tables = referenced_tables(tree)
    if any(not name.startswith("dpsql.") for name, _ in tables):
        raise UnsupportedSql("dpsql.budget and dpsql.history can't be combined with other tables")
    from dpsql.sql.public import check_public

    check_public(tree)
    out = tree.copy()
    for t in list(out.find_all(exp.Table)):
        name = f"{(t.db or '').lower()}.{t.name.lower()}"
        if name.startswith("dpsql."):
            view = _view(engine, name, session.analyst)
            t.replace(_values(view, t.alias_or_name))
    rows = engine.backend.run(out.sql("postgres"), private=False)
    return Result(rows.columns, rows.rows, rows.status)

"""The tables a parsed query reads (CTE references excluded, PostgreSQL's scoping) and the error
for one that does not exist (or that the analyst may not see)."""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UndefinedTable


def _ident_name(node: exp.Expr | None) -> str:
    """PostgreSQL's name for an identifier: unquoted names fold to lower case."""
    if isinstance(node, exp.Identifier):
        return node.name if node.quoted else node.name.lower()
    return str(node.name if node is not None else "").lower()


def visible_ctes(table: exp.Table) -> set[str]:
    """Names of the CTEs a table reference can see, following PostgreSQL's scoping.

    A CTE is visible in the main query of its WITH and in the CTEs after it (and in itself when
    the WITH is RECURSIVE); a CTE defined in a subquery is not visible outside that subquery.
    """
    names: set[str] = set()
    prev: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            ctes = list(node.expressions)
            idx = ctes.index(prev) if prev in ctes else len(ctes)
            upto = len(ctes) if node.args.get("recursive") else idx
            names |= {
                _ident_name(c.args.get("alias") and c.args["alias"].this) for c in ctes[:upto]
            }
        else:
            w = node.args.get("with_")
            if isinstance(w, exp.With) and prev is not w:
                names |= {_ident_name(c.args["alias"].this) for c in w.expressions}
        prev, node = node, node.parent
    return names


def cte_body(table: exp.Table) -> exp.Expr | None:
    """The body of the CTE a table reference names (PostgreSQL's scoping), or None."""
    if table.db:
        return None
    name = table.name
    prev: exp.Expr = table
    node = table.parent
    while node is not None:
        visible: list[exp.Expr] = []
        if isinstance(node, exp.With):
            ctes = list(node.expressions)
            upto = ctes.index(prev) if prev in ctes else len(ctes)
            visible = ctes if node.args.get("recursive") else ctes[:upto]
        else:
            w = node.args.get("with_")
            if isinstance(w, exp.With) and prev is not w:
                visible = list(w.expressions)
        for c in reversed(visible):
            if c.alias_or_name == name:
                body: exp.Expr = c.this
                return body
        prev, node = node, node.parent
    return None


def referenced_tables(tree: exp.Expr) -> list[tuple[str, exp.Table]]:
    """(qualified name, node) of every real table the query reads (references to CTEs excluded)."""
    out = []
    for t in tree.find_all(exp.Table):
        if not t.name or isinstance(t.this, exp.Func):
            continue  # table functions (unnest, generate_series) are checked by their caller
        if not t.db and _ident_name(t.this) in visible_ctes(t):
            continue
        schema = _ident_name(t.args.get("db")) if t.args.get("db") else ""
        name = _ident_name(t.this)
        if not schema and (name.startswith("pg_") or name in _INFO_NAMES):
            schema = "pg_catalog"
        # not qualify_name: it folds quoted names too ("Purchases" is not purchases)
        out.append((f"{schema or 'public'}.{name}", t))
    return out


_INFO_NAMES: frozenset[str] = frozenset()


def undefined_table(node: exp.Table) -> UndefinedTable:
    """PostgreSQL's error for a missing relation: the name as written (quoted parts keep their
    case), position of the reference. Tables the analyst may not use get exactly this error."""
    parts = [node.args.get(k) for k in ("catalog", "db", "this")]
    name = ".".join(_ident_name(p) for p in parts if p is not None)
    first = next((p for p in parts if p is not None), None)
    start = first.meta.get("start") if first is not None else None
    return UndefinedTable(
        f'relation "{name}" does not exist',
        hint="only the tables declared in the dpsql policy can be queried",
        position=start + 1 if isinstance(start, int) else None,
    )

"""Flatten CTEs and derived tables of a private query into one SELECT before it is analyzed.

Two shapes are merged, repeatedly, until the FROM clause holds tables only:

* a *row-level* derived table (no aggregate, GROUP BY, DISTINCT, LIMIT or window) that filters
  and derives values: ``SELECT SUM(v) FROM (SELECT amount * quantity AS v FROM t WHERE c) s``
  becomes ``SELECT SUM(amount * quantity) FROM t WHERE c``; also of a join (a BI tool's virtual
  dataset ``SELECT v.cost, p.sex FROM visits v JOIN patients p ON ...``) read alone in FROM:
  the join itself, which the analysis then checks as it checks a hand-written one;
* a *wrapper* over an aggregate query (BI tools' ``SELECT ... FROM (SELECT ...) AS "t" LIMIT n``):
  the outer query only post-processes the inner one's output rows, so its select list, WHERE,
  ORDER BY and LIMIT move into the inner query (WHERE becomes HAVING).

Both are pure rewrites to an equivalent query (same rows, same names), so the flat query goes
through the usual analysis and its sensitivity argument; nothing here is trusted for privacy.
A CTE is inlined only where it is referenced in FROM; anything else (a CTE used twice, in a
subquery, RECURSIVE) is left as is and refused by the analyzer. A row-level derived table that is
joined is merged too, as its table under the derived table's alias (:func:`_merge_joined`).
What a merge reads of the derived table (its columns, whether it is row-level, whether merging
keeps the row count) is :mod:`dpsql.sql.derived`'s; ``FILTER`` is
:mod:`dpsql.sql.filters_to_case`'s.
"""

from __future__ import annotations

from contextvars import ContextVar

from sqlglot import exp

from dpsql.errors import StatementTooComplex, UnsupportedSql
from dpsql.sql import functions as fn
from dpsql.sql.derived import (
    and_inner_where,
    check_mergeable,
    has_star,
    is_aggregate_query,
    is_row_level,
    is_star,
    keep_name,
    projection,
)
from dpsql.sql.tables import visible_ctes

MAX_DEPTH = 16
MAX_COPIED_NODES = 40_000
"""Syntax nodes one flattening may copy into the statement (each reference to a derived
table's column is replaced by a copy of its expression, each CTE reference by its body): a
chain of 16 derived tables each selecting ``a + a AS a`` from the next is 2^16 copies of the
innermost expression, 430 characters that took minutes of proxy CPU (holding the interpreter
lock: every session stalled) and sent PostgreSQL an expression it evaluated per row. Four
times :data:`dpsql.sql.analyze_complexity.MAX_STATEMENT_NODES`: BI tools' wrappers copy each
column once per level."""
_copied: ContextVar[list[int] | None] = ContextVar("dpsql_flatten_copied", default=None)


def _copy(e: exp.Expr) -> exp.Expr:
    """``e.copy()``, counted against :data:`MAX_COPIED_NODES` (within :func:`flatten`)."""
    box = _copied.get()
    if box is not None:
        box[0] += sum(1 for _ in e.walk())
        if box[0] > MAX_COPIED_NODES:
            raise StatementTooComplex(
                "the statement's derived tables and CTEs expand to more than "
                f"{MAX_COPIED_NODES} syntax nodes (each reference to a derived column is a copy "
                "of its expression)",
                hint="refer to each computed column of a subquery once, or compute it in the "
                "outer query; split the computation into several simpler queries",
            )
    return e.copy()


def _substitute(
    node: exp.Expr,
    alias: str,
    proj: dict[str, exp.Expr],
    star: bool,
    keep: frozenset[str] = frozenset(),
) -> exp.Expr:
    """Replace references to the derived table's columns by their defining expressions.

    ``keep``: output aliases of the outer select, which ORDER BY/GROUP BY/HAVING may name.
    """

    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            if n.table and n.table != alias:
                return n
            if not n.table and n.name in keep and n.name not in proj:
                return n
            if n.name in proj:
                return _definition(proj, n.name)
            if star:
                return exp.column(n.name, quoted=n.this.quoted if n.this else False)
            raise _no_column(alias, n.name)
        return n

    return node.transform(fix, copy=True)


def _definition(proj: dict[str, exp.Expr], name: str) -> exp.Expr:
    """A copy of the derived table's expression for its output column ``name``, parenthesized
    unless it is a column, a literal or already parenthesized."""
    e = _copy(proj[name])
    return e if isinstance(e, (exp.Column, exp.Literal, exp.Paren)) else exp.Paren(this=e)


def _no_column(alias: str, name: str) -> UnsupportedSql:
    return UnsupportedSql(
        f'column {alias}.{name} does not exist in the derived table "{alias}"',
        hint="refer to the columns the subquery selects",
    )


def _inline_ctes(tree: exp.Select) -> exp.Select:
    w = tree.args.get("with_")
    if not isinstance(w, exp.With) or w.args.get("recursive"):
        return tree
    tree = tree.copy()
    w = tree.args["with_"]
    defs = {c.alias_or_name: c.this for c in w.expressions}
    kept: set[str] = set()
    for t in list(tree.find_all(exp.Table)):
        if t.db or t.name not in defs or _under(t, w) or t.name not in visible_ctes(t):
            continue
        if not isinstance(t.parent, (exp.From, exp.Join)):
            kept.add(t.name)
            continue
        body = defs[t.name]
        # a CTE's body sees the CTEs before it: inline them first
        inner = _copy(body)
        if isinstance(inner, exp.Select):
            earlier = [_copy(c) for c in w.expressions[: list(defs).index(t.name)]]
            if earlier:
                inner.set("with_", exp.With(expressions=earlier))
                inner = _inline_ctes(inner)
        t.replace(
            exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(t.alias_or_name)))
        )
    remaining = [c for c in w.expressions if c.alias_or_name in kept]
    tree.set("with_", exp.With(expressions=remaining) if remaining else None)
    return tree


def _under(node: exp.Expr, ancestor: exp.Expr) -> bool:
    p = node.parent
    while p is not None:
        if p is ancestor:
            return True
        p = p.parent
    return False


def _merge_row_level(outer: exp.Select, sub: exp.Subquery) -> exp.Select:
    inner = sub.this
    alias = sub.alias_or_name
    proj, star = projection(inner), has_star(inner)
    out = outer.copy()
    items: list[exp.Expr] = []
    for e in out.expressions:
        if is_star(e):
            items += [x.copy() for x in inner.expressions]  # SELECT * passes the projection on
        else:
            items.append(keep_name(e, _substitute(e, alias, proj, star)))
    out.set("expressions", items)
    names = frozenset(e.alias for e in outer.expressions if isinstance(e, exp.Alias))
    for key in ("where", "group", "having", "order", "qualify"):
        v = out.args.get(key)
        if v is not None:
            keep = names if key != "where" else frozenset()
            out.set(key, _substitute(v, alias, proj, star, keep))
    out.set("from_", inner.args["from_"].copy())
    if inner.args.get("joins"):  # a view of a join's rows: the join itself
        out.set("joins", [j.copy() for j in inner.args["joins"]])
    return and_inner_where(out, inner)


def _reads_only(outer: exp.Select, alias: str) -> bool:
    """Every column reference of ``outer`` (outside its subqueries) is unqualified or names the
    derived table ``alias``: once a join's tables are merged into ``outer``, their own names
    (``v``, ``p``) must not capture a reference PostgreSQL would have refused."""
    for col in outer.find_all(exp.Column):
        if col.find_ancestor(exp.Select) is outer and col.table not in ("", alias):
            return False
    return True


def _merge_wrapper(outer: exp.Select, sub: exp.Subquery) -> exp.Select:
    inner: exp.Select = sub.this.copy()
    alias = sub.alias_or_name
    proj = {}
    for e in inner.expressions:
        proj[e.alias_or_name] = e.this if isinstance(e, exp.Alias) else e
    items: list[exp.Expr] = []
    for e in outer.expressions:
        if is_star(e):
            items += [x.copy() for x in inner.expressions]
        else:
            items.append(keep_name(e, _substitute(e, alias, proj, False)))
    inner.set("expressions", items)
    ow = outer.args.get("where")
    if ow is not None:
        cond = _substitute(ow.this, alias, proj, False)
        ih = inner.args.get("having")
        inner.set("having", exp.Having(this=cond if ih is None else exp.and_(ih.this, cond)))
    if outer.args.get("distinct"):
        inner.set("distinct", outer.args["distinct"].copy())
    order = outer.args.get("order")
    if order is not None:
        if inner.args.get("limit") or inner.args.get("offset"):
            raise UnsupportedSql(
                "ORDER BY over a subquery with LIMIT is not supported",
                hint="put ORDER BY and LIMIT in the same SELECT",
            )
        inner.set("order", _substitute(order, alias, proj, False))
    for key in ("limit", "offset"):
        node = outer.args.get(key)
        if node is None:
            continue
        if inner.args.get(key) is None and not (key == "limit" and inner.args.get("offset")):
            inner.set(key, node.copy())
            continue
        a, b = _int_limit(inner.args.get(key)), _int_limit(node)
        if key == "offset" or a is None or b is None or inner.args.get("offset"):
            raise UnsupportedSql(
                f"{key.upper()} on both a subquery and its wrapper is not supported",
                hint="use one LIMIT",
            )
        inner.set(key, exp.Limit(expression=exp.Literal.number(min(a, b))))
    return inner


def _int_limit(node: exp.Expr | None) -> int | None:
    val = node.expression if isinstance(node, exp.Limit) else node
    if isinstance(val, exp.Literal) and not val.is_string and str(val.this).isdigit():
        return int(val.this)
    return None


def flatten(tree: exp.Expr) -> exp.Expr:
    """The flat equivalent of a private SELECT (unchanged when there is nothing to merge).

    Raises:
        StatementTooComplex: merging would copy more than :data:`MAX_COPIED_NODES` nodes.
    """
    if _copied.get() is not None:
        return _flatten(tree)
    token = _copied.set([0])
    try:
        return _flatten(tree)
    finally:
        _copied.reset(token)


def _flatten(tree: exp.Expr) -> exp.Expr:
    if not isinstance(tree, exp.Select):
        return tree
    q = _inline_ctes(tree)
    for _ in range(MAX_DEPTH):
        if q.args.get("joins"):
            merged = None if q.args.get("with_") else _merge_joined(q)
            if merged is None:
                return q
            q = merged
            continue
        src = q.args.get("from_")
        sub = src.this if src is not None else None
        if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
            return q
        if q.args.get("joins") or q.args.get("with_"):
            return q
        inner = flatten(sub.this)
        if not isinstance(inner, exp.Select) or isinstance(inner.args["from_"].this, exp.Subquery):
            return q
        sub = exp.Subquery(this=inner, alias=sub.args.get("alias"))
        check_mergeable(inner)
        if is_row_level(inner) or (
            is_row_level(inner, joins=True) and _reads_only(q, sub.alias_or_name)
        ):
            q = _merge_row_level(q, sub)
        elif is_aggregate_query(inner) and _is_row_level_wrapper(q):
            q = _merge_wrapper(q, sub)
        else:
            return q
    raise UnsupportedSql("subqueries are nested too deeply", hint=f"use at most {MAX_DEPTH} levels")


def _merge_joined(q: exp.Select) -> exp.Select | None:
    """``q`` with one row-level derived table of its joins merged, or None when none can be.

    ``FROM (SELECT user_id, amount * 2 AS v, region FROM purchases WHERE c) p JOIN regions r
    ON r.code = p.region`` reads the same rows as ``FROM purchases AS p JOIN regions r ON
    r.code = p.region WHERE c`` with ``p.v`` read as ``(p.amount * 2)``: the derived table is
    a view of one table's rows. Merged where that holds exactly: the derived table is in FROM
    with no RIGHT or FULL join after it, or is an inner (or comma) join; no USING or NATURAL
    join (they name columns on both sides by the derived table's output names).
    """
    joins = list(q.args.get("joins") or [])
    if any(j.args.get("using") or j.args.get("method") for j in joins):
        return None
    items: list[exp.Expr] = [q.args["from_"], *joins]
    for pos, item in enumerate(items):
        sub = item.this
        if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
            continue
        if pos == 0:
            outer = any(str(j.args.get("side") or "").upper() in ("RIGHT", "FULL") for j in joins)
        else:
            kind = str(item.args.get("kind") or "").upper()
            outer = bool(item.args.get("side")) or kind not in ("", "INNER", "CROSS")
        inner = flatten(sub.this)
        if outer or not isinstance(inner, exp.Select) or not is_row_level(inner):
            continue
        src = inner.args.get("from_")  # (SELECT 1) reads no table: nothing to merge
        if src is None or not isinstance(src.this, exp.Table):
            continue
        check_mergeable(inner)
        others = [i.this.alias_or_name for k, i in enumerate(items) if k != pos]
        try:
            return _merge_joined_at(q, pos, sub.alias_or_name, inner, others)
        except _Unmergeable:
            return None
    return None


class _Unmergeable(Exception):
    """An unqualified column the merge could not keep bound to the table it names."""


def _substitute_joined(
    node: exp.Expr,
    alias: str,
    proj: dict[str, exp.Expr],
    star: bool,
    keep: frozenset[str],
    others: list[str],
) -> exp.Expr:
    """:func:`_substitute` in a join: an unqualified column the derived table does not select
    belongs to another table of the join, and stays bound to it once the derived table's
    table (whose other columns were hidden) joins: qualified by that table when it is the
    only other one, else the merge is given up. Columns of nested SELECTs are theirs."""

    def fix(n: exp.Expr) -> exp.Expr:
        if not isinstance(n, exp.Column) or isinstance(n.this, exp.Star):
            return n
        if n.table and n.table != alias:
            return n
        if n.find_ancestor(exp.Select) is not None:
            # a nested SELECT's own column, or a correlated reference alias.x: once merged, the
            # alias names the table itself, so alias.x must be the table's own column x
            if n.table and not _same_column(n.name, proj, star):
                raise _Unmergeable(n.name)
            return n
        if not n.table and n.name in keep and n.name not in proj:
            return n
        if n.name in proj:
            return _definition(proj, n.name)
        quoted = n.this.quoted if n.this else False
        if n.table:  # alias.x, not selected by the derived table
            if star:
                return exp.column(n.name, table=alias, quoted=quoted)
            raise _no_column(alias, n.name)
        if star:  # every column of the table was visible through *: bound as before
            return n
        if len(others) == 1:
            return exp.column(n.name, table=others[0], quoted=quoted)
        raise _Unmergeable(n.name)

    return node.transform(fix, copy=True)


def _same_column(name: str, proj: dict[str, exp.Expr], star: bool) -> bool:
    """The derived table's output column ``name`` is its table's own column ``name``."""
    e = proj.get(name)
    if e is None:
        return star
    return isinstance(e, exp.Column) and e.name == name


def _merge_joined_at(
    q: exp.Select, pos: int, alias: str, inner: exp.Select, others: list[str]
) -> exp.Select:
    """:func:`_merge_joined` of the derived table ``alias`` (item ``pos`` of FROM and JOINs),
    whose flat row-level body is ``inner``: its table takes the alias, its columns are
    qualified by it, and its WHERE joins the outer one (an inner join: same rows)."""
    inner = inner.copy()
    table = inner.args["from_"].this
    mine = {"", table.alias_or_name, table.name}
    for part in [*inner.expressions, inner.args.get("where")]:
        for c in _own_columns(part, inner):
            if c.table in mine:
                c.set("table", exp.to_identifier(alias))
    proj, star = projection(inner), has_star(inner)
    out = q.copy()
    items = []
    none: frozenset[str] = frozenset()
    for e in out.expressions:
        sub_e = _substitute_joined(e, alias, proj, star, none, others)
        items.append(e.copy() if is_star(e) else keep_name(e, sub_e))
    out.set("expressions", items)
    names = frozenset(e.alias for e in q.expressions if isinstance(e, exp.Alias))
    for key in ("where", "group", "having", "order", "qualify"):
        v = out.args.get(key)
        if v is not None:
            keep = names if key != "where" else none
            out.set(key, _substitute_joined(v, alias, proj, star, keep, others))
    joins = out.args.get("joins") or []
    for j in joins:
        on = j.args.get("on")
        if on is not None:
            j.set("on", _substitute_joined(on, alias, proj, star, none, others))
    plain = exp.Table(
        this=table.this.copy(),
        db=table.args.get("db"),
        catalog=table.args.get("catalog"),
        alias=exp.TableAlias(this=exp.to_identifier(alias)),
    )
    slot = out.args["from_"] if pos == 0 else joins[pos - 1]
    slot.set("this", plain)
    return and_inner_where(out, inner)


def _own_columns(node: exp.Expr | None, select: exp.Select) -> list[exp.Column]:
    """The columns of ``node`` that belong to ``select``'s own FROM (not to a subquery's)."""
    if node is None:
        return []
    out = []
    for c in node.find_all(exp.Column):
        if isinstance(c.this, exp.Star):
            continue
        scope = c.find_ancestor(exp.Select)
        if scope is None or scope is select:
            out.append(c)
    return out


def _is_row_level_wrapper(q: exp.Select) -> bool:
    """True when the outer query only post-processes rows (no aggregate of its own)."""
    if q.args.get("group") or q.args.get("having") or q.args.get("windows"):
        return False
    parts = [*q.expressions, q.args.get("where"), q.args.get("order")]
    return not any(
        fn.is_aggregate(n) or isinstance(n, (exp.Window, exp.Subquery, exp.Select))
        for p in parts
        if p is not None
        for n in p.walk()
    )

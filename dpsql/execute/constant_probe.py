"""A statement's constants checked by PostgreSQL itself, reading no table: its own error words.

A constant PostgreSQL can't read (``amount > 'abc'``, ``DATE '2025-13-45'``, ``'2025-02-30'::date``,
``TO_DATE('xx', 'YYYY')``) fails in PostgreSQL from the statement alone: 22P02 ``invalid input
syntax for type numeric: "abc"``, 22008 ``date/time field value out of range``, 22007. dpsql's
own checks (the zero-row probe of :mod:`dpsql.execute.group_keys`, the totality checks of the
analyzer) refuse such a statement before anything is charged, but without PostgreSQL's words: the
zero-row probe's text is withheld (the planner reads the table's statistics, so its message is
not known to be free of data), and the analyzer's words are dpsql's.

Here the statement's expressions are sent with every column replaced by a NULL of the column's
type (read from the catalog) and no FROM: ``SELECT CAST(NULL AS numeric) > 'abc'``. PostgreSQL
coerces and folds the constants exactly as it would in the statement, and no table, statistic or
row is read, so its error (class 22, or 42883 for an operator the types lack) is a function of the statement and the schema: it is
relayed as PostgreSQL wrote it, and refused before any budget is reserved (nothing charged). The
probe is checked as a public statement (:func:`dpsql.sql.public.check_public`: no function with
side effects) before it is sent, an expression that is not is left out, as is an expression with a subquery, a parameter or a column of no
known type is left out of it. It runs only where a statement is refused anyway (the zero-row
probe failed, or the analyzer refused a constant): nothing is added to an answered statement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import ConstantRejected, DpsqlError, UpstreamError
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.public import check_public
from dpsql.sql.rewrite.make_total import checked_divisor, folded

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext

_TYPES_SQL = (
    "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod) "
    "FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = pg_catalog.to_regclass(%s) "
    "AND a.attnum > 0 AND NOT a.attisdropped"
)
TypesOf = Callable[[str], dict[str, str]]
_OPAQUE = (exp.Subquery, exp.Exists, exp.Parameter, exp.Placeholder, exp.Table)


def constant_error(
    engine: EngineContext, tree: exp.Expr, operators: bool = False
) -> ConstantRejected | None:
    """PostgreSQL's own error (class 22; with ``operators``, 42883, an operator its types lack:
    ``f % 2`` of a float) for ``tree``'s constants, or None when its constants are fine, not
    understood, or the check could not run."""
    try:
        sql = probe_sql(tree, lambda name: column_types(engine, name))
        if sql is None:
            return None
        engine.backend.run(sql, private=False)
    except UpstreamError as e:
        # 42883 (an operator the types lack: f % 2 of a float) only where the analyzer refused
        # one: the probe's own items (GROUP BY ROLLUP (1) as SELECT ROLLUP(1)) raise it too
        if not (e.sqlstate.startswith("22") or (operators and e.sqlstate == "42883")):
            return None
        return ConstantRejected(
            e.message,
            detail=e.detail,
            hint=e.hint
            or "PostgreSQL refuses this constant by itself, before reading any row: "
            "correct it (nothing was charged)",
            sqlstate=e.sqlstate,
        )
    except DpsqlError:
        return None  # the catalog read failed: dpsql's own refusal stands
    return None


def column_types(engine: EngineContext, table: str) -> dict[str, str]:
    """The columns of ``table`` (as written: its name resolves as the statement's does) and
    their types as PostgreSQL names them (``numeric(10,2)``); a catalog read."""
    rows = engine.backend.run(_TYPES_SQL, (table,), private=False).rows
    return {str(name): str(typ) for name, typ in rows}


def probe_sql(tree: exp.Expr, types_of: TypesOf) -> str | None:
    """``SELECT <each expression of tree, columns as typed NULLs>`` (no FROM), checked as a
    public statement; None when no expression has a constant to check."""
    items: list[exp.Expr] = []
    memo: dict[str, dict[str, str]] = {}

    def types(name: str) -> dict[str, str]:
        if name not in memo:
            memo[name] = types_of(name)
        return memo[name]

    for block in tree.find_all(exp.Select):
        for item in _items(block):
            if not any(isinstance(n, exp.Literal) for n in item.walk()):
                continue
            typed = _typed(_divisors_checked(item), block, types)
            if typed is not None and _public(typed):
                items.append(typed)
            # PostgreSQL folds NULL > f(...) to NULL without calling f: each constant part of
            # the item is asked on its own too (TO_DATE('xx', 'YYYY') is not folded, but run)
            items += [c.copy() for c in _constant_parts(item) if _public(c)]
    if not items:
        return None
    return exp.select(*items).sql(POSTGRES)


_VALUES = (exp.Func, exp.Binary, exp.Unary)
_OWN_CONTEXT = (exp.AggFunc, exp.Window, exp.Connector, exp.Predicate)


def _constant_parts(item: exp.Expr) -> list[exp.Expr]:
    """The largest parts of ``item`` that read no column and compute a value from a constant
    (a call, a cast, arithmetic: not a bare literal, whose type is its context's)."""
    out: list[exp.Expr] = []
    todo = [item]
    while todo:
        node = todo.pop()
        inner = list(node.walk())
        if (
            isinstance(node, _VALUES)
            and not isinstance(node, _OWN_CONTEXT)
            and not any(isinstance(n, (exp.Column, exp.Star, *_OPAQUE)) for n in inner)
            and any(isinstance(n, exp.Literal) for n in inner)
        ):
            if node is not item:
                out.append(node)
            continue
        todo += [c for c in node.iter_expressions()]
    return out


def folded_constants(tree: exp.Expr) -> bool:
    """Whether ``tree`` computes a constant the planner folds (``1/0``, ``1e30::int``,
    ``'1e400'::float8``) or divides a row's value by a constant that may be 0 (``amount % 0``):
    PostgreSQL's error for it comes from the statement alone, and :func:`constant_error` says
    it before anything is charged."""
    for block in tree.find_all(exp.Select):
        for item in _items(block):
            if not any(isinstance(n, exp.Literal) for n in item.walk()):
                continue
            parts = _constant_parts(item)
            if not item.find(exp.Column, exp.Star, *_OPAQUE):
                parts.append(item)
            if any(not _plain(p) and folded(p) for p in parts):
                return True
            if _zero_divisors(item):
                return True
    return False


def _plain(node: exp.Expr) -> bool:
    """A number as written (``5``, ``-5``, ``(5)``): nothing for the planner to compute."""
    while isinstance(node, (exp.Neg, exp.Paren)):
        node = node.this
    return isinstance(node, exp.Literal)


def _divisors_checked(item: exp.Expr) -> exp.Expr:
    """A copy of ``item`` in which a row's value divided by a constant that may be 0 (``amount
    % 0``) has the divisor dpsql sends (:func:`checked_divisor`): PostgreSQL fails on the first
    row it divides, dpsql while planning, where the division is reached (not in ``CASE WHEN
    false THEN amount % 0 END``, whose arm the planner drops unread)."""
    out = item.copy()
    for n in list(out.find_all(exp.Div, exp.Mod, exp.IntDiv)):
        if n.this.find(exp.Column):
            n.set("expression", checked_divisor(n.expression))
    return out


def _zero_divisors(item: exp.Expr) -> list[exp.Expr]:
    """For each ``/``, ``%`` or ``div`` in ``item`` by a constant that may be 0, the check that
    fails with PostgreSQL's 22012 when it is (:func:`checked_divisor`)."""
    out = []
    for n in item.find_all(exp.Div, exp.Mod, exp.IntDiv):
        if not n.this.find(exp.Column):
            continue  # a constant division: in the item itself, as PostgreSQL folds it
        d = n.expression.copy()
        checked = checked_divisor(d)
        if checked is not d:
            out.append(checked)
    return out


def _public(item: exp.Expr) -> bool:
    """Whether ``item`` passes the checks of a public statement (no function with effects)."""
    try:
        check_public(item)
    except DpsqlError:
        return False
    return True


def _items(block: exp.Select) -> list[exp.Expr]:
    """The expressions of one SELECT block PostgreSQL evaluates or plans."""
    out = [e.this if isinstance(e, exp.Alias) else e for e in block.expressions]
    conditions = [c.this for c in (block.args.get("where"), block.args.get("having")) if c]
    conditions += [j.args["on"] for j in block.args.get("joins") or [] if j.args.get("on")]
    for c in conditions:  # each conjunct on its own: one with a subquery leaves the others in
        out += list(c.flatten()) if isinstance(c, exp.And) else [c]
    group = block.args.get("group")
    if group is not None:
        out += [g for g in group.expressions if not isinstance(g, exp.Literal)]
    for part in (block.args.get("limit"), block.args.get("offset")):  # LIMIT 1/0: 22012
        count = part.args.get("expression") if part is not None else None
        if isinstance(count, exp.Expr) and not isinstance(count, exp.Literal):
            out.append(count)
    return out


def _typed(item: exp.Expr, block: exp.Select, types: TypesOf) -> exp.Expr | None:
    """``item`` with each column a NULL of its type; None when a column's type is unknown or
    the item reads a subquery, a parameter or a whole row."""
    if any(isinstance(n, _OPAQUE) for n in item.walk()):
        return None
    if any(isinstance(n, exp.Star) and not isinstance(n.parent, exp.Count) for n in item.walk()):
        return None
    out = item.copy()
    for col in list(out.find_all(exp.Column)):
        typ = _column_type(col, block, types)
        if typ is None:
            return None
        null = exp.cast(exp.null(), exp.DataType.build(typ, dialect="postgres", udt=True))
        if col is out:
            return null
        col.replace(null)
    return out


def _column_type(col: exp.Column, block: exp.Select, types: TypesOf) -> str | None:
    """The type of ``col`` read in ``block`` (or a block it is nested in): of the table its
    qualifier names, else of the one table of those in FROM that has such a column."""
    node: exp.Expr | None = block
    while node is not None:
        if isinstance(node, exp.Select):
            found = [
                types(exp.Table(this=t.this.copy(), db=t.args.get("db")).sql(POSTGRES))
                for t in _tables(node)
                if not col.table or col.table == t.alias_or_name
            ]
            hits = [cols[col.name] for cols in found if col.name in cols]
            if len(hits) == 1:
                return hits[0]
            if hits or (col.table and found):
                return None
        node = node.parent
    return None


def _tables(block: exp.Select) -> list[exp.Table]:
    """The tables (not CTEs) read directly in ``block``'s FROM and JOINs."""
    src = block.args.get("from_")
    refs = ([src.this] if src is not None else []) + [j.this for j in block.args.get("joins") or []]
    ctes = {c.alias_or_name for w in _withs(block) for c in w.expressions}
    return [t for t in refs if isinstance(t, exp.Table) and not (not t.db and t.name in ctes)]


def _withs(block: exp.Expr) -> list[exp.With]:
    out = []
    node: exp.Expr | None = block
    while node is not None:
        w = node.args.get("with_")
        if isinstance(w, exp.With):
            out.append(w)
        node = node.parent
    return out

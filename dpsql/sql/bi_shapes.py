"""Two shapes BI tools send over private tables that are answered without releasing anything.

* **Zero rows.** ``SELECT * FROM purchases LIMIT 0`` (or ``WHERE false`` / ``WHERE 1 = 0``) is
  how Superset, pandas, ORMs and JDBC tools discover a result's columns. It returns no row, so it
  is answered with the row description alone, free of charge: :func:`zero_row_query` turns it into
  a public statement that names only the policy's declared columns (``*`` expands to them, in the
  table's order; an undeclared column is 42703, as in the catalog) and reads no row upstream
  (``WHERE false LIMIT 0`` over the tables, no user expression but column references and casts).
* **Distinct keys.** ``SELECT DISTINCT region FROM purchases`` (a filter dropdown) is
  :func:`distinct_as_group_by`'s ``SELECT region FROM purchases GROUP BY region``: a GROUP BY
  without aggregates, which the private path answers from the declared keys (``keys:`` /
  ``keys_from:``) at no cost; without declared keys it stays refused (42501).

>>> import sqlglot
>>> from dpsql.policy.model import Policy
>>> p = Policy.model_validate({"tables": {"t": {"privacy_unit": "u", "columns": {
...     "u": {"type": "integer", "identifier": True}, "v": {"type": "integer"}}}}})
>>> zero_row_query(sqlglot.parse_one("SELECT * FROM t LIMIT 0", read="postgres"), p).sql("postgres")
'SELECT t.u, t.v FROM public.t AS t WHERE FALSE LIMIT 0'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlglot import exp
from sqlglot.optimizer.simplify import simplify

from dpsql.errors import UndefinedColumn
from dpsql.policy.model import Policy
from dpsql.sql.tables import referenced_tables

_ITEM_NODES = (exp.Column, exp.Star, exp.Cast, exp.Alias, exp.Identifier, exp.DataType,
               exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.DataTypeParam, exp.Var,
               exp.TableAlias)  # fmt: skip


def _is_false(where: exp.Expr | None) -> bool:
    cond = where.this if isinstance(where, exp.Where) else None
    if cond is None or any(True for _ in cond.find_all(exp.Query, exp.Func)):
        return False
    folded = simplify(cond.copy())
    return isinstance(folded, exp.Boolean) and not folded.this


def _is_limit_zero(tree: exp.Select) -> bool:
    limit = tree.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    return isinstance(value, exp.Literal) and value.is_int and int(value.name) == 0


def returns_no_rows(tree: exp.Expr | None, params: Sequence[object] = ()) -> bool:
    """True when the statement's own (outermost) ``LIMIT`` is 0: written so, or a parameter
    (``LIMIT $1``, ``LIMIT $1::INTEGER``) bound to 0. Its answer is no rows whatever the data,
    so it reads none and costs nothing.

    >>> import sqlglot
    >>> q = lambda s: sqlglot.parse_one(s, read="postgres")
    >>> returns_no_rows(q("SELECT COUNT(*) FROM t LIMIT 0")), returns_no_rows(q("SELECT 1 LIMIT 1"))
    (True, False)
    >>> returns_no_rows(q("SELECT COUNT(*) FROM t LIMIT $1"), [0])
    True
    """
    if not isinstance(tree, exp.Query):
        return False
    limit = tree.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if isinstance(value, exp.Literal):
        return value.is_int and int(value.name) == 0
    param = limit_param(tree, "limit")
    param = param.this if isinstance(param, exp.Cast) else param
    if not isinstance(param, exp.Parameter) or not isinstance(param.this, exp.Literal):
        return False
    i = int(param.this.this) - 1
    got = params[i] if 0 <= i < len(params) else None
    if isinstance(got, str) and got.strip().isdigit():
        return int(got.strip()) == 0
    return isinstance(got, int) and not isinstance(got, bool) and got == 0


def limit_params_zeroed(tree: exp.Expr) -> exp.Select | None:
    """``tree`` with its ``LIMIT $n`` / ``OFFSET $n`` parameters as ``0``, or None when neither
    is a parameter (a driver that binds the LIMIT, as SQLAlchemy and psycopg's server-side
    parameters do, sends ``LIMIT $1`` where a tool wrote ``LIMIT 0``)."""
    if not isinstance(tree, exp.Select):
        return None
    out = tree.copy()
    found = False
    for key in ("limit", "offset"):
        value = limit_param(out, key)
        if value is not None:
            value.replace(exp.Literal.number(0))
            found = True
    return out if found else None


def limit_param(tree: exp.Expr, key: str) -> exp.Expr | None:
    """The ``LIMIT`` (``key`` "limit") or ``OFFSET`` ("offset") of ``tree`` when it is a
    parameter, or one cast to an integer type (SQLAlchemy: ``LIMIT $1::INTEGER``)."""
    node = tree.args.get(key)
    value = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
    inner = value.this if isinstance(value, exp.Cast) and value.to.is_type(*_INTS) else value
    return value if isinstance(inner, (exp.Parameter, exp.Placeholder)) else None


_INTS = (exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT)


def _plain(tree: exp.Expr) -> bool:
    """A single SELECT over plain tables: no aggregate, grouping, window, subquery or CTE."""
    if not isinstance(tree, exp.Select) or tree.args.get("with_") or tree.args.get("distinct"):
        return False
    if any(tree.args.get(k) for k in ("group", "having", "qualify", "windows", "into", "locks")):
        return False
    if any(True for _ in tree.find_all(exp.AggFunc, exp.Window, exp.Parameter, exp.Placeholder)):
        return False
    sources = [tree.args.get("from_"), *(tree.args.get("joins") or [])]
    return all(s is not None and isinstance(s.this, exp.Table) and isinstance(s.this.this,
               exp.Identifier) for s in sources)  # fmt: skip


def zero_row_query(
    tree: exp.Expr, policy: Policy, order: Callable[[str], Sequence[str]] | None = None
) -> exp.Select | None:
    """The public statement answering a zero-row shape of ``tree``, or None if it is not one.

    ``order(table)``: the table's column names in PostgreSQL's order (``*`` lists the declared
    ones in it); without it, the policy's order.

    Raises:
        UndefinedColumn: 42703, a column the policy does not declare (hidden, as in the catalog).
    """
    if not isinstance(tree, exp.Select) or not _plain(tree):
        return None
    if not (_is_limit_zero(tree) or _is_false(tree.args.get("where"))):
        return None
    if not all(_item_ok(e) for e in tree.expressions):
        return None
    tables = _sources(tree, policy, order)
    for col in tree.find_all(exp.Column):
        if not isinstance(col.this, exp.Star):
            _resolve(col, tables)
    items: list[exp.Expr] = []
    for item in tree.expressions:
        items.extend(_expand(item, tables))
    out = exp.select(*items)
    for i, (alias, name, _) in enumerate(tables):
        t = exp.to_table(name)
        t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        out = out.from_(t) if i == 0 else out.join(t, join_type="CROSS")
    return out.where(exp.false()).limit(0)


def _item_ok(item: exp.Expr) -> bool:
    return all(isinstance(n, _ITEM_NODES) for n in item.walk())


Source = tuple[str, str, tuple[str, ...] | None]  # alias, qualified name, declared columns


def _sources(
    tree: exp.Select, policy: Policy, order: Callable[[str], Sequence[str]] | None
) -> list[Source]:
    out: list[Source] = []
    for name, table in referenced_tables(tree):
        private = policy.private_table(name)
        cols = tuple(private.columns) if private is not None else None
        if cols is not None and order is not None:
            rank = {c: i for i, c in enumerate(order(name))}
            cols = tuple(sorted(cols, key=lambda c: rank.get(c, len(rank))))
        out.append((table.alias_or_name, name, cols))
    return out


def _resolve(col: exp.Column, tables: list[Source]) -> Source:
    name = col.name
    for src in tables:
        alias, _, cols = src
        if col.table and col.table != alias:
            continue
        if cols is None or name in cols:
            return src
    shown = f"{col.table}.{name}" if col.table else f'"{name}"'  # PostgreSQL's wording
    raise UndefinedColumn(f"column {shown} does not exist",
                          hint="only the columns the policy declares can be named")  # fmt: skip


def _expand(item: exp.Expr, tables: list[Source]) -> list[exp.Expr]:
    """``*`` / ``t.*`` -> the declared columns; other items as written."""
    star_of: str | None = None
    if isinstance(item, exp.Star):
        star_of = ""
    elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
        star_of = item.table
    if star_of is None:
        return [item.copy()]
    out: list[exp.Expr] = []
    for alias, _, cols in tables:
        if star_of and star_of != alias:
            continue
        if cols is None:
            out.append(exp.Column(this=exp.Star(), table=exp.to_identifier(alias)))
        else:
            out.extend(exp.column(c, table=alias) for c in cols)
    return out


def distinct_as_group_by(tree: exp.Expr) -> exp.Select | None:
    """``SELECT DISTINCT a, b FROM ...`` without aggregates -> ``... GROUP BY a, b``; None for
    any other statement (DISTINCT ON, aggregates, an existing GROUP BY, ``*``)."""
    if not isinstance(tree, exp.Select):
        return None
    distinct = tree.args.get("distinct")
    if not isinstance(distinct, exp.Distinct) or distinct.args.get("on") is not None:
        return None
    if tree.args.get("group") or any(True for _ in tree.find_all(exp.AggFunc, exp.Window)):
        return None
    if any(isinstance(e, exp.Star) or e.find(exp.Star) for e in tree.expressions):
        return None
    out = tree.copy()
    out.set("distinct", None)
    keys = [e.this if isinstance(e, exp.Alias) else e for e in out.expressions]
    return out.group_by(*(k.copy() for k in keys), copy=False)

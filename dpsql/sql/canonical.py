"""The canonical form of a query, so that trivially different spellings share one stored answer.

Repeats are free only when the canonical form, the parameters, epsilon, delta and mechanism all
match (:func:`cache_key`). Merging two queries that mean different things would return a wrong
(though already paid-for) answer, so every normalization here is meaning-preserving in
PostgreSQL, and is skipped when it might not be:

- comments and whitespace (the form is the parse tree, not the text);
- identifier case: unquoted names fold to lower case, then quoting is irrelevant;
- parentheses: the tree already encodes grouping, so ``Paren`` nodes are dropped;
- ``AND TRUE`` / ``AND 1 = 1`` and ``OR FALSE`` / ``OR 1 = 0`` are dropped (3-valued logic keeps
  ``x AND TRUE = x``), ``WHERE TRUE`` disappears, duplicate conjuncts collapse;
- order of commutative predicates: AND / OR operands are flattened and sorted; ``=``, ``<>`` and
  ``IS NOT DISTINCT FROM`` operands are sorted; ``1 < a`` becomes ``a > 1``; IN lists are sorted;
- ``GROUP BY 1`` is the first output's expression (:func:`resolve_group_positions`);
- over one table (no join, subquery, CTE), its name or alias as a column qualifier is dropped,
  then the alias itself (:func:`drop_single_table_qualifiers`);
- table aliases are renamed ``_t1, _t2, ...`` (skipped when an alias name is used as anything but an
  alias or a column qualifier);
- the outermost SELECT's outputs are named ``_c1, ...`` by position, aliased or not (skipped when
  a bare name in GROUP BY / ORDER BY / DISTINCT ON could change meaning). Output names are
  therefore NOT part of the key: a stored answer holds the values, and the column names come
  from the statement being answered.

The key is a hash of a structural serialization of the normalized tree (unambiguous, unlike SQL
text regenerated without the dropped parentheses).

>>> canonical("SELECT count(*) FROM people p WHERE (p.age > 30) AND 1=1").digest == canonical(
...     "select COUNT(*) from People AS x where 30 < x.age -- adults").digest
True
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from dpsql.dp.accounting import exact
from dpsql.sql.syntax_errors import syntax_error

VERSION = 1
_FRESH = re.compile(r"^_[tc]\d+$")
_FLIP: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LT,
    exp.LT: exp.GT,
    exp.GTE: exp.LTE,
    exp.LTE: exp.GTE,
}
_SYMMETRIC = (exp.EQ, exp.NEQ, exp.NullSafeEQ)


@dataclass(frozen=True)
class Canonical:
    """A normalized statement: its tree (a private copy), its serialization and digest."""

    tree: exp.Expr
    form: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.form.encode()).hexdigest()

    @property
    def sql(self) -> str:
        """Readable SQL of the normalized tree, every nested operation parenthesized."""
        shown = self.tree.copy()
        for node in list(shown.walk()):
            if isinstance(node, exp.Binary | exp.Not | exp.Neg) and isinstance(
                node.parent, exp.Binary | exp.Not | exp.Neg
            ):
                node.replace(exp.Paren(this=node.copy()))
        return shown.sql(dialect="postgres")


def canonical(statement: str | exp.Expr) -> Canonical:
    """Normalize one statement (text or a tree, which is copied, never mutated)."""
    if isinstance(statement, str):
        try:
            tree = sqlglot.parse_one(statement, read="postgres")
        except ParseError as e:
            raise syntax_error(statement, e) from e
    else:
        tree = statement.copy()
    for node in tree.walk():
        node.comments = None
    tree = normalize_identifiers(tree, dialect="postgres")
    for paren in list(tree.find_all(exp.Paren)):
        paren.replace(paren.this)
    resolve_group_positions(tree)
    drop_single_table_qualifiers(tree)
    rename_aliases(tree)
    rename_outputs(tree)
    tree = _bottom_up(tree)
    where = tree.args.get("where")
    if isinstance(where, exp.Where) and _is_true(where.this):
        where.pop()
    return Canonical(tree, serialize(tree))


def cache_key(
    statement: str | exp.Expr | Canonical,
    params: Sequence[object] = (),
    epsilon: Fraction | float | int | str = 0,
    delta: Fraction | float | int | str = 0,
    mechanism: str = "",
    *,
    extra: str = "",
) -> str:
    """The repeat-cache key: canonical form + parameters + epsilon + delta + mechanism (+ extra).

    Pass the effective epsilon and delta (after defaults); ``extra`` can carry anything else the
    answer depends on (e.g. a digest of the policy's bounds).
    """
    form = statement if isinstance(statement, Canonical) else canonical(statement)
    e, d = exact(epsilon), exact(delta)
    blob = json.dumps(
        {
            "v": VERSION,
            "q": form.form,
            "p": [_param(p) for p in params],
            "e": f"{e.numerator}/{e.denominator}",
            "d": f"{d.numerator}/{d.denominator}",
            "m": mechanism,
            "x": extra,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _param(v: Any) -> list[str]:
    if v is None:
        return ["null", ""]
    if isinstance(v, bool):
        return ["bool", str(v)]
    if isinstance(v, bytes | bytearray | memoryview):
        return ["bytea", bytes(v).hex()]
    if isinstance(v, datetime | date | time):
        return [type(v).__name__, v.isoformat()]
    if isinstance(v, int | float | Decimal | Fraction | str | timedelta):
        return [type(v).__name__, repr(v)]
    return [type(v).__qualname__, repr(v)]


def serialize(node: Any) -> str:
    """An unambiguous text of a tree: class names and every argument but ``quoted``."""
    if isinstance(node, exp.Expression):
        parts = [
            f"{k}={serialize(v)}"
            for k, v in sorted(node.args.items())
            if k != "quoted" and v is not None and v != []
        ]
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(serialize(x) for x in node) + "]"
    return json.dumps(node) if isinstance(node, str) else repr(node)


# --- aliases -----------------------------------------------------------------------------------


def resolve_group_positions(tree: exp.Expr) -> None:
    """``GROUP BY 1`` becomes the first output's expression (``GROUP BY region``), in every
    SELECT of the tree, when that provably keeps its meaning.

    PostgreSQL reads a bare integer constant in GROUP BY as the position of an output and
    groups by that output's expression, exactly as if it were written there; a bare name in
    GROUP BY is an input column first. So the output's expression written in its place means
    the same, unless it is a bare name that is also another output's alias (an outer query's
    column of that name would then lose to the alias): left as written. Nothing is done when
    the list has a ``*`` (positions count its expansion), or the constant is not a position.
    """
    for sel in list(tree.find_all(exp.Select)):
        group = sel.args.get("group")
        if group is None or not group.expressions:
            continue
        items = sel.expressions
        if any(_expands(i) for i in items):
            continue
        aliases = {i.alias for i in items if isinstance(i, exp.Alias)}
        for g in list(group.expressions):
            if not (isinstance(g, exp.Literal) and not g.is_string and g.this.isdigit()):
                continue
            pos = int(g.this)
            if not 1 <= pos <= len(items):
                continue
            item = items[pos - 1]
            target = item.this if isinstance(item, exp.Alias) else item
            if isinstance(target, exp.Literal) or target.find(exp.Placeholder) is not None:
                continue  # a constant output: PostgreSQL's own rules for it are left as written
            if isinstance(target, exp.Column) and not target.table and target.name in aliases:
                continue
            g.replace(target.copy())


def _expands(item: exp.Expr) -> bool:
    """``*``, ``t.*`` or ``(row).*``: an output list item that is several columns."""
    inner = item.this if isinstance(item, exp.Alias) else item
    return (
        isinstance(inner, exp.Star)
        or (isinstance(inner, exp.Column | exp.Dot) and isinstance(inner.this, exp.Star))
        or (isinstance(inner, exp.Dot) and isinstance(inner.expression, exp.Star))
    )


def drop_single_table_qualifiers(tree: exp.Expr) -> None:
    """A statement over one table (no join, no subquery, CTE or set operation) names its
    columns the same with or without the table's name or alias: ``SELECT p.region FROM
    purchases p`` and ``SELECT region FROM purchases`` are one query. The qualifiers that name
    the table are dropped, then its alias when nothing else uses that name (a bare ``p`` is the
    whole row: kept). Schema-qualified columns and tables are left as written."""
    if not isinstance(tree, exp.Select) or sum(1 for _ in tree.find_all(exp.Select)) != 1:
        return
    if tree.args.get("joins") or tree.args.get("with") or tree.find(exp.Subquery) is not None:
        return
    from_ = tree.args.get("from_") or tree.args.get("from")
    if not isinstance(from_, exp.From) or not isinstance(from_.this, exp.Table):
        return
    table = from_.this
    if table.args.get("joins") or not isinstance(table.this, exp.Identifier):
        return
    alias = table.args.get("alias")
    if alias is not None and (
        alias.args.get("columns") or not isinstance(alias.this, exp.Identifier)
    ):
        return
    name = alias.this.name if alias is not None else table.name
    columns = list(tree.find_all(exp.Column))
    if any(c.args.get("db") or c.args.get("catalog") for c in columns):
        return
    for c in columns:
        if c.table == name:
            c.set("table", None)
    if alias is not None and not any(c.table == name or c.name == name for c in columns):
        table.set("alias", None)


def rename_aliases(tree: exp.Expr) -> None:
    """Rename table/subquery aliases to ``_t1, _t2, ...`` in order of definition, when safe.

    Safe means each alias name occurs only as an alias definition or a column qualifier, and no
    name already looks like a canonical one, so the renaming is a bijection to fresh names and
    every qualifier still resolves to the same FROM item.
    """
    defs = [
        a.this
        for a in tree.find_all(exp.TableAlias)
        if isinstance(a.parent, exp.Table | exp.Subquery) and isinstance(a.this, exp.Identifier)
    ]
    names = list(dict.fromkeys(i.name for i in defs))
    if not names:
        return
    targets: list[exp.Identifier] = []
    for ident in tree.find_all(exp.Identifier):
        if _FRESH.match(ident.name):
            return
        if ident.name not in names:
            continue
        parent, key = ident.parent, ident.arg_key
        alias_def = isinstance(parent, exp.TableAlias) and key == "this"
        alias_def = (
            alias_def and parent is not None and isinstance(parent.parent, exp.Table | exp.Subquery)
        )
        qualifier = isinstance(parent, exp.Column) and key == "table"
        if not (alias_def or qualifier):
            return
        targets.append(ident)
    mapping = {n: f"_t{i + 1}" for i, n in enumerate(names)}
    for ident in targets:
        ident.set("this", mapping[ident.name])


def rename_outputs(tree: exp.Expr) -> None:
    """Name the outermost SELECT's outputs ``_c<position>`` (ORDER BY aliases follow), when safe.

    Output names are not part of the answer's values. A bare name in ORDER BY may mean an output
    column, and in GROUP BY an input column first and an output column otherwise; the renaming
    goes ahead only when each such name provably keeps its meaning.
    """
    if not isinstance(tree, exp.Select):
        return
    items = tree.expressions
    explicit = [i.alias for i in items if isinstance(i, exp.Alias)]
    if len(set(explicit)) != len(explicit) or any(_FRESH.match(n) for n in explicit):
        return
    plain = {
        i.name for i in items if isinstance(i, exp.Column) and not isinstance(i.this, exp.Star)
    }
    # an unaliased expression has an implicit output name (count, ?column?...) we do not model
    implicit = any(not isinstance(i, exp.Alias | exp.Column) for i in items)

    def keeps_meaning(clause: str, name: str) -> bool:
        if name in explicit:
            return clause == "order"  # ORDER BY: the output column, renamed along
        return name in plain or not implicit

    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return  # DISTINCT ON (n) resolves names like ORDER BY: leave it
    for clause in ("group", "order"):
        node = tree.args.get(clause)
        if node is None:
            continue
        for e in node.expressions:
            col = e.this if isinstance(e, exp.Ordered) else e
            # ROLLUP / CUBE / GROUPING SETS: their bare names resolve like GROUP BY's own
            sets = isinstance(col, exp.Rollup | exp.Cube | exp.GroupingSets | exp.Tuple)
            for c in col.find_all(exp.Column) if sets else [col]:
                if isinstance(c, exp.Column) and not c.table and not keeps_meaning(clause, c.name):
                    return
    mapping = {}
    for pos, item in enumerate(list(items)):
        name = f"_c{pos + 1}"
        if isinstance(item, exp.Alias):
            mapping[item.alias] = name
            item.set("alias", exp.to_identifier(name))
        elif isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
            mapping.setdefault(item.name, name)  # its implicit output name, for ORDER BY
            item.replace(exp.alias_(item.copy(), name))
        elif not isinstance(item, exp.Star | exp.Column):
            item.replace(exp.alias_(item.copy(), name))
    order = tree.args.get("order")
    if order is not None:
        for o in order.expressions:
            col = o.this
            if isinstance(col, exp.Column) and not col.table and col.name in mapping:
                o.set("this", exp.column(mapping[col.name]))


# --- predicates --------------------------------------------------------------------------------


def _literal_value(node: exp.Expr) -> tuple[bool, str | Decimal] | None:
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return True, node.this
    try:
        return False, Decimal(node.this)
    except InvalidOperation:
        return None


def _is_true(node: exp.Expr) -> bool:
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.EQ):
        a, b = _literal_value(node.this), _literal_value(node.expression)
        return a is not None and a == b
    return False


def _is_false(node: exp.Expr) -> bool:
    if isinstance(node, exp.Boolean):
        return not node.this
    if isinstance(node, exp.EQ):
        a, b = _literal_value(node.this), _literal_value(node.expression)
        return a is not None and b is not None and not a[0] and not b[0] and a[1] != b[1]
    return False


def _flatten(node: exp.Expr, kind: type[exp.Expr]) -> list[exp.Expr]:
    if isinstance(node, kind):
        return _flatten(node.this, kind) + _flatten(node.expression, kind)
    return [node]


def _bottom_up(tree: exp.Expr) -> exp.Expr:
    """Apply :func:`_normalize_node` to every node, children before their parents."""
    for node in reversed(list(tree.dfs())):
        new = _normalize_node(node)
        if new is not node:
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return tree


def _normalize_node(node: exp.Expr) -> exp.Expr:
    """Applied bottom-up: children are already normalized."""
    if isinstance(node, exp.And | exp.Or):
        kind = type(node)
        unit, absorbing = (_is_true, _is_false) if kind is exp.And else (_is_false, _is_true)
        ops = [o for o in _flatten(node, kind) if not unit(o)]
        if any(absorbing(o) for o in ops):
            return exp.Boolean(this=kind is exp.Or)
        if not ops:
            return exp.Boolean(this=kind is exp.And)
        keyed = sorted({serialize(o): o for o in ops}.items())
        out = keyed[0][1]
        for _, o in keyed[1:]:
            out = kind(this=out, expression=o)
        return out
    if isinstance(node, _SYMMETRIC):
        a, b = node.this, node.expression
        if serialize(a) > serialize(b):
            return type(node)(this=b, expression=a)
        return node
    flip = _FLIP.get(type(node))
    if flip is not None:
        a, b = node.this, node.expression
        if serialize(a) > serialize(b):
            return flip(this=b, expression=a)
        return node
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        keyed = sorted({serialize(e): e for e in node.expressions}.items())
        node.set("expressions", [e for _, e in keyed])
    return node

"""A join of two per-person derived tables of one private table, on the person, is one per-person
derived table whose aggregates say which side each comes from (``FILTER``).

Returning patients (newcomer22 #22)::

    SELECT COUNT(*) FROM (SELECT patient_id FROM visits WHERE visit_date < '2025-01-01'
                          GROUP BY patient_id) a
    JOIN (SELECT patient_id FROM visits WHERE visit_date >= '2025-01-01' GROUP BY patient_id) b
      ON a.patient_id = b.patient_id

has a row for each person with a row passing each side's WHERE, with each side's aggregates over
those rows. That is exactly::

    SELECT COUNT(*) FROM (SELECT patient_id,
        COUNT(*) FILTER (WHERE visit_date < '2025-01-01') AS _a_rows,
        COUNT(*) FILTER (WHERE visit_date >= '2025-01-01') AS _b_rows
      FROM visits WHERE (visit_date < '2025-01-01') OR (visit_date >= '2025-01-01')
      GROUP BY patient_id) a
    WHERE _a_rows > 0 AND _b_rows > 0

(each side's aggregate ``f(x)`` as ``f(x) FILTER (WHERE its WHERE)``), a derived table grouped
by the privacy unit alone, which
:mod:`dpsql.sql.per_unit` answers (or refuses) as if the analyst had written it. A pure rewrite
to an equivalent statement: nothing here is trusted for privacy.

Read only this shape: two derived tables (not CTEs), each ``SELECT unit [, aggregates AS name]
FROM t [WHERE ...] GROUP BY unit`` (no HAVING) over the same private table ``t`` with privacy
unit ``unit``, joined INNER ``ON a.unit = b.unit``, the outer statement naming their columns as
``a.x`` / ``b.x``. Anything else is left as written (and refused as before, with its hint).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.policy.model import Policy
from dpsql.sql import functions as fn
from dpsql.sql.derived import keep_name
from dpsql.sql.sources import table_name


@dataclass(frozen=True)
class _Side:
    alias: str
    table: str
    unit: str  # the unit column's output name
    aggs: dict[str, exp.Expr]  # output name -> aggregate
    where: exp.Expr | None


def merge_unit_joins(tree: exp.Expr, policy: Policy) -> exp.Expr:
    """``tree`` with such a join written as one derived table (a new tree), else ``tree``."""
    if not isinstance(tree, exp.Select) or tree.args.get("with_"):
        return tree
    joins = tree.args.get("joins") or []
    src = tree.args.get("from_")
    if src is None or len(joins) != 1:
        return tree
    j = joins[0]
    if str(j.args.get("side") or "") or str(j.args.get("kind") or "").upper() not in ("", "INNER"):
        return tree
    a, b = _side(src.this, policy), _side(j.this, policy)
    if a is None or b is None or a.table != b.table or a.alias == b.alias:
        return tree
    if not _on_units(j.args.get("on"), a, b) or not _outer_refs_ok(tree, a, b):
        return tree
    return _rewrite(tree, a, b)


def _side(node: exp.Expr, policy: Policy) -> _Side | None:
    if not isinstance(node, exp.Subquery) or not isinstance(node.this, exp.Select):
        return None
    q = node.this
    if any(q.args.get(k) for k in ("joins", "with_", "distinct", "limit", "offset", "order")):
        return None
    src = q.args.get("from_")
    if src is None or not isinstance(src.this, exp.Table) or isinstance(src.this.this, exp.Func):
        return None
    table = table_name(src.this)
    private = policy.private_table(table)
    group = q.args.get("group")
    if private is None or private.row_privacy or group is None or len(group.expressions) != 1:
        return None
    unit = private.privacy_unit
    g = group.expressions[0]
    if not (isinstance(g, exp.Column) and g.name == unit):
        return None
    unit_out: str | None = None
    aggs: dict[str, exp.Expr] = {}
    for item in q.expressions:
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(body, exp.Column) and body.name == unit:
            unit_out = item.alias_or_name
        elif isinstance(item, exp.Alias) and fn.is_aggregate(body) and not body.find(exp.Window):
            aggs[item.alias] = body
        else:
            return None
    where = q.args.get("where")
    if unit_out is None or unit_out in aggs or q.args.get("having"):
        return None
    if any(x.find(exp.Query, exp.Subquery) for x in [*aggs.values(), *([where] if where else [])]):
        return None
    own = {src.this.alias_or_name, src.this.name}
    parts = [*aggs.values(), *([where.this] if where else [])]
    if any(c.table not in ("", *own) for p in parts for c in p.find_all(exp.Column)):
        return None
    return _Side(
        node.alias_or_name,
        table,
        unit_out,
        {k: _unqualified(v) for k, v in aggs.items()},
        _unqualified(where.this) if where else None,
    )


def _unqualified(node: exp.Expr) -> exp.Expr:
    """A copy of ``node`` (over one table) with its columns' table names dropped: the merged
    derived table reads the table unaliased."""
    out = node.copy()
    for c in out.find_all(exp.Column):
        c.set("table", None)
    return out


def _on_units(on: exp.Expr | None, a: _Side, b: _Side) -> bool:
    while isinstance(on, exp.Paren):
        on = on.this
    if not isinstance(on, exp.EQ):
        return False
    x, y = on.this, on.expression
    if not (isinstance(x, exp.Column) and isinstance(y, exp.Column)):
        return False
    pair = {(x.table, x.name), (y.table, y.name)}
    return pair == {(a.alias, a.unit), (b.alias, b.unit)}


def _outer_refs(tree: exp.Select) -> list[exp.Column]:
    return [
        c
        for c in tree.find_all(exp.Column)
        if c.find_ancestor(exp.Select) is tree and not c.find_ancestor(exp.Join)
    ]


def _outer_refs_ok(tree: exp.Select, a: _Side, b: _Side) -> bool:
    if any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
           for e in tree.expressions):  # fmt: skip
        return False
    for c in _outer_refs(tree):
        side = a if c.table == a.alias else b if c.table == b.alias else None
        if side is None or (c.name != side.unit and c.name not in side.aggs):
            return False
    return True


def _filtered(agg: exp.Expr, cond: exp.Expr | None) -> exp.Expr:
    """``agg`` over the rows where ``cond`` holds (FILTER), as the side's WHERE kept them."""
    if cond is None:
        return agg.copy()
    return exp.Filter(this=agg.copy(), expression=exp.Where(this=exp.Paren(this=cond.copy())))


def _rewrite(tree: exp.Select, a: _Side, b: _Side) -> exp.Select:
    merged_alias = a.alias
    items: list[exp.Expr] = [exp.alias_(exp.column(a.unit), a.unit, quoted=True)]
    names: dict[tuple[str, str], str] = {(a.alias, a.unit): a.unit, (b.alias, b.unit): a.unit}
    conds: list[exp.Expr] = []
    for tag, s in (("a", a), ("b", b)):
        for name, agg in s.aggs.items():
            merged = f"_{tag}_{name}"
            names[(s.alias, name)] = merged
            items.append(exp.alias_(_filtered(agg, s.where), merged, quoted=True))
        rows = f"_{tag}_rows"
        items.append(exp.alias_(_filtered(exp.Count(this=exp.Star()), s.where), rows, quoted=True))
        conds.append(exp.GT(this=exp.column(rows, quoted=True), expression=exp.Literal.number(0)))
    inner = exp.select(*items).from_(exp.to_table(a.table), copy=False)
    if a.where is not None and b.where is not None:
        inner = inner.where(
            exp.or_(exp.Paren(this=a.where.copy()), exp.Paren(this=b.where.copy())), copy=False
        )
    inner = inner.group_by(exp.column(a.unit), copy=False)

    def ref(n: exp.Expr) -> exp.Expr:
        if (
            isinstance(n, exp.Column)
            and (n.table, n.name) in names
            and not n.find_ancestor(exp.Subquery)
        ):
            return exp.column(names[(n.table, n.name)], table=merged_alias, quoted=True)
        return n

    out = tree.copy()
    out.set("joins", None)
    out.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(
        this=exp.to_identifier(merged_alias)))))  # fmt: skip
    out.set("expressions", [keep_name(e, e.copy().transform(ref)) for e in tree.expressions])
    for key in ("where", "group", "having", "order"):
        v = out.args.get(key)
        if v is not None:
            out.set(key, v.transform(ref))
    # the persons with rows on both sides, then the statement's own WHERE
    where = out.args.get("where")
    cond = exp.and_(*conds, *([exp.Paren(this=where.this)] if where is not None else []))
    out.set("where", exp.Where(this=cond))
    return out

"""The rows a private statement reads: ``SELECT <columns> FROM <its tables and joins>``, made
total, with each joined private table first keeping at most R rows per unit (:func:`capped_table`).
Contribution bounding (:mod:`dpsql.sql.rewrite.bound_contributions`), the auto-bound histograms
(:mod:`dpsql.sql.rewrite.measure_bounds`) and the zero-row type probe
(:mod:`dpsql.execute.group_keys`) all start from these rows."""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql.analysis import Analysis
from dpsql.sql.join_cap import precap
from dpsql.sql.nodes import table as table_node
from dpsql.sql.rewrite.keyed_hash import row_identity, row_order
from dpsql.sql.rewrite.make_total import make_total


def source_select(a: Analysis, salt: str, *columns: exp.Expr) -> exp.Select:
    """``SELECT columns FROM <the query's tables and joins>`` (row-level, made total).

    Contribution bounding runs on the rows this produces, i.e. after any join. When private
    tables are joined (on their units), each one first keeps at most R rows per unit
    (:func:`capped_table`), so that one unit with many rows can't multiply the work of the join
    (n(u)^k joined rows: whether a query times out would say whether such a unit exists).
    """
    alias, table = (a.sources[0][0], a.sources[0][1]) if a.sources else (a.alias, a.table)
    cap = sum(1 for _, _, p in a.sources if p is not None) > 1
    first: exp.Expr = table_node(table).as_(alias, quoted=True, copy=False)
    if cap and a.sources[0][2] is not None:
        first = capped_table(a, alias, table, a.sources[0][2].privacy_unit, salt)
    q = exp.select(*columns).from_(first, copy=False)
    for j, (jalias, jtable, private) in zip(a.joins, a.sources[1:], strict=True):
        out = make_join_total(j, a)
        if cap and private is not None:
            # the right side of a LEFT JOIN keeps its conditions in the outer WHERE only: a
            # row filtered out early would come back NULL-extended (e.g. WHERE q.x IS NULL)
            left = (j.args.get("side") or "").upper() == "LEFT"
            capped = capped_table(a, jalias, jtable, private.privacy_unit, salt, push=not left)
            out.set("this", capped)
        q = q.join(out, copy=False)
    return q


def capped_table(
    a: Analysis, alias: str, table: str, unit: str, salt: str, *, push: bool = True
) -> exp.Expr:
    """``table AS alias`` keeping at most R = max_rows_per_unit rows per unit (with ``auto`` R:
    the wider, public :func:`dpsql.sql.join_cap.precap`), chosen by a keyed
    hash of the whole row among the rows that pass the WHERE conditions reading this table only
    (``push``)::

        (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY alias.unit
                            ORDER BY hashtextextended(salt | ROW(alias.*)::text, 0),
                                     ROW(alias.*)::text)
                          AS _dp_pre FROM table AS alias WHERE <its own conditions>) AS alias
         WHERE _dp_pre <= R) AS alias

    The choice depends on the unit's own rows only, so the neighbouring-database argument of
    :mod:`dpsql.sql.rewrite.bound_partials` is unchanged; bounding after the join still keeps
    at most R rows per (unit, group). A unit's joined rows are at most R^k for k private tables.
    """
    ident = exp.to_identifier(alias, quoted=True)
    whole = row_identity([exp.Column(this=exp.Star(), table=ident.copy())])
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column(unit, table=ident.copy(), quoted=True)],
        order=exp.Order(expressions=row_order(salt, whole)),
    )
    inner = exp.select(exp.Star(), exp.alias_(rank, "_dp_pre", copy=False))
    inner = inner.from_(table_node(table).as_(alias, quoted=True, copy=False), copy=False)
    own = _own_conditions(a.where, alias) if push else []
    if own:
        cond = exp.and_(*[exp.Paren(this=make_total(c, a.column)) for c in own], copy=False)
        inner = inner.where(cond, copy=False)
    keep = exp.LTE(this=exp.column("_dp_pre"), expression=exp.Literal.number(precap(a)))
    outer = exp.select(exp.Star()).from_(inner.subquery(ident.copy(), copy=False), copy=False)
    return outer.where(keep, copy=False).subquery(ident.copy(), copy=False)


def _own_conditions(where: exp.Expr | None, alias: str) -> list[exp.Expr]:
    """The AND-ed conditions of ``where`` that read columns of ``alias`` only (no subquery)."""
    if where is None:
        return []
    while isinstance(where, exp.Paren):
        where = where.this
    parts = list(where.flatten()) if isinstance(where, exp.And) else [where]
    out = []
    for c in parts:
        cols = list(c.find_all(exp.Column))
        if cols and all(x.table == alias for x in cols) and not c.find(exp.Select):
            out.append(c.copy())
    return out


def make_join_total(j: exp.Join, a: Analysis) -> exp.Join:
    out = j.copy()
    on = out.args.get("on")
    if on is not None:
        out.set("on", make_total(on, a.column))
    return out

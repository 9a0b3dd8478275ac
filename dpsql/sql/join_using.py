"""``JOIN t USING (c)`` of a private query is ``JOIN t ON l.c = t.c``, with ``c`` read as ``l.c``.

PostgreSQL's ``a JOIN b USING (c)`` is the inner (or left) equi-join ``ON a.c = b.c`` whose
output has one merged column ``c``: for an INNER or LEFT join that column is the left side's
``a.c`` (equal to ``b.c`` on every joined row of an inner join, and the kept row's value of a
left join). So the statement is rewritten to the ON form, and each unqualified reference to ``c``
of the same SELECT (outside its subqueries) is qualified with the left side's name: the analysis
then checks it exactly as the hand-written ``ON`` join (a join of private tables on their privacy
units, a private table and public tables), with the same plan.

The left side is the one earlier table that has ``c``: the only earlier table, the side that an
earlier ``USING (c)`` merged, or the one private table of the policy that declares ``c`` when
every other earlier table is a private table that doesn't (PostgreSQL refuses ``c`` in two left
tables: "common column name appears more than once"). Anything else (a public table or a derived
table among several earlier ones, whose columns the policy doesn't list) is refused with the ON
form written out for the statement. RIGHT and FULL joins, NATURAL joins and ``USING (c) AS j``
are left to the analysis's refusal.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.model import Policy
from dpsql.sql.sources import table_name


def using_as_on(tree: exp.Expr, policy: Policy) -> exp.Expr:
    """``tree`` (a copy where it changes) with each ``JOIN ... USING`` of an INNER or LEFT join
    written as ``ON``: ``SELECT p.sex, COUNT(patient_id) FROM visits v JOIN
    patients p USING (patient_id) GROUP BY p.sex`` is ``SELECT p.sex, COUNT(v.patient_id) FROM
    visits AS v JOIN patients AS p ON v.patient_id = p.patient_id GROUP BY p.sex``."""
    if not any(j.args.get("using") for j in tree.find_all(exp.Join)):
        return tree
    tree = tree.copy()
    for select in list(tree.find_all(exp.Select)):
        joins = select.args.get("joins") or []
        if any(j.args.get("using") for j in joins):
            _rewrite(select, policy)
    return tree


def _name(source: exp.Expr) -> str:
    return source.alias_or_name


def _ident(source: exp.Expr) -> exp.Identifier:
    """The name a FROM item's columns are qualified with, as written (quoted or not)."""
    alias = source.args.get("alias")
    got = alias.this if isinstance(alias, exp.TableAlias) else None
    if not isinstance(got, exp.Identifier) and isinstance(source, exp.Table):
        got = source.this
    if isinstance(got, exp.Identifier):
        return got.copy()
    return exp.to_identifier(_name(source))


def _columns(source: exp.Expr, policy: Policy) -> set[str] | None:
    """The columns of a FROM item the policy lists (a private table's), None when unknown."""
    if not isinstance(source, exp.Table) or isinstance(source.this, exp.Func):
        return None
    private = policy.private_table(table_name(source))
    return None if private is None else set(private.columns)


def _rewrite(select: exp.Select, policy: Policy) -> None:
    src = select.args.get("from_")
    if src is None:
        return
    earlier: list[exp.Expr] = [src.this]
    merged: dict[str, exp.Identifier] = {}  # a column an earlier USING merged -> its left side
    for join in select.args.get("joins") or []:
        using = join.args.get("using")
        side = (join.args.get("side") or "").upper()
        if not using or side not in ("", "LEFT") or join.args.get("method"):
            earlier.append(join.this)
            continue
        conds: list[exp.Expr] = []
        for ident in using:
            name = ident.name
            left = merged.get(name) or _ident(_left_side(name, earlier, join, policy))
            lcol = exp.Column(this=ident.copy(), table=left.copy())
            rcol = exp.Column(this=ident.copy(), table=_ident(join.this))
            conds.append(exp.EQ(this=lcol, expression=rcol))
            merged[name] = left
        join.set("using", None)
        join.set("on", exp.and_(*conds, copy=False) if len(conds) > 1 else conds[0])
        earlier.append(join.this)
    if merged:
        _qualify(select, merged)


def _left_side(name: str, earlier: list[exp.Expr], join: exp.Join, policy: Policy) -> exp.Expr:
    if len(earlier) == 1:
        return earlier[0]
    known = [_columns(s, policy) for s in earlier]
    having = [
        s for s, cols in zip(earlier, known, strict=True) if cols is not None and name in cols
    ]
    if len(having) == 1 and all(cols is not None for cols in known):
        return having[0]
    right = _name(join.this)
    candidates = having or [s for s, cols in zip(earlier, known, strict=True) if cols is None]
    example = " or ".join(f"ON {_name(s)}.{name} = {right}.{name}" for s in candidates) or (
        f"ON t.{name} = {right}.{name}"
    )
    raise UnsupportedSql(
        f"JOIN {right} USING ({name}) follows several tables, and dpsql can't tell which of them "
        f"has the column {name}",
        detail="PostgreSQL joins USING (c) to the one earlier table that has a column c",
        hint=f"write the join condition with ON: JOIN {join.this.sql('postgres')} {example}",
    )


def _qualify(select: exp.Select, merged: dict[str, exp.Identifier]) -> None:
    """Unqualified references to a merged column in ``select`` itself (not in its subqueries)
    read the left side's column, as PostgreSQL's merged column does."""
    outputs = {s.alias for s in select.expressions if isinstance(s, exp.Alias)}
    for col in list(select.find_all(exp.Column)):
        if col.table or col.name not in merged or not isinstance(col.this, exp.Identifier):
            continue
        if col.find_ancestor(exp.Select) is not select:
            continue  # a subquery's own scope
        if col.name in outputs and col.find_ancestor(exp.Order) is not None:
            continue  # ORDER BY names an output column first
        col.set("table", merged[col.name].copy())

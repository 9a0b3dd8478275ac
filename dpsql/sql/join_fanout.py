"""How many joined rows one private row can become: the public tables' fan-out.

Each private table of a join keeps at most R rows per unit before the join (P with ``auto`` R:
:mod:`dpsql.sql.join_cap`), so k private tables give at most R^k (P^k) joined rows per unit
(:func:`dpsql.sql.select_from.check_join_size`). Every
*public* table of the join multiplies that again: a private row matches at most ``F(s)`` rows of
public table ``s``, where

* ``F(s)`` is the largest number of rows of ``s`` sharing one value of ``s.c`` when some ON
  condition (or the WHERE clause) of the query has a conjunct ``s.c = e`` with ``e`` not
  reading ``s`` (a key join: 1 for a primary key);
* else ``F(s) = |s|`` (a cross join, or a condition dpsql can't bound);
* at least 1 for a LEFT JOINed table (an unmatched row comes back NULL-extended).

Given the private rows and the other public tables' rows, ``s`` contributes at most ``F(s)``
choices, so one unit's rows become at most ``R^k * prod F(s)`` joined rows, and
:func:`check_fanout` refuses a query where that exceeds ``MAX_JOINED_ROWS_PER_UNIT``. Without
it, one private row passing the WHERE clause, joined three times to a public table of 3,000 rows
on a shared key, made 2.7e10 rows: the query timed out (57014, an exact bit) if and only if that
row existed (``tests/redteam/test_join_fanout.py``). ``F(s)`` is read from the public table
only (:func:`fanout_sql`, again every minute), so refusing reveals nothing about private rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import StatementTooComplex
from dpsql.sql.analysis import Analysis
from dpsql.sql.join_cap import precap
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.wording import plural


@dataclass(frozen=True)
class PublicJoin:
    """A public table of a private query's join: its alias, its table, the column of a key
    equality (None: no key, the fan-out is the table's size) and whether it is LEFT JOINed."""

    alias: str
    table: str
    key: str | None
    left: bool


def _conjuncts(on: exp.Expr) -> list[exp.Expr]:
    while isinstance(on, exp.Paren):
        on = on.this
    parts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    out = []
    for c in parts:
        while isinstance(c, exp.Paren):
            c = c.this
        out.append(c)
    return out


def _key_of(alias: str, conditions: list[exp.Expr]) -> str | None:
    """A column c of ``alias`` with a conjunct ``alias.c = e``, e not reading ``alias``."""
    for c in conditions:
        if not isinstance(c, exp.EQ):
            continue
        for side, other in ((c.this, c.expression), (c.expression, c.this)):
            if (
                isinstance(side, exp.Column)
                and side.table == alias
                and not other.find(exp.Select)
                and all(x.table != alias for x in other.find_all(exp.Column))
            ):
                return str(side.name)
    return None


def public_joins(a: Analysis) -> list[PublicJoin]:
    """The public tables of ``a``'s join (none without a join)."""
    if not a.joins:
        return []
    conditions = [
        c for j in a.joins if j.args.get("on") is not None for c in _conjuncts(j.args["on"])
    ]
    if a.where is not None:  # FROM t, p WHERE p.k = t.x: PostgreSQL joins on it all the same
        conditions += _conjuncts(a.where)
    lefts = [False] + [(j.args.get("side") or "").upper() == "LEFT" for j in a.joins]
    return [
        PublicJoin(alias, table, _key_of(alias, conditions), left)
        for (alias, table, private), left in zip(a.sources, lefts, strict=True)
        if private is None
    ]


def fanout_sql(j: PublicJoin) -> str:
    """The query (over the public table only) giving ``F(s)`` before the LEFT JOIN floor."""
    table = exp.to_table(j.table)
    if j.key is None:
        q = exp.select(exp.Count(this=exp.Star())).from_(table)
    else:
        col = exp.column(j.key, quoted=True)
        per_key = exp.select(exp.alias_(exp.Count(this=exp.Star()), "n")).from_(table)
        inner = per_key.where(col.is_(exp.null()).not_()).group_by(col.copy())
        q = exp.select(
            exp.Coalesce(this=exp.Max(this=exp.column("n")), expressions=[exp.Literal.number(0)])
        ).from_(inner.subquery("_dp_keys"))
    return q.sql(POSTGRES)


MAX_JOINED_ROWS_PER_UNIT = 2**16


def check_fanout(a: Analysis, fanout: Callable[[PublicJoin], int]) -> None:
    """Refuse (54001) a join whose rows per unit can exceed ``MAX_JOINED_ROWS_PER_UNIT``.

    Args:
        a: the private query's analysis.
        fanout: ``F(s)`` of a public table of the join, from :func:`fanout_sql`'s answer.
    """
    joins = public_joins(a)
    if not joins:
        return
    k = sum(1 for _, _, p in a.sources if p is not None)
    bound = precap(a) ** k
    for j in joins:
        f = fanout(j)
        bound *= max(f, 1) if j.left else f
        if bound > MAX_JOINED_ROWS_PER_UNIT:
            rows = plural(f, "row")
            how = f"{j.key} values shared by up to {rows}" if j.key else f"{rows}, no key"
            raise StatementTooComplex(
                f"joining {j.table} ({how}) lets one person's rows become more than "
                f"{MAX_JOINED_ROWS_PER_UNIT} joined rows",
                detail="the query's run time (or a statement timeout) would reveal whether that "
                "person's rows exist",
                hint="join public tables on a key (ON t.key = p.col, a column whose values are "
                "unique in the public table), or join fewer tables",
            )

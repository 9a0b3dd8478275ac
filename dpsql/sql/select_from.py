"""The FROM clause of a private SELECT: its tables (:mod:`dpsql.sql.sources`), its checked joins
and their size, the casts that keep a column's declarations, and the refusal of a statement whose
private rows are only in a subquery. Part of :func:`dpsql.sql.analyze_select.analyze_select`."""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import (
    DpsqlError,
    PrivacyViolation,
    StatementTooComplex,
    UndefinedTable,
    UnsupportedSql,
)
from dpsql.policy.model import Policy
from dpsql.sql.analyze_aggregates import _CLAUSES_REFUSED, check_row_level
from dpsql.sql.sources import Ctx, check_join, source_of
from dpsql.sql.wording import plain_sql


def from_table(tree: exp.Select, policy: Policy) -> tuple[Ctx, list[exp.Join]]:
    """The query's tables (see dpsql.sql.sources) and its checked, qualified JOIN clauses."""
    for key, what in _CLAUSES_REFUSED.items():
        if tree.args.get(key):
            raise UnsupportedSql(
                f"{what} is not supported in private queries yet",
                hint="query one private table at a time",
            )
    w = tree.args.get("with_")
    if w:
        what = "WITH RECURSIVE" if w.args.get("recursive") else "a CTE read other than in FROM"
        raise UnsupportedSql(
            f"{what} is not supported in private queries",
            hint="read each CTE once, in FROM or a JOIN (WITH t AS (SELECT ... FROM private_table "
            "WHERE ...) SELECT COUNT(*) FROM t); or write its filter in the WHERE clause of one "
            "SELECT over the private table",
        )
    src = tree.args.get("from_")
    if src is None:
        raise UnsupportedSql(
            "a private query needs a FROM clause",
            hint="aggregate the private table in FROM, e.g. SELECT COUNT(*) FROM t",
        )
    joins = tree.args.get("joins") or []
    sources = [source_of(src.this, policy)] + [source_of(j.this, policy) for j in joins]
    if not any(s.private for s in sources):
        raise private_rows_in_subquery(tree, policy)
    ctx = Ctx(sources, policy)
    check_join_size(ctx)
    checked = []
    for j, s in zip(joins, sources[1:], strict=True):
        left_private = any(x.private for x in sources[: sources.index(s)])
        if (j.args.get("side") or "").upper() == "LEFT" and s.private and not left_private:
            raise _public_first(src.this, j)
        checked.append(check_join(ctx, j, s, check_row_level))
    return ctx, checked


def _public_first(first: exp.Expr, j: exp.Join) -> UnsupportedSql:
    """A public table LEFT JOINed to a private one (Metabase's join when a question starts from
    the dimension table: ``FROM regions LEFT JOIN purchases ON ...``): its rows no private row
    matches would be counted as rows too. The words give the statement's own tables and
    condition the other way round, which dpsql answers: grouped by the public table's column,
    each of its values is a key (one that no private row has comes back as a noisy 0)."""
    on = j.args.get("on")
    public, private = (plain_sql(t, qualified=True) for t in (first, j.this))
    instead = f"FROM {private} JOIN {public}"
    instead += f" ON {plain_sql(on, qualified=True)}" if isinstance(on, exp.Expr) else ""
    name = first.name if isinstance(first, exp.Table) else public
    rows = j.this.name if isinstance(j.this, exp.Table) else private
    return UnsupportedSql(
        f"{public} LEFT JOIN {private}: a private table can't be LEFT JOINed to a public one "
        f"(the rows of {name} no row of {rows} matches would be counted too)",
        hint=f"start from the private table with an inner join: {instead}; grouped by a "
        f"column of {name}, each of its values is answered (one no row of {rows} has as a "
        "noisy 0)",
    )


MAX_JOINED_TABLES = 6
MAX_JOINED_ROWS_PER_UNIT = 2**16


def check_join_size(ctx: Ctx) -> None:
    """Refuse joins whose size one privacy unit could blow up past the statement timeout.

    Each private table of a join keeps at most R rows per unit before the join
    (:func:`dpsql.sql.rewrite.source_rows.capped_table`), but k of them still give R^k
    joined rows per unit, and every joined table multiplies each private row by its fan-out.
    With R = 25, seven copies of a table joined on the unit turned ONE row passing the WHERE
    clause into 25^6 = 2.4e8 joined rows: the query timed out (57014, an exact bit) if and only
    if that row existed. So R^k may not exceed :data:`MAX_JOINED_ROWS_PER_UNIT` and a private
    query reads at most :data:`MAX_JOINED_TABLES` tables (a public table's fan-out remains:
    docs/timing.md).

    Raises:
        StatementTooComplex: 54001, too many tables or too many joined rows per unit.
    """
    hint = "join fewer tables, or split the query"
    if len(ctx.sources) > MAX_JOINED_TABLES:
        raise StatementTooComplex(
            f"a private query may read at most {MAX_JOINED_TABLES} tables "
            f"({len(ctx.sources)} here)",
            detail="every joined table multiplies the rows one person's data produce, so the "
            "query's run time could reveal whether that person's rows exist",
            hint=hint,
        )
    k = sum(1 for s in ctx.sources if s.private is not None)
    if k > 1 and ctx.max_rows**k > MAX_JOINED_ROWS_PER_UNIT:
        raise StatementTooComplex(
            f"joining {k} private tables lets one person's {ctx.max_rows} rows per table become "
            f"{ctx.max_rows}^{k} joined rows (at most {MAX_JOINED_ROWS_PER_UNIT} allowed)",
            detail="the query's run time (or a statement timeout) would reveal whether that "
            "person's rows exist",
            hint=hint,
        )


_KEY_PLACES = (exp.Alias, exp.Group, exp.Select, exp.EQ, exp.NEQ, exp.In, exp.Is)


def strip_identity_casts(tree: exp.Select, ctx: Ctx) -> None:
    """Drop, in place, casts of a private column to the type the policy declares for it
    (Tableau's ``CAST(category AS TEXT)`` of a text column): PostgreSQL's identity cast changes
    nothing, and the column keeps its declared keys, bounds and WHERE narrowing (was: a key
    without a domain, left to partition selection). Only this SELECT's own columns (not a
    subquery's), only a type without modifiers; ``tree`` is the analysis's own copy.

    Only where the cast stands as a key (a select item, a GROUP BY item) or as an operand of
    ``=``, ``<>``, ``IN``, ``IS``: a column the policy calls ``text`` may be an enum upstream
    (``dpsql init`` declares one so), for which ``LIKE``, ``upper()``, ``||`` and ordering
    comparisons need the text the analyst's cast gives (``department::text LIKE 'o%'`` failed
    upstream once the cast was dropped: newcomer22 #29)."""
    for n in list(tree.find_all(exp.Cast)):
        col = n.this
        if not isinstance(col, exp.Column) or n.to.expressions or n.args.get("format"):
            continue
        if not isinstance(n.parent, _KEY_PLACES):
            continue
        if n.find_ancestor(exp.Select) is not tree or isinstance(n, exp.TryCast):
            continue
        try:
            source = ctx.source(col)
            declared = ctx.column(col).type if source.private is not None else None
            same = declared is not None and exp.DataType.build(declared, dialect="postgres")
        except Exception:  # not a column of this FROM (or an unknown type): left as written
            continue
        if isinstance(same, exp.DataType) and same.this == n.to.this and not same.expressions:
            n.replace(col)


def private_rows_in_subquery(tree: exp.Select, policy: Policy) -> DpsqlError:
    """A statement over public tables whose subquery reads a private table's rows (``WHERE code
    IN (SELECT region FROM purchases ...)``): 42501, with the private table's own aggregate as
    hint (was: 42P01 'a private query must read a private table', no hint)."""
    for sub in tree.find_all(exp.Select):
        src = sub.args.get("from_")
        if sub is tree or src is None or not isinstance(src.this, exp.Table):
            continue
        private = source_of(src.this, policy).private
        if private is None or sub.args.get("joins"):
            continue
        table = src.this.name
        where = sub.args.get("where")
        cond = f" WHERE {plain_sql(where.this)}" if where is not None else ""
        cols = [c for c in sub.selects if isinstance(c, exp.Column)]
        outer = [] if where is None else [c for c in where.find_all(exp.Column)]
        correlated = any(c.name not in private.columns or c.table not in ("", table) for c in outer)
        if correlated or not cols:
            cond = "" if correlated else cond  # the outer query's columns are not the table's
            hint = f"aggregate the private table itself, e.g. SELECT COUNT(*) FROM {table}{cond}"
        else:
            col = cols[0].name
            hint = f"aggregate it instead: SELECT {col}, COUNT(*) FROM {table}{cond} GROUP BY {col}"
        return PrivacyViolation(
            f"a subquery returns raw private rows of {table}: dpsql answers with noisy aggregates "
            "only",
            hint=hint,
        )
    return UndefinedTable("a private query must read a private table")

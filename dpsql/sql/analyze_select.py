"""The SELECT-level half of the analysis: FROM (:mod:`dpsql.sql.select_from`), GROUP BY, select
list, HAVING and ORDER BY (:mod:`dpsql.sql.select_outer`), LIMIT."""

from __future__ import annotations

from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from sqlglot import exp

from dpsql.errors import (
    InvalidColumnReference,
    InvalidRowCountInLimitClause,
    InvalidRowCountInResultOffsetClause,
    NumericValueOutOfRange,
    PrivacyViolation,
    SqlSyntaxError,
    UnsupportedSql,
)
from dpsql.policy.model import Policy
from dpsql.sql import grouping_sets as gs
from dpsql.sql.analysis import Analysis, GroupKey
from dpsql.sql.analyze_aggregates import _Ctx, _refuse_identifiers, check_row_level
from dpsql.sql.apply_bounds import with_declared_total
from dpsql.sql.date_range_empty import outside_declared
from dpsql.sql.group_domain import (
    empty_domain_notice,
    group_key,
    narrow_by_where,
    no_key_left,
    no_row_left,
    uncrossed,
)
from dpsql.sql.join_cap import pre_join_rows
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.nodes import table as table_node
from dpsql.sql.refusal_text import row_list_refusal
from dpsql.sql.select_from import from_table, strip_identity_casts
from dpsql.sql.select_outer import DP_TABLE, Outer, item_name
from dpsql.sql.sources import outer_columns
from dpsql.sql.time_shift import shifted_stand_in
from dpsql.sql.wording import plain_sql
from dpsql.upstream.zone import ZONE

# LIMIT / OFFSET: a constant, a parameter (SQLAlchemy binds ``LIMIT $1::INTEGER``) or arithmetic
# and casts of them: nothing that reads a row or calls a function
_LIMIT_NODES = (
    exp.Literal, exp.Parameter, exp.Placeholder, exp.Var, exp.Null, exp.Cast, exp.DataType,
    exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg,
)  # fmt: skip


def _group_keys(tree: exp.Select, ctx: _Ctx) -> tuple[list[GroupKey], tuple[tuple[int, ...], ...]]:
    """The GROUP BY keys, and for ROLLUP/CUBE/GROUPING SETS the sets as indexes into them."""
    group = tree.args.get("group")
    if group is None:
        return [], ()
    if gs.has_grouping_sets(group):
        return _grouping_sets(tree, ctx, group)
    if not group.expressions or all(
        isinstance(g, exp.Tuple) and not g.expressions for g in group.expressions
    ):
        raise UnsupportedSql("GROUP BY () is not supported", hint="leave out the GROUP BY clause")
    return [_group_key(tree, ctx, g) for g in group.expressions], ()


def _grouping_sets(
    tree: exp.Select, ctx: _Ctx, group: exp.Group
) -> tuple[list[GroupKey], tuple[tuple[int, ...], ...]]:
    keys: list[GroupKey] = []
    index: dict[str, int] = {}
    sets: list[tuple[int, ...]] = []
    for raw in gs.expand_group(group):
        members = set()
        for g in raw:
            key = _group_key(tree, ctx, g)
            sql = key.expr.sql(POSTGRES)
            if sql not in index:
                index[sql] = len(keys)
                keys.append(key)
            members.add(index[sql])
        sets.append(tuple(sorted(members)))
    if group.args.get("all") is False:  # GROUP BY DISTINCT: duplicate sets once
        sets = gs.dedupe(sets)
    return keys, tuple(sets)


def _check_order_positions(order: exp.Order, width: int) -> None:
    """``ORDER BY 5`` with fewer output columns: PostgreSQL's 42P10, before anything runs or is
    charged (was: the position silently ignored)."""
    for o in order.expressions:
        k = o.this if isinstance(o, exp.Ordered) else o
        if isinstance(k, exp.Literal) and not k.is_string and str(k.this).isdigit():
            if not 1 <= int(k.this) <= width:
                raise InvalidColumnReference(
                    f"ORDER BY position {int(k.this)} is not in select list",
                    hint=f"positions run from 1 to {width}; or ORDER BY the column by name",
                )


def _group_key(tree: exp.Select, ctx: _Ctx, g: exp.Expr) -> GroupKey:
    """One GROUP BY expression (a select-list position or alias resolved), checked."""
    selects = tree.expressions
    aliases = {s.alias: s.this for s in selects if isinstance(s, exp.Alias)}
    expr = g
    if isinstance(g, exp.Literal) and (g.is_string or not str(g.this).isdigit()):
        raise SqlSyntaxError(  # as PostgreSQL: a constant other than a position is an error
            "non-integer constant in GROUP BY",
            hint="GROUP BY a column, an expression or a select-list position (1, 2, ...)",
        )
    if isinstance(g, exp.Literal):
        i = int(g.this)
        if not 1 <= i <= len(selects):
            raise InvalidColumnReference(
                f"GROUP BY position {i} is not in select list",
                hint=f"positions run from 1 to {len(selects)}; or GROUP BY the column by name",
            )
        s = selects[i - 1]
        expr = s.this if isinstance(s, exp.Alias) else s
    elif isinstance(g, exp.Column) and not g.table and g.name in aliases:
        if g.name not in ctx.cols:
            expr = aliases[g.name]
    while isinstance(expr, exp.Paren):  # GROUP BY (x) is GROUP BY x (a merged derived column)
        expr = expr.this
    if isinstance(expr, exp.Tuple):  # a row value (1, x) from the select list
        raise UnsupportedSql(
            f"the row value {plain_sql(expr)} is not supported as a GROUP BY key of a "
            "private query",
            hint="select and group by each of its parts instead: GROUP BY a, b",
        )
    # a bounded date moved by a constant (BI tools' weeks) is checked as the date it moves,
    # its multipliers apart: the rewrite guards it by the bounds (dpsql.sql.time_shift)
    stand_in, factors = shifted_stand_in(expr, ctx.column)
    for x in (stand_in, *factors):
        check_row_level(ctx, x, "GROUP BY")
    _refuse_identifiers(ctx, expr, "GROUP BY")
    return group_key(ctx, expr, item_name(expr))


def _constant_count(val: exp.Expr) -> Decimal | None:
    """A LIMIT/OFFSET written as a number (``-1``, ``(2.7)``) as PostgreSQL's bigint reads it
    (rounded half away from zero), None for anything else (a cast or an expression is left to
    :mod:`dpsql.execute.constant_probe`, which gets PostgreSQL's own error for it)."""
    while isinstance(val, exp.Paren):
        val = val.this
    sign = 1
    while isinstance(val, exp.Neg):
        sign, val = -sign, val.this
        while isinstance(val, exp.Paren):
            val = val.this
    if not isinstance(val, exp.Literal) or val.is_string:
        return None
    try:
        return sign * Decimal(str(val.this)).to_integral_value(rounding=ROUND_HALF_UP)
    except InvalidOperation:
        return None


def _check_count(key: str, val: exp.Expr) -> None:
    """PostgreSQL's refusal of a constant LIMIT/OFFSET it rejects before reading any row
    (negative, beyond bigint), raised here before anything is charged."""
    n = _constant_count(val)
    if n is None:
        return
    word = key.upper()
    if not -(2**63) <= n < 2**63:
        raise NumericValueOutOfRange(
            "bigint out of range",
            detail=f"in {word} (nothing was charged)",
            hint=f"{word} takes a whole number below 9223372036854775808; leave it out for all rows",
        )
    if n < 0:
        err = (
            InvalidRowCountInLimitClause if key == "limit" else InvalidRowCountInResultOffsetClause
        )
        raise err(
            f"{word} must not be negative",
            detail="PostgreSQL refuses this constant by itself, before reading any row "
            "(nothing was charged)",
            hint=f"write {word} 0 or more"
            + (", or LIMIT ALL for every row" if key == "limit" else ""),
        )


def analyze_select(tree: exp.Select, policy: Policy) -> Analysis:
    ctx, joins = from_table(tree, policy)
    strip_identity_casts(tree, ctx)
    table = ctx.table
    where = tree.args.get("where")
    where_expr = None
    if where is not None:
        check_row_level(ctx, where.this, "WHERE")
        for c in outer_columns(where.this):
            if ctx.column(c).identifier and not isinstance(c.parent, exp.Is):
                own = ctx.source(c).table.removeprefix("public.")  # the column's own table
                raise PrivacyViolation(
                    f"column {c.name} of private table {own} is an "
                    "identifier and can't be filtered on: a filter on it would single out the "
                    "rows of one person or a few",
                    hint="identifiers may only be tested with IS [NOT] NULL (SELECT COUNT(*) "
                    f"FROM {own} WHERE {c.name} IS NOT NULL) or counted "
                    f"(COUNT(DISTINCT {c.name})); filter on other columns",
                )
        where_expr = ctx.qualify(where.this)
    ctx.where = where_expr
    keys, sets = _group_keys(tree, ctx)
    narrowed = uncrossed(
        keys, [narrow_by_where(k, where_expr, ctx.column, ZONE.get()) for k in keys]
    )
    no_keys = None
    if not sets:  # (a grouping set without the key still has its rows)
        for before, after in zip(keys, narrowed, strict=True):
            no_keys = no_keys or no_key_left(before, after, where_expr)
    if not keys and not sets:  # without GROUP BY: a WHERE no row can pass (free, a notice)
        no_keys = no_row_left(ctx, where_expr) or outside_declared(ctx, where_expr, ZONE.get())
    elif (
        not sets
        and empty_domain_notice(tuple(narrowed), no_keys) is None  # (said already, as before)
        and (beyond := outside_declared(ctx, where_expr, ZONE.get(), True))
    ):
        # GROUP BY over a date range that misses the declared one: no group (as PostgreSQL)
        no_keys = no_keys or beyond
        narrowed = [replace(k, keys=(), null_key=False, constant=False) for k in narrowed]
    keys = narrowed
    outer = Outer(ctx, keys, sets)
    selects: list[exp.Expr] = []
    if not keys and not sets and not joins and ctx.private is not None:
        rows = row_list_refusal(
            ctx.table, ctx.private, list(tree.expressions), where.this if where else None
        )
        if rows is not None:
            raise rows
    for s in tree.expressions:
        name = item_name(s)
        body = s.this if isinstance(s, exp.Alias) else s
        # a constant grouping key is NULL where a set rolls it up, as in PostgreSQL
        ref = outer.constant_key_ref(body)
        out = ref if ref is not None else outer.rewrite(body, "the select list")
        selects.append(exp.alias_(out, name, quoted=True))
    if not outer.stats and not keys:
        raise PrivacyViolation(
            f"this query would return raw rows of private table {table}",
            hint="ask for aggregates, e.g. SELECT COUNT(*), AVG(col) FROM ... GROUP BY ...",
        )
    q = exp.select(*selects).from_(table_node(DP_TABLE), copy=False)  # q is new: no copy
    if tree.args.get("distinct"):
        if tree.args["distinct"].args.get("on"):
            raise UnsupportedSql("DISTINCT ON is not supported")
        q = q.distinct()
    having = tree.args.get("having")
    if having is not None:
        q = q.where(outer.rewrite(having.this, "HAVING"))
    order = tree.args.get("order")
    if order is not None:
        _check_order_positions(order, len(tree.expressions))
        names = frozenset(s.alias for s in selects if isinstance(s, exp.Alias))
        q.set("order", outer.rewrite(order, "ORDER BY", names))
    for key in ("limit", "offset"):
        node = tree.args.get(key)
        if node is not None:
            if isinstance(node, exp.Fetch):  # what fetch_as_limit leaves: not a LIMIT
                raise UnsupportedSql(
                    "FETCH FIRST ... WITH TIES / PERCENT is not supported in private queries",
                    hint="write FETCH FIRST n ROWS ONLY, or LIMIT n",
                )
            val = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
            if not all(isinstance(n, _LIMIT_NODES) for n in val.walk()):
                raise UnsupportedSql(
                    f"{key.upper()} must be a constant", hint=f"e.g. {key.upper()} 10"
                )
            _check_count(key, val)
            q.set(key, node.copy())
    return with_declared_total(
        Analysis(
            table=table,
            alias=ctx.alias,
            private=ctx.private,
            sources=tuple((x.alias, x.table, x.private) for x in ctx.sources) if joins else (),
            joins=tuple(joins),
            pre_join_rows=pre_join_rows(
                [x.private for x in ctx.sources if x.private is not None],
                public=any(x.private is None for x in ctx.sources),
            ),
            where=where_expr,
            group_keys=tuple(keys),
            measures=tuple(outer.measures.values()),
            statistics=tuple(outer.stats),
            outer=q,
            grouped=bool(keys),
            grouping_sets=sets,
            no_keys=no_keys,
        )
    )

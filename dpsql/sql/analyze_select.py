"""The SELECT-level half of the analysis: FROM, GROUP BY, select list, HAVING, ORDER BY, LIMIT."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from sqlglot import exp

from dpsql.errors import (
    DpsqlError,
    GroupingError,
    InvalidColumnReference,
    InvalidRowCountInLimitClause,
    InvalidRowCountInResultOffsetClause,
    NumericValueOutOfRange,
    PrivacyViolation,
    SqlSyntaxError,
    StatementTooComplex,
    UndefinedTable,
    UnsupportedSql,
)
from dpsql.policy.model import Policy
from dpsql.sql import functions as fn
from dpsql.sql import grouping_sets as gs
from dpsql.sql.analysis import Analysis, GroupKey, Measure, Statistic
from dpsql.sql.analyze_aggregates import (
    _CLAUSES_REFUSED,
    _Ctx,
    _refuse_identifiers,
    check_row_level,
    statistic_for,
)
from dpsql.sql.group_domain import group_key, narrow_by_where, no_key_left, uncrossed
from dpsql.sql.join_cap import pre_join_rows
from dpsql.sql.names import SPELLED, describe, function_name
from dpsql.sql.nodes import table as table_node
from dpsql.sql.post_guards import check_constant_divisors, guard
from dpsql.sql.refusal_text import (
    raw_column,
    row_list_refusal,
    star_refusal,
    window_over_rows,
)
from dpsql.sql.sources import Ctx, check_join, outer_columns, source_of
from dpsql.sql.wording import plain_sql
from dpsql.upstream.zone import ZONE

DP_TABLE = "_dp"


# LIMIT / OFFSET: a constant, a parameter (SQLAlchemy binds ``LIMIT $1::INTEGER``) or arithmetic
# and casts of them: nothing that reads a row or calls a function
_LIMIT_NODES = (
    exp.Literal, exp.Parameter, exp.Placeholder, exp.Var, exp.Null, exp.Cast, exp.DataType,
    exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg,
)  # fmt: skip


def _from_table(tree: exp.Select, policy: Policy) -> tuple[Ctx, list[exp.Join]]:
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
        raise _private_rows_in_subquery(tree, policy)
    ctx = Ctx(sources, policy)
    check_join_size(ctx)
    checked = []
    for j, s in zip(joins, sources[1:], strict=True):
        left_private = any(x.private for x in sources[: sources.index(s)])
        if (j.args.get("side") or "").upper() == "LEFT" and s.private and not left_private:
            raise UnsupportedSql(
                "a private table can't be LEFT JOINed to public tables",
                hint="put the private table first, or use an INNER JOIN",
            )
        checked.append(check_join(ctx, j, s, check_row_level))
    return ctx, checked


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


def _output_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Alias):
        return node.alias
    inner = node
    while isinstance(inner, (exp.Cast, exp.Paren)):
        inner = inner.this
    if isinstance(inner, exp.Column):
        return inner.name
    if isinstance(inner, exp.Round) and isinstance(inner.this, exp.Cast):
        inner = inner.this.this
    from dpsql.sql.analyze_quantiles import is_selection_aggregate, output_name

    spelled = inner.meta.get(SPELLED)  # variance(x) is "variance", as PostgreSQL names it
    if isinstance(spelled, str) and (fn.aggregate_name(inner) or isinstance(inner, exp.Median)):
        return spelled.lower()
    if is_selection_aggregate(inner):
        return output_name(inner)
    name = fn.aggregate_name(inner)
    if name:
        return "stddev" if isinstance(inner, exp.Stddev) else name
    if isinstance(inner, exp.Func):
        return function_name(inner)
    return "?column?"


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
            sql = key.expr.sql("postgres")
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
    check_row_level(ctx, expr, "GROUP BY")
    _refuse_identifiers(ctx, expr, "GROUP BY")
    return group_key(ctx, expr, _output_name(expr))


class _Outer:
    """Rewrites select/HAVING/ORDER BY expressions over _dp(_dp_g*, _dp_s*)."""

    def __init__(
        self, ctx: _Ctx, keys: list[GroupKey], sets: tuple[tuple[int, ...], ...] = ()
    ) -> None:
        self.ctx = ctx
        self.keys = keys
        self.sets = sets
        self.key_sql = {k.expr.sql("postgres"): i for i, k in enumerate(keys)}
        self.stats: list[Statistic] = []
        self.measures: dict[str, Measure] = {}

    def stat_column(self, node: exp.Expr) -> exp.Column:
        stat, ms = statistic_for(self.ctx, node)
        for m in ms:
            self.measures.setdefault(m.key, m)
        for i, s in enumerate(self.stats):
            if s.func == stat.func and s.measures == stat.measures:
                return exp.column(f"_dp_s{i}", table=DP_TABLE)
        self.stats.append(stat)
        return exp.column(f"_dp_s{len(self.stats) - 1}", table=DP_TABLE)

    def rewrite(
        self, node: exp.Expr, where: str, aliases: frozenset[str] = frozenset()
    ) -> exp.Expr:
        def fix(n: exp.Expr) -> exp.Expr:
            if isinstance(n, exp.Column) and not n.table and n.name in aliases:
                return exp.column(n.name, quoted=True)
            if isinstance(n, exp.Window):
                raise window_over_rows()
            if isinstance(n, exp.Star):
                raise star_refusal(self.ctx.table, self.ctx.private)
            if isinstance(n, exp.Grouping):
                return self.grouping(n)
            if fn.is_aggregate(n):
                return self.stat_column(n)
            if not isinstance(n, (exp.Column, exp.Literal)) and n.find(exp.Column):
                q = self._key_ref(n)
                if q is not None:
                    return q
            if isinstance(n, exp.Column):
                q = self._key_ref(n)
                if q is not None:
                    return q
                if n.table == DP_TABLE:
                    return n
                col = self.ctx.column(n)
                src = self.ctx.source(n)
                table = src.table.removeprefix("public.")
                grouped = bool(self.keys or self.sets)
                raise raw_column(n.name, table, col, src.private is not None, where, grouped)
            if isinstance(n, (exp.Select, exp.Subquery)):
                raise UnsupportedSql(
                    f"subqueries are not supported in {where} yet",
                    hint="run the subquery as its own query",
                )
            return n

        check_constant_divisors(node)  # certain to fail: refused before any charge
        out = node.copy().transform(fix, copy=False)
        for n in out.walk():
            if not isinstance(n, (*fn.POST_NODES, exp.Alias, exp.Ordered, exp.Order)):
                raise UnsupportedSql(
                    f"{describe(n)} is not supported in {where} of a private query",
                    hint="use aggregates, arithmetic, ROUND, CASE, COALESCE and casts",
                )
        return guard(out)  # the rest gives NULL, never an error after the charge

    def grouping(self, n: exp.Grouping) -> exp.Expr:
        """GROUPING(args): a constant per grouping set, read from the row's set number."""
        if not self.keys and not self.sets:
            raise GroupingError(
                "GROUPING is only allowed in a query with GROUP BY",
                hint="GROUP BY ROLLUP (a, b) and select GROUPING(a, b)",
            )
        args = []
        for arg in n.expressions:
            ref = self._key_ref(arg)
            if ref is None:
                raise GroupingError(
                    f"the argument {plain_sql(arg)} of GROUPING is not a GROUP BY expression",
                    hint="pass GROUPING the columns or expressions grouped by",
                )
            args.append(int(ref.name[len("_dp_g") :]))
        sets = self.sets or (tuple(range(len(self.keys))),)
        set_column = exp.column(f"_dp_g{len(self.keys)}", table=DP_TABLE)
        return gs.grouping_expr(args, sets, set_column)

    def constant_key_ref(self, n: exp.Expr) -> exp.Column | None:
        """The key column of a select item that is a constant grouping key, under grouping sets
        (``SELECT 'x' AS k ... GROUP BY ROLLUP (1)``: NULL on the rows that roll ``k`` up)."""
        if not self.sets or n.find(exp.Column, exp.AggFunc, exp.Select):
            return None
        return self._key_ref(n)

    def _key_ref(self, n: exp.Expr) -> exp.Column | None:
        try:
            sql = self.ctx.qualify(n).sql("postgres")
        except Exception:
            return None
        i = self.key_sql.get(sql)
        return exp.column(f"_dp_g{i}", table=DP_TABLE) if i is not None else None


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


_KEY_PLACES = (exp.Alias, exp.Group, exp.Select, exp.EQ, exp.NEQ, exp.In, exp.Is)


def _strip_identity_casts(tree: exp.Select, ctx: Ctx) -> None:
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


def analyze_select(tree: exp.Select, policy: Policy) -> Analysis:
    ctx, joins = _from_table(tree, policy)
    _strip_identity_casts(tree, ctx)
    table = ctx.table
    where = tree.args.get("where")
    where_expr = None
    if where is not None:
        check_row_level(ctx, where.this, "WHERE")
        for c in outer_columns(where.this):
            if ctx.column(c).identifier and not isinstance(c.parent, exp.Is):
                raise PrivacyViolation(
                    f"column {c.name} of private table {table.removeprefix('public.')} is an "
                    "identifier and can't be filtered on: a filter on it would single out the "
                    "rows of one person or a few",
                    hint="identifiers may only be tested with IS [NOT] NULL (SELECT COUNT(*) "
                    f"FROM {table.removeprefix('public.')} WHERE {c.name} IS NOT NULL) or counted "
                    f"(COUNT(DISTINCT {c.name})); filter on other columns",
                )
        where_expr = ctx.qualify(where.this)
    keys, sets = _group_keys(tree, ctx)
    narrowed = uncrossed(
        keys, [narrow_by_where(k, where_expr, ctx.column, ZONE.get()) for k in keys]
    )
    no_keys = None
    if not sets:  # (a grouping set without the key still has its rows)
        for before, after in zip(keys, narrowed, strict=True):
            no_keys = no_keys or no_key_left(before, after, where_expr)
    keys = narrowed
    outer = _Outer(ctx, keys, sets)
    selects: list[exp.Expr] = []
    if not keys and not sets and not joins and ctx.private is not None:
        rows = row_list_refusal(
            ctx.table, ctx.private, list(tree.expressions), where.this if where else None
        )
        if rows is not None:
            raise rows
    for s in tree.expressions:
        name = _output_name(s)
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
    return Analysis(
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


def _private_rows_in_subquery(tree: exp.Select, policy: Policy) -> DpsqlError:
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

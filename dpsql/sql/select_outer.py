"""The outer query of a private SELECT: its select list, HAVING and ORDER BY rewritten over the
released groups ``_dp(_dp_g*, _dp_s*)`` (keys and noisy statistics), and the names of its output
columns as PostgreSQL gives them. Part of :func:`dpsql.sql.analyze_select.analyze_select`."""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import GroupingError, UnsupportedSql
from dpsql.sql import functions as fn
from dpsql.sql import grouping_sets as gs
from dpsql.sql.analysis import GroupKey, Measure, Statistic
from dpsql.sql.analyze_aggregates import _Ctx, statistic_for
from dpsql.sql.names import SPELLED, describe, function_name
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.post_guards import check_constant_divisors, guard
from dpsql.sql.refusal_text import raw_column, star_refusal, window_over_rows
from dpsql.sql.withheld import hold_withheld
from dpsql.sql.wording import plain_sql

DP_TABLE = "_dp"


def item_name(node: exp.Expr) -> str:
    """The name PostgreSQL gives the output column of select item ``node``."""
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


class Outer:
    """Rewrites select/HAVING/ORDER BY expressions over _dp(_dp_g*, _dp_s*)."""

    def __init__(
        self, ctx: _Ctx, keys: list[GroupKey], sets: tuple[tuple[int, ...], ...] = ()
    ) -> None:
        self.ctx = ctx
        self.keys = keys
        self.sets = sets
        self.key_sql = {k.expr.sql(POSTGRES): i for i, k in enumerate(keys)}
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
        # the rest gives NULL, never an error after the charge; and what reads a withheld
        # (NULL) statistic is withheld, never a default in its place (dpsql.sql.withheld)
        return hold_withheld(guard(out))

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
            sql = self.ctx.qualify(n).sql(POSTGRES)
        except Exception:
            return None
        i = self.key_sql.get(sql)
        return exp.column(f"_dp_g{i}", table=DP_TABLE) if i is not None else None

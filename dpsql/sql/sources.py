"""The tables a private query reads (FROM and JOINs) and how its column references resolve.

Joins a private query may use, and why each keeps the sensitivity argument of
:mod:`dpsql.sql.plan` (removing one privacy unit moves each measure by at most G·R·c):

* a private table joined (INNER, LEFT or CROSS) with **public** tables: the public tables are the
  same in neighbouring databases, and every joined row carries the privacy unit of the private row
  it came from. Contribution bounding runs *after* the join, on joined rows, so whatever the join's
  multiplicity a unit keeps at most R rows in each of at most G groups;
* two private tables joined on **equality of their privacy units** (``users u JOIN purchases p ON
  u.user_id = p.user_id``): a joined row pairs rows of one unit value only, so removing one unit
  removes only joined rows with that unit value, and bounding after the join caps them. R and G
  are the smallest of the joined tables' bounds.

Refused: private tables without a privacy unit column (``privacy_unit: row``) in a join (nothing
to bound joined rows by), RIGHT/FULL joins (unmatched public rows would appear or vanish with a
unit), NATURAL joins (``USING`` of an INNER or LEFT join arrives here as its ``ON`` join:
:mod:`dpsql.sql.join_using`), and private-private joins on anything but the units: there, one
person's rows could multiply another person's contribution without bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import (
    AmbiguousColumn,
    PrivacyViolation,
    UndefinedColumn,
    UndefinedTable,
    UnsupportedSql,
)
from dpsql.policy.model import Policy, qualify_name
from dpsql.policy.tables import Column, PrivateTable
from dpsql.sql.wording import plain_sql, spelled_sql

PUBLIC_COLUMN = Column(type="text")  # a column of a public table: no bounds, not an identifier


@dataclass(frozen=True)
class Source:
    """One table in FROM/JOIN: its alias, qualified name and policy (None for public tables)."""

    alias: str
    table: str
    private: PrivateTable | None


def table_name(t: exp.Table) -> str:
    db = t.db or "public"
    return qualify_name(f"{db}.{t.name}")


def source_of(t: exp.Expr, policy: Policy) -> Source:
    if isinstance(t, exp.Subquery) and isinstance(t.this, exp.Select):
        raise _unmerged(t, policy)
    if (
        not isinstance(t, exp.Table)
        or t.args.get("sample")
        or t.args.get("rows_from")  # ROWS FROM (f(...), ...): no name of its own
        or isinstance(t.this, exp.Func)
    ):
        raise UnsupportedSql(
            "only plain tables (and subqueries that filter them) are supported in FROM of a "
            "private query",
            hint="query the private table directly: SELECT COUNT(*) FROM t WHERE ...",
        )
    name = table_name(t)
    private = policy.private_table(name)
    if private is None and not policy.is_public(name):
        raise UndefinedTable(f'relation "{t.name}" does not exist')
    return Source(t.alias_or_name, name, private)


def _unmerged(t: exp.Subquery, policy: Policy) -> UnsupportedSql:
    """A derived table (or CTE) left in a private query's FROM by :mod:`dpsql.sql.flatten`."""
    alias, inner = t.alias_or_name, t.this
    src = inner.args.get("from_")
    table = plain_sql(src.this) if src is not None and isinstance(src.this, exp.Table) else ""
    where = inner.args.get("where")
    inner_joins = inner.args.get("joins") or []
    joins = " ".join(plain_sql(j, qualified=True) for j in inner_joins)
    cond = plain_sql(where.this, qualified=bool(inner_joins)) if where else ""
    example = (  # the subquery's own FROM (its aliases: its columns are named by them)
        f"FROM {table}{'' if src.this.alias else ' AS ' + alias} {joins or 'JOIN ... ON ...'}"
        f"{' WHERE ' + cond if cond else ''}"
        if table
        else "FROM the_table AS t JOIN ... ON ... WHERE ..."
    )
    distinct = inner.args.get("distinct")
    outer = t.parent.parent if t.parent is not None else None
    if (
        distinct is not None
        and not distinct.args.get("on")
        and not any(inner.args.get(k) for k in ("group", "having", "limit", "offset"))
        and len(inner.expressions) == 1
        and isinstance(outer, exp.Select)
        and not outer.args.get("joins")
        and table
    ):  # SELECT COUNT(*) FROM (SELECT DISTINCT category FROM purchases) x: a distinct count
        col = inner.expressions[0]
        col = col.this if isinstance(col, exp.Alias) else col
        return UnsupportedSql(
            f"the subquery or CTE {alias} lists the DISTINCT values of {plain_sql(col)} in "
            "private rows: dpsql does not read such a list as a table",
            hint=f"count them directly: SELECT COUNT(DISTINCT {plain_sql(col)}) FROM {table}"
            + (f" WHERE {plain_sql(where.this)}" if where else ""),
        )
    if (
        distinct is not None
        and not distinct.args.get("on")
        and not any(inner.args.get(k) for k in ("group", "having", "limit", "offset"))
        and isinstance(outer, exp.Select)
        and not outer.args.get("joins")
        and table
        and not inner_joins  # the hint reads one table: a join's words are the generic ones
        and all(isinstance(e, exp.Column) for e in inner.expressions)
        and len({e.name for e in inner.expressions}) == len(inner.expressions) > 1
    ):  # SELECT COUNT(*) FROM (SELECT DISTINCT user_id, category FROM purchases) x
        return _distinct_combinations(inner, alias, table, where, policy)
    if any(inner.args.get(k) for k in ("group", "having", "distinct", "limit", "offset")):
        joined = isinstance(outer, exp.Select) and bool(outer.args.get("joins"))
        return UnsupportedSql(
            f"the subquery or CTE {alias} can't be {'joined' if joined else 'read'} here: it "
            "has GROUP BY, DISTINCT or "
            "LIMIT, so its rows are not rows of the private table, and it is not an aggregate "
            "dpsql answers on its own",
            hint="aggregate inside it (SELECT key, COUNT(*) ... GROUP BY key: an aggregated CTE "
            "can be joined to public tables), or drop DISTINCT/LIMIT and join the table itself",
        )
    return UnsupportedSql(
        f"the subquery or CTE {alias} can't be merged into this private query: dpsql reads one "
        "only as a view of a single table's rows (it filters and computes columns, without "
        "GROUP BY, DISTINCT, LIMIT or windows), in FROM or an inner JOIN (not on the side of "
        "an outer JOIN that keeps unmatched rows, nor joined NATURAL), or as a view of a join's "
        "rows when it is alone in FROM",
        hint=f"join the {'tables themselves' if inner_joins else 'table itself'} and move the "
        f"subquery's filter into WHERE: {example}; or aggregate inside the subquery (an "
        "aggregated CTE can be joined to public tables)",
    )


def _distinct_combinations(
    inner: exp.Select, alias: str, table: str, where: exp.Expr | None, policy: Policy
) -> UnsupportedSql:
    """``SELECT COUNT(*) FROM (SELECT DISTINCT a, b FROM t) x``: the distinct combinations of
    several columns, counted as the rows of a grouping (or, with the privacy unit among them,
    as the distinct units per combination of the others; newcomer31: it said 'x can't be joined
    here' with no join written)."""
    cols = [e.name for e in inner.expressions]
    src = inner.args["from_"].this
    private = policy.private_table(table_name(src)) if isinstance(src, exp.Table) else None
    unit = private.privacy_unit if private is not None and not private.row_privacy else None
    cond = f" WHERE {plain_sql(where.this)}" if where else ""
    others = ", ".join(c for c in cols if c != unit)
    if unit in cols and others:
        instead = (
            f"count the {unit} values of each combination of the others: SELECT {others}, "
            f"COUNT(DISTINCT {unit}) FROM {table}{cond} GROUP BY {others} (the combinations "
            "are their sum)"
        )
    else:
        instead = (
            f"group by them: SELECT {others}, COUNT(*) FROM {table}{cond} GROUP BY {others} "
            "(a row per combination shown)"
        )
    return UnsupportedSql(
        f"the subquery or CTE {alias} lists the DISTINCT combinations of {', '.join(cols)} in "
        "private rows: dpsql does not read such a list as a table",
        hint=instead,
    )


def _no_entry(node: exp.Column) -> Exception:
    """``t.c`` of no table of this query: PostgreSQL's 42P01 (a correlated private subquery is
    refused before, with its own words: :func:`refuse_correlated`)."""
    return UndefinedTable(f'missing FROM-clause entry for table "{node.table}"')


def refuse_correlated(s: exp.Select, policy: Policy) -> None:
    """Refuse a private block ``s`` that reads a column of a query around it (``SELECT r.code,
    (SELECT COUNT(*) FROM purchases p WHERE p.region = r.code) FROM regions r``, or such a
    subquery inside a LATERAL function's arguments): dpsql computes each private aggregate once
    for the statement, never once per outer row (its leaf would name a table it does not read:
    was 42703 'missing FROM-clause entry').

    Raises:
        UnsupportedSql: 0A000, with the grouped join to write instead.
    """
    own = {t.alias_or_name for t in s.find_all(exp.Table)}
    own |= {q.alias for q in s.find_all(exp.Subquery) if q.alias}
    around: set[str] = set()
    outer = s.find_ancestor(exp.Select)
    while outer is not None:
        refs = [outer.args.get("from_"), *(outer.args.get("joins") or [])]
        around |= {  # (a private outer query's correlation has its own words: analyze)
            r.this.alias_or_name
            for r in refs
            if r is not None
            and not (isinstance(r.this, exp.Table) and policy.private_table(table_name(r.this)))
        }
        outer = outer.find_ancestor(exp.Select)
    for c in s.find_all(exp.Column):
        if c.table and c.table not in own and c.table in around:
            raise UnsupportedSql(
                f"the subquery {spelled_sql(s)} reads {c.table}.{c.name} of the query around it "
                "(a correlated subquery): dpsql computes a private aggregate once for the "
                "statement, not once for each of the outer query's rows",
                hint="group the private table by that column and join the result, e.g. SELECT "
                "r.code, c.n FROM regions r LEFT JOIN (SELECT region, COUNT(*) AS n FROM "
                "purchases GROUP BY region) c ON c.region = r.code",
            )


class Ctx:
    """Resolves and qualifies the column references of a (possibly joined) private query."""

    def __init__(self, sources: list[Source], policy: Policy | None = None) -> None:
        self.sources = sources
        self.policy = policy  # lets IN/EXISTS subqueries resolve public tables
        primary = next(s for s in sources if s.private is not None)
        assert primary.private is not None
        self.table = primary.table
        self.alias = primary.alias
        self.private: PrivateTable = primary.private
        self.cols = primary.private.columns
        # the statement's (qualified) WHERE clause, where its analysis sets it: a quantile's
        # grid spans the range it puts on the argument (dpsql.sql.quantile_range)
        self.where: exp.Expr | None = None
        aliases = [s.alias for s in sources]
        if len(set(aliases)) != len(aliases):
            raise UnsupportedSql(
                "table name specified more than once", hint="give each joined table an alias"
            )

    def source(self, node: exp.Column) -> Source:
        if node.table:
            for s in self.sources:
                if node.table in (s.alias, s.table.split(".")[1]):
                    return s
            raise _no_entry(node)
        owners = [s for s in self.sources if s.private and node.name in s.private.columns]
        public = [s for s in self.sources if s.private is None]
        if len(owners) == 1:
            return owners[0]
        if len(owners) > 1 or (not owners and len(public) > 1):
            raise AmbiguousColumn(
                f'column reference "{node.name}" is ambiguous',
                hint="qualify it with its table's alias",
            )
        if public:
            return public[0]
        raise UndefinedColumn(
            f'column "{node.name}" does not exist in {self.table}',
            hint=f"columns: {', '.join(sorted(self.cols))}",
        )

    def column_name(self, node: exp.Column) -> str:
        """``schema.table.column`` of a reference, named by the table it belongs to (a joined
        table's, public or private, not the statement's first private table)."""
        return f"{self.source(node).table}.{node.name}"

    def public_refusal(self, node: exp.Column, what: str, answer: str) -> PrivacyViolation | None:
        """The refusal of ``what`` over a joined public table's column (None for a private
        table's): the policy bounds no public column, so the words name its own table and what
        does answer: the private rows counted per value of it (``answer``: what those counts
        give)."""
        s = self.source(node)
        if s.private is not None:
            return None
        ref = f"{s.alias}.{node.name}" if node.table else node.name
        return PrivacyViolation(
            f"{node.name} is a column of the public table {s.table}: the policy declares no "
            f"bounds or keys for a public table's columns, so {what} over it, once for each "
            "joined private row, could reveal a private value",
            hint=f"count the private rows per value of it instead: SELECT {ref}, COUNT(*) ... "
            f"GROUP BY {ref} ({answer}); or aggregate a column of the private table",
        )

    def column(self, node: exp.Column) -> Column:
        s = self.source(node)
        if s.private is None:
            return PUBLIC_COLUMN
        col = s.private.columns.get(node.name)
        if col is None:
            raise UndefinedColumn(
                f'column "{node.name}" does not exist in {s.table}',
                hint=f"columns: {', '.join(sorted(s.private.columns))}",
            )
        return col

    def qualify(self, node: exp.Expr) -> exp.Expr:
        """Copy of a row-level expression with every column checked and qualified by alias."""

        def fix(n: exp.Expr) -> exp.Expr:
            if isinstance(n, (exp.Subquery, exp.Select)):
                return n.copy()  # a checked public subquery: its columns are its own
            if isinstance(n, exp.Column):
                self.column(n)
                return exp.column(n.name, table=self.source(n).alias, quoted=True)
            return n

        return node.copy().transform(fix, copy=False)

    @property
    def max_rows(self) -> int:
        return min(s.private.rows_bound for s in self.sources if s.private)

    @property
    def max_groups(self) -> int:
        return min(s.private.groups_bound for s in self.sources if s.private)


def outer_columns(node: exp.Expr) -> list[exp.Column]:
    """Column references of ``node`` outside any subquery."""
    out: list[exp.Column] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (exp.Subquery, exp.Select)) and n is not node:
            continue
        if isinstance(n, exp.Column):
            out.append(n)
        stack.extend(n.iter_expressions())
    return out


def _unit_equalities(ctx: Ctx, on: exp.Expr, joined: Source) -> set[int]:
    """ids of the conjuncts of ``on`` equating the joined table's unit with an earlier table's."""
    out: set[int] = set()
    for c in on.flatten() if isinstance(on, exp.And) else [on]:
        if isinstance(c, exp.Paren):
            c = c.this
        if isinstance(c, exp.EQ) and all(isinstance(x, exp.Column) for x in (c.this, c.expression)):
            a, b = ctx.source(c.this), ctx.source(c.expression)
            if (
                a is not b
                and joined in (a, b)
                and a.private is not None
                and b.private is not None
                and c.this.name == a.private.privacy_unit
                and c.expression.name == b.private.privacy_unit
            ):
                out.add(id(c))
    return out


def check_join(
    ctx: Ctx, join: exp.Join, joined: Source, check_row_level: Callable[[Ctx, exp.Expr, str], None]
) -> exp.Join:
    """Validate one JOIN; return it with its ON condition qualified."""
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if join.args.get("using") or join.args.get("method") or side in ("RIGHT", "FULL"):
        raise UnsupportedSql(
            "only INNER, LEFT and CROSS joins with an ON condition are supported in private "
            "queries",
            hint="write JOIN t ON a.x = t.y or JOIN t USING (x) (RIGHT/FULL/NATURAL are not "
            "supported)",
        )
    if kind not in ("", "INNER", "CROSS", "OUTER"):
        raise UnsupportedSql(f"{kind} JOIN is not supported in private queries")
    privates = [s for s in ctx.sources if s.private is not None]
    if any(s.private.row_privacy for s in privates):  # type: ignore[union-attr]
        raise UnsupportedSql(
            "joins are not supported for tables with `privacy_unit: row`",
            hint="joined rows could not be bounded per person; query the table alone",
        )
    on = join.args.get("on")
    units = _unit_equalities(ctx, on, joined) if on is not None else set()
    earlier = ctx.sources[: ctx.sources.index(joined)]
    if joined.private is not None and any(s.private for s in earlier) and not units:
        raise PrivacyViolation(
            f"private tables can only be joined on their privacy units: {joined.table} must be "
            f"joined ON {ctx.alias}.{ctx.private.privacy_unit} = "
            f"{joined.alias}.{joined.private.privacy_unit}",
            hint="other joins of private tables could let one person's rows multiply another "
            "person's contribution without bound",
        )
    out = join.copy()
    if on is not None:
        check_row_level(ctx, on, "JOIN ... ON")
        for c in on.find_all(exp.Column):
            eq = c.parent
            if ctx.column(c).identifier and id(eq) not in units:
                raise PrivacyViolation(
                    f"column {c.name} is an identifier and can only be used in a join as "
                    "a.unit = b.unit between private tables",
                    hint="join public tables on non-identifier columns",
                )
        out.set("on", ctx.qualify(on))
    t = out.this
    out.set("this", exp.to_table(joined.table).as_(joined.alias, quoted=True))
    del t
    return out

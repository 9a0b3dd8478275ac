"""IN / EXISTS subqueries over public tables inside a private query's row-level expressions.

``region IN (SELECT r.code FROM regions r WHERE r.name LIKE 'N%')`` filters private rows by a set
that only depends on public data, the same in neighbouring databases: it is a row-level predicate
like ``region IN ('N', 'S')`` and leaves the sensitivity argument unchanged.

Accepted shape (everything else is refused): ``SELECT <alias>.<column> FROM <public table> <alias>
[WHERE <row-level predicate>]`` (for EXISTS the select list may be a constant), with

* every column qualified by the subquery's own alias, different from the outer query's aliases,
  so PostgreSQL can't resolve a name to the outer (private) row; the one exception, the usual
  correlated semi-join ``EXISTS (SELECT 1 FROM regions r WHERE r.code = p.region AND ...)``: a
  top-level conjunct of the WHERE clause ``<subquery column> = <outer expression>`` (either
  side), whose outer expression is qualified by an outer alias and checked like any row-level
  expression of the outer query. It still depends on one private row and public data only (the
  same as ``p.region IN (SELECT r.code FROM regions r WHERE ...)``), and an equality can't fail;
* the WHERE clause checked like any row-level expression, with the public table's columns typed
  as opaque values (no arithmetic or casts on them), so it can't fail at run time. A failing
  subquery would otherwise be a data-gated error: it runs only when some private row needs it.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.errors import PrivacyViolation, UndefinedColumn, UnsupportedSql
from dpsql.policy.model import Policy
from dpsql.sql.sources import Ctx, Source, source_of

_HINT = (
    "write col IN (SELECT t.c FROM public_table t WHERE ...) with every column qualified by the "
    "subquery's alias"
)


def subquery_of(n: exp.Expr) -> exp.Expr | None:
    """The query of an IN-subquery or EXISTS node (None for anything else)."""
    if isinstance(n, exp.In) and n.args.get("query") is not None:
        q: exp.Expr = n.args["query"]
        body: exp.Expr = q.this if isinstance(q, exp.Subquery) else q
        return body  # not a SELECT: check_public_subquery refuses it
    if isinstance(n, exp.Exists):
        return n.this if isinstance(n.this, exp.Select) else None
    return None


def check_public_subquery(
    q: exp.Expr,
    outer: Ctx,
    policy: Policy,
    exists: bool,
    check_row_level: Callable[[Ctx, exp.Expr, str], None],
) -> None:
    """Refuse anything but an uncorrelated, total subquery over one public table."""
    if not isinstance(q, exp.Select):
        raise UnsupportedSql("only SELECT subqueries are supported here", hint=_HINT)
    extra = [
        k
        for k in (
            "joins",
            "with_",
            "group",
            "having",
            "limit",
            "offset",
            "order",
            "windows",
            "laterals",
            "distinct",
        )
        if q.args.get(k)
    ]
    if extra:
        raise UnsupportedSql(f"{extra[0].upper()} is not supported in a subquery", hint=_HINT)
    src = q.args.get("from_")
    if src is None:
        raise UnsupportedSql("a subquery needs a FROM clause", hint=_HINT)
    s = source_of(src.this, policy)
    if s.private is not None:
        name = s.table.removeprefix("public.")
        raise UnsupportedSql(
            f"a subquery in a filter may read public tables only, not private table {name}: "
            "which rows pass would depend on other rows of private data",
            hint="filter with constants (col IN ('a', 'b')) or a public table (col IN (SELECT "
            "code FROM a_public_table WHERE ...)); to filter people by what each did, "
            f"aggregate per person in a derived table: SELECT COUNT(*) FROM (SELECT "
            f"{s.private.privacy_unit}, COUNT(*) AS n FROM {name} GROUP BY "
            f"{s.private.privacy_unit}) t WHERE n > 5",
        )
    if s.alias in {x.alias for x in outer.sources} | {x.table.split(".")[1] for x in outer.sources}:
        raise UnsupportedSql(
            f'the subquery\'s table alias "{s.alias}" is also used by the outer query',
            hint="give the subquery's table its own alias",
        )
    _qualify_own_columns(q, s, outer)
    where = q.args.get("where")
    inner_where, links = _correlations(where.this if where is not None else None, s, outer)
    for link in links:
        check_row_level(outer, link, "a subquery's correlation")
        _check_float_link(link, outer)
        for c in link.find_all(exp.Column):  # as the outer WHERE's own columns are checked
            if outer.column(c).identifier:
                raise PrivacyViolation(
                    f"column {outer.source(c).table}.{c.name} is an identifier and can't be "
                    "filtered on",
                    hint="identifiers may only be tested with IS [NOT] NULL or counted",
                )
    checked: list[exp.Expr] = [*q.expressions, *([inner_where] if inner_where else [])]
    for c in (c for e in checked for c in e.find_all(exp.Column)):
        if c.table != s.alias:
            name = s.table.removeprefix("public.")
            raise UndefinedColumn(
                f"column {c.sql('postgres')} in a subquery is not known to be a column of "
                f"{name}: the outer query has a column of that name too (dpsql does not read "
                "public tables' columns), or it names the outer query's table",
                hint=f"qualify it: {s.alias}.{c.name} for {name}'s column; a correlation is "
                "written <alias>.<column> = <outer alias>.<column> in the subquery's WHERE",
            )
    items = q.expressions
    if exists:
        ok = len(items) == 1 and isinstance(items[0], (exp.Literal, exp.Star, exp.Column))
    else:
        ok = len(items) == 1 and isinstance(items[0], exp.Column)
    if not ok:
        raise UnsupportedSql("the subquery must select one column of its table", hint=_HINT)
    inner = _PublicCtx([s])
    if inner_where is not None:
        check_row_level(inner, inner_where, "a subquery's WHERE")


def _check_float_link(link: exp.Expr, outer: Ctx) -> None:
    """Refuse a correlation whose outer expression may be a float (``r.n = t.f`` of a ``double
    precision`` column, ``r.n = CAST(p.x AS float8)``): PostgreSQL converts the public column to
    it (a NUMERIC beyond 1.8e308 fails) and runs the subquery only when a private row reaches it,
    so whether the statement failed would depend on the private rows (review24; the same rule as
    :func:`dpsql.sql.totality.check_total`'s for a comparison written in the outer query)."""
    from dpsql.sql.rewrite.float_safe import maybe_float

    if maybe_float(link, outer.column):
        raise UnsupportedSql(
            f"a correlation of a public table's column with {link.sql('postgres')}, a "
            "floating-point value, is not supported in private queries: PostgreSQL converts "
            "the public column to it, which fails for some "
            "of its values, and runs the subquery only when a private row reaches it, so whether "
            "the statement failed would depend on the private rows",
            hint="correlate on a text, integer or numeric expression (CAST(... AS numeric))",
        )


def _qualify_own_columns(q: exp.Select, s: Source, outer: Ctx) -> None:
    """Qualify, in place, the subquery's unqualified columns that can only be its own table's:
    no outer table has a column of that name (every outer table is private, its columns known).
    PostgreSQL resolves an unqualified name in the innermost scope first, so this is what it
    reads (``region IN (SELECT code FROM regions WHERE name = 'North')``)."""
    if any(x.private is None for x in outer.sources):
        return  # a public outer table's columns are not known: leave them to be qualified
    known = {c for x in outer.sources if x.private is not None for c in x.private.columns}
    where = q.args.get("where")
    parts = [*q.expressions, *([where.this] if where is not None else [])]
    for c in [c for e in parts for c in e.find_all(exp.Column)]:
        if not c.table and isinstance(c.this, exp.Identifier) and c.name not in known:
            c.set("table", exp.to_identifier(s.alias))


def _correlations(
    where: exp.Expr | None, s: Source, outer: Ctx
) -> tuple[exp.Expr | None, list[exp.Expr]]:
    """The subquery's WHERE without its correlations, and their outer expressions.

    A correlation is a top-level conjunct ``<s.alias>.<column> = <expression>`` (either side) whose
    expression names only columns qualified by an outer table's alias or name; any other conjunct
    stays in the WHERE that is checked over the public table alone."""
    if where is None:
        return None, []
    names = {x.alias for x in outer.sources} | {x.table.split(".")[1] for x in outer.sources}
    kept: list[exp.Expr] = []
    links: list[exp.Expr] = []
    for part in where.flatten() if isinstance(where, exp.And) else [where]:
        link = _link(part.unnest(), s.alias, names)
        if link is None:
            kept.append(part)
        else:
            links.append(link)
    if not links:
        return where, []
    return (exp.and_(*kept) if kept else None), links


def _link(part: exp.Expr, alias: str, outer: set[str]) -> exp.Expr | None:
    if not isinstance(part, exp.EQ):
        return None
    for mine, other in ((part.this, part.expression), (part.expression, part.this)):
        if not (isinstance(mine, exp.Column) and mine.table == alias):
            continue
        cols = list(other.find_all(exp.Column))
        if cols and all(c.table in outer and c.table != alias for c in cols):
            if not any(isinstance(n, (exp.Select, exp.Subquery)) for n in other.walk()):
                found: exp.Expr = other
                return found
    return None


class _PublicCtx(Ctx):
    """A resolver over one public table (its columns are opaque values)."""

    def __init__(self, sources: list[Source]) -> None:
        self.sources = sources
        self.table = sources[0].table
        self.alias = sources[0].alias
        self.cols = {}
        self.policy = None

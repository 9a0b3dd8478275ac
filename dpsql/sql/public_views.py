"""Public tables that are views computing something that can fail on their own rows.

A view runs its definition each time it is read: ``CREATE VIEW rates AS SELECT code, 100 / (n - 2)
AS k FROM regions_raw`` fails (22012) on the row whose n is 2, and only when that row is read. A
public statement reading it fails on public data, the same for everyone. But a private statement
reads the public side of a join or of an IN / EXISTS subquery only when a private row reaches it
(a hash join builds no table over an empty outer side; a nested loop looks up the matching rows
only): ``SELECT COUNT(*) FROM t WHERE x > 5 AND region IN (SELECT r.code FROM rates r WHERE r.k >
0)`` was answered on a database where no row has x > 5 and failed on its neighbour with one more
person whose x is 9, a noiseless bit about that person (review25). The statement's own
expressions over a public table are checked (:mod:`dpsql.sql.totality`); a view's are inside the
database, read here from ``pg_get_viewdef`` (:data:`dpsql.sql.shadowing.SHADOW_SQL`).

:func:`view_failure` accepts only what can't fail whatever the rows: columns, constants (and
their casts), comparisons, AND / OR / NOT, IS [NOT] NULL, IN lists and ``= ANY (ARRAY[...])``,
BETWEEN, COALESCE and CASE of those, a cast to text, joins, derived tables, UNION / INTERSECT /
EXCEPT, DISTINCT, GROUP BY with COUNT / MIN / MAX, ORDER BY, LIMIT, IN / EXISTS subqueries. Any
arithmetic, other function, cast of a column, pattern match or scalar subquery makes the view
fallible (conservative: ``lower(name)`` can't fail, but is refused too); so does a definition
sqlglot can't read. A materialized view stores its rows (its query runs at REFRESH only), so it is
never fallible; a foreign table's server runs its query only when rows are asked, so it is; so is
a table whose row-level security policy's condition (evaluated on each row read, for a role that
does not bypass it) computes something that can fail. A private statement reading a fallible
public table is refused before any charge (0A000).
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.sql.nodes import POSTGRES

# nodes that compute nothing that can fail (their children are checked too)
_SAFE: tuple[type[exp.Expr], ...] = (
    exp.Select, exp.Union, exp.Intersect, exp.Except, exp.From, exp.Join, exp.Where, exp.Having,
    exp.Group, exp.Order, exp.Ordered, exp.Limit, exp.Offset, exp.Distinct, exp.With, exp.CTE,
    exp.Table, exp.TableAlias, exp.Alias, exp.Column, exp.Identifier, exp.Star, exp.Literal,
    exp.Null, exp.Boolean, exp.Paren, exp.And, exp.Or, exp.Not, exp.Is, exp.EQ, exp.NEQ, exp.LT,
    exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Any, exp.Array, exp.In,
    exp.Between, exp.Coalesce, exp.Case, exp.If, exp.Exists, exp.Count, exp.Min, exp.Max,
    exp.CurrentTimestamp, exp.CurrentDate, exp.DataType, exp.Tuple,
)  # fmt: skip
_HEAD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_$.]*)\s*\(")
_TEXT = (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR, exp.DataType.Type.NAME)
_WORDS: dict[type[exp.Expr], str] = {
    exp.Add: "arithmetic (+)", exp.Sub: "arithmetic (-)", exp.Mul: "arithmetic (*)",
    exp.Div: "a division", exp.IntDiv: "a division", exp.Mod: "a modulo (%)",
    exp.Pow: "a power (^)", exp.Neg: "a negation", exp.Cast: "a cast of a column",
    exp.Subquery: "a scalar subquery", exp.Like: "a pattern match (LIKE)",
    exp.ILike: "a pattern match (ILIKE)", exp.RegexpLike: "a regular expression",
    exp.Window: "a window function", exp.DPipe: "a concatenation (||)",
}  # fmt: skip


def _constant(n: exp.Expr) -> bool:
    while isinstance(n, (exp.Paren, exp.Neg)):
        n = n.this
    return isinstance(n, (exp.Literal, exp.Null, exp.Boolean))


def _node_failure(n: exp.Expr) -> str | None:
    """Words for ``n`` when ``n`` itself may fail (its children are looked at on their own)."""
    if isinstance(n, exp.Cast):
        to = n.args.get("to")
        if _constant(n.this) or (isinstance(to, exp.DataType) and to.this in _TEXT):
            return None  # a constant (folded when the view was made), or a value written out
        return _WORDS[exp.Cast]
    if isinstance(n, exp.Neg) and _constant(n.this):
        return None
    if isinstance(n, exp.Subquery):
        # a derived table, an IN / EXISTS subquery: no more than their own parts can fail
        parent = n.parent
        if isinstance(parent, (exp.From, exp.Join, exp.Exists, exp.Union)) or (
            isinstance(parent, exp.In) and parent.args.get("query") is n
        ):
            return None
        return _WORDS[exp.Subquery]
    if isinstance(n, _SAFE):
        return None
    if type(n) in _WORDS:
        return _WORDS[type(n)]
    if isinstance(n, (exp.Func, exp.Dot)):  # a Dot: a schema-qualified call
        head = _HEAD.match(n.sql(POSTGRES))
        name = head.group(1) if head else n.sql_name() if isinstance(n, exp.Func) else n.name
        return f"function {name.lower()}()"
    return f"{type(n).__name__.lower()}"


def view_failure(definition: str) -> str | None:
    """What in a view's definition (``pg_get_viewdef``'s text) could fail at run time, in
    words (the first found); None when nothing can."""
    try:
        tree = sqlglot.parse_one(definition, read="postgres")
    except sqlglot.errors.SqlglotError:
        return "a definition dpsql can't read"
    if tree is None:
        return "a definition dpsql can't read"
    for n in tree.walk():
        got = _node_failure(n)
        if got is not None:
            return got
    return None


def fallible_reason(public: str, row: str) -> str | None:
    """Why reading public table ``public`` could fail on its own rows, in words (``it is a view
    that computes a division``, ``it reads public.v, a view that computes ...``), None when it can't;
    ``row``: one of ``SHADOW_SQL``'s kind 'v' rows for it (``<relkind><schema.name>\\n<its
    definition>``)."""
    head, _, definition = row.partition("\n")
    kind, name = head[:1], head[1:]
    if kind == "f":
        what = "a foreign table: its server runs a query when its rows are read"
    else:
        got = view_failure(definition)
        if got is None:
            return None
        what = f"a view that computes {got}"
        if kind == "s":  # its row-level security policies' conditions, as SELECT 1 WHERE ...
            what = f"a table whose row-level security policy computes {got}"
    return f"it is {what}" if name == public else f"it reads {name}, {what}"


def fallible_words(name: str, why: str, private: bool = False) -> str:
    """The operator's line for a fallible table of the policy (``dpsql serve``'s warning)."""
    if private:
        return (
            f"private table {name}: {why}, which can fail on some of its rows; a query that "
            "reads such a row fails, charged, but whether it failed can tell whether that "
            "person's row was read: make the view's computation total (NULLIF(n - 2, 0) for a "
            "division, no failing cast) or store its rows as a table or a materialized view"
        )
    return (
        f"public table {name}: {why}, which can fail on some of its rows; queries of private "
        "tables that read it are refused (0A000): store it as a table or a materialized view"
    )


def check_fallible_views(names: list[str], fallible: tuple[tuple[str, str], ...]) -> None:
    """Refuse (0A000) a private statement reading any of ``names`` that ``fallible`` lists
    (public table name, why)."""
    reasons = dict(fallible)
    for name in names:
        if name in reasons:
            raise UnsupportedSql(
                f"public table {name} can't be read by a query of private tables: "
                f"{reasons[name]}, which can fail on some of its rows, and PostgreSQL reads it "
                "only where a private row reaches it, so whether the statement failed would "
                "depend on the private rows",
                hint="ask the data owner to store it as a table or a materialized view (CREATE "
                "MATERIALIZED VIEW ... AS its query, refreshed when its tables change) or to keep "
                "only columns, constants and comparisons in the view; a query of public tables "
                "alone still reads it as it is",
            )

"""Functions and operators of the upstream database that would shadow the ones dpsql allows.

dpsql allows functions by *name* (``md5``, ``upper``, ``format`` ...), but PostgreSQL picks a
function by name *and argument types* among every schema of the search path: with a function
``public.md5(integer)`` in the database, ``SELECT md5(1)`` calls it, not ``pg_catalog.md5``. Such a
function runs with the upstream role's rights, so one that reads a private table would send its
rows to the analyst (the red team's ``public.md5(integer)`` returned e-mail addresses through a
public query, and ``upper(quantity)`` ran one inside a private query's WHERE).

So the names of functions and the symbols of operators defined outside the system schemas
(``pg_catalog``, ``information_schema``), other than those an extension installed (vetted code
such as citext's ``upper(citext)``), are read from the upstream (:data:`SHADOW_SQL`) and a
statement that calls one is refused (42501). An operator shadows the same way (``quantity + 'x'``
with a user-defined ``+(integer, text)``).

The same query lists the public tables (``public_tables:``) that are views (or materialized views)
reading anything the policy does not declare public (a private table, an undeclared table, or a
function of the database's own): a public "table" ``CREATE VIEW v AS SELECT email FROM purchases``
would hand out private rows as-is, and one aggregating them (``SELECT region, count(*) ...``) exact
counts. A statement reading such a table is refused (42501), whatever the policy says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import PrivacyViolation
from dpsql.sql.nodes import POSTGRES

_USER_SCHEMA = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%'"
)
_NOT_EXTENSION = (
    "NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = {cls}::regclass "
    "AND d.objid = {oid} AND d.deptype = 'e')"
)
_REL = "'pg_catalog.pg_class'::regclass"
_RULE = "'pg_catalog.pg_rewrite'::regclass"
# the public tables, and every relation or function their view rules read (recursively)
_VIEW_CTE = f"""WITH RECURSIVE pub AS (
  SELECT x AS name, to_regclass(quote_ident(split_part(x, '.', 1)) || '.'
                                || quote_ident(split_part(x, '.', 2)))::oid AS oid
  FROM unnest(%s::text[]) AS x
), deps AS (
  SELECT pub.name, d.refclassid, d.refobjid FROM pub
  JOIN pg_catalog.pg_rewrite r ON r.ev_class = pub.oid
  JOIN pg_catalog.pg_depend d ON d.classid = {_RULE} AND d.objid = r.oid
  UNION
  SELECT deps.name, d.refclassid, d.refobjid FROM deps
  JOIN pg_catalog.pg_rewrite r ON deps.refclassid = {_REL} AND r.ev_class = deps.refobjid
  JOIN pg_catalog.pg_depend d ON d.classid = {_RULE} AND d.objid = r.oid
), runs AS (
  SELECT pub.name, pub.oid FROM pub
  UNION
  SELECT runs.name, d.refobjid FROM runs
  JOIN pg_catalog.pg_class c ON c.oid = runs.oid AND c.relkind = 'v'
  JOIN pg_catalog.pg_rewrite r ON r.ev_class = runs.oid
  JOIN pg_catalog.pg_depend d ON d.classid = {_RULE} AND d.objid = r.oid
                             AND d.refclassid = {_REL}
) """
# the plain views and foreign tables reading a public table runs (through views, not through a
# materialized view's stored rows), and the row-level security policies of the tables it reads
# (their conditions, read for every row): dpsql.sql.public_views judges them
_RUN_ROWS = """SELECT 'v', runs.name, c.relkind::text || n.nspname || '.' || c.relname || E'\\n'
  || CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) ELSE '' END FROM runs
JOIN pg_catalog.pg_class c ON c.oid = runs.oid AND c.relkind IN ('v', 'f')
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
UNION
SELECT 'v', runs.name, 's' || n.nspname || '.' || c.relname || E'\\nSELECT 1 WHERE '
  || string_agg('(' || pg_catalog.pg_get_expr(p.polqual, p.polrelid) || ')', ' AND ') FROM runs
JOIN pg_catalog.pg_class c ON c.oid = runs.oid AND c.relrowsecurity
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_policy p ON p.polrelid = c.oid AND p.polcmd IN ('r', '*')
                           AND p.polqual IS NOT NULL
GROUP BY runs.name, n.nspname, c.relname"""
_VIEW_ROWS = f"""SELECT 't', deps.name, n.nspname || '.' || c.relname FROM deps
JOIN pg_catalog.pg_class c ON deps.refclassid = {_REL} AND c.oid = deps.refobjid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_SCHEMA}
UNION
SELECT 't', deps.name, 'function ' || n.nspname || '.' || p.proname FROM deps
JOIN pg_catalog.pg_proc p ON deps.refclassid = 'pg_catalog.pg_proc'::regclass
                          AND p.oid = deps.refobjid
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE {_USER_SCHEMA} AND {_NOT_EXTENSION.format(cls="'pg_catalog.pg_proc'", oid="p.oid")}"""
SHADOW_SQL = (
    _VIEW_CTE + "SELECT 'f', lower(p.proname), NULL FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    f"WHERE {_USER_SCHEMA} AND "
    + _NOT_EXTENSION.format(cls="'pg_catalog.pg_proc'", oid="p.oid")
    + " UNION SELECT 'o', o.oprname, NULL FROM pg_catalog.pg_operator o "
    "JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace "
    f"WHERE {_USER_SCHEMA} AND "
    + _NOT_EXTENSION.format(cls="'pg_catalog.pg_operator'", oid="o.oid")
    + " UNION SELECT 'r', n.nspname || '.' || c.relname, NULL FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    f"WHERE {_USER_SCHEMA} AND c.relkind IN ('r', 'v', 'm', 'f', 'p')"
    + " UNION "
    + _VIEW_ROWS
    + " UNION "
    + _RUN_ROWS
)


@dataclass(frozen=True)
class Shadows:
    """User-defined function names (lower case) and operator symbols of the upstream, and the
    public tables that read something not declared public (name, what it reads)."""

    functions: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()
    tainted: tuple[tuple[str, str], ...] = ()
    relations: frozenset[str] = frozenset()  # schema.name of every user table and view
    # public tables whose reading computes something that can fail (name, why): refused in
    # private statements (dpsql.sql.public_views)
    fallible: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_rows(cls, rows: list[tuple[str, str, str | None]], public: set[str]) -> Shadows:
        """From :data:`SHADOW_SQL`'s rows, run with the policy's ``public`` tables."""
        tainted = {
            (str(n), str(dep))
            for k, n, dep in rows
            if k == "t" and dep is not None and dep != n and dep not in public
        }
        from dpsql.sql.public_views import fallible_reason

        fallible: dict[str, str] = {}
        runs = [(str(n), str(dep)) for k, n, dep in rows if k == "v" and dep is not None]
        # the public table's own definition first, then the views it reads (by name)
        for n, dep in sorted(runs, key=lambda r: (r[1][1:].partition("\n")[0] != r[0], r[1])):
            why = None if n in fallible else fallible_reason(n, dep)
            if why is not None:
                fallible[n] = why
        return cls(
            frozenset(str(n) for k, n, _ in rows if k == "f"),
            frozenset(str(n) for k, n, _ in rows if k == "o"),
            tuple(sorted(tainted)),
            frozenset(str(n) for k, n, _ in rows if k == "r"),
            tuple(sorted(fallible.items())),
        )


_OPERATORS: dict[type[exp.Expr], str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.Pow: "^",
    exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=",
    exp.DPipe: "||", exp.Like: "~~", exp.ILike: "~~*", exp.RegexpLike: "~", exp.Neg: "-",
    exp.BitwiseAnd: "&", exp.BitwiseOr: "|", exp.BitwiseXor: "#", exp.BitwiseNot: "~",
    exp.BitwiseLeftShift: "<<", exp.BitwiseRightShift: ">>", exp.ArrayContainsAll: "@>",
    exp.ArrayOverlaps: "&&", exp.Between: ">=", exp.In: "=",
}  # fmt: skip
_HEAD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_$]*)\s*\(")


def _names(node: exp.Func) -> set[str]:
    """The names PostgreSQL resolves for a call: as written, and as sqlglot writes it back."""
    names = {str(node.name).lower()} if isinstance(node, exp.Anonymous) else set()
    names.add(node.sql_name().lower())
    m = _HEAD.match(node.sql(POSTGRES))
    if m:
        names.add(m.group(1).lower())
    return names


def check_shadowing(
    tree: exp.Expr,
    shadows: Shadows,
    also_reads: tuple[str, ...] = (),
    visible: frozenset[str] | None = None,
    private: bool = False,
) -> None:
    """Refuse (42501) a statement that calls a function or uses an operator the upstream
    database defines outside its system schemas.

    ``also_reads``: tables the statement reads through the policy (a ``keys_from`` table).
    ``visible``: the tables the analyst may see; a cast to the row type of any other table
    (``NULL::hidden_table``, whose columns ``(NULL::t).col`` would name) is refused as a missing
    type (42704), as the table itself is refused as a missing relation.

    Raises:
        PrivacyViolation: such a call or operator is in ``tree``, or it reads a public table
            that is a view of data dpsql protects.
    """
    _check_tables(tree, shadows, also_reads, private)
    if visible is not None and shadows.relations:
        _check_row_types(tree, shadows.relations - visible)
    if not shadows.functions and not shadows.operators:
        return
    for node in tree.walk():
        if isinstance(node, exp.Func) and shadows.functions:
            hit = _names(node) & shadows.functions
            if hit:
                name = sorted(hit)[0]
                raise PrivacyViolation(
                    f"function {name}() is not allowed through dpsql: the database defines its "
                    "own function of that name",
                    detail="PostgreSQL could call the database's function instead of the "
                    "built-in one, with the rights of dpsql's upstream role",
                    hint="ask the data owner to rename or drop that function, or to install it "
                    "as part of an extension",
                )
        symbol = _OPERATORS.get(type(node))
        if symbol is not None and symbol in shadows.operators:
            raise PrivacyViolation(
                f"operator {symbol} is not allowed through dpsql: the database defines its own "
                "operator of that name",
                hint="ask the data owner to drop that operator, or to install it as part of an "
                "extension",
            )


def _check_tables(
    tree: exp.Expr, shadows: Shadows, also: tuple[str, ...], private: bool = False
) -> None:
    if not shadows.tainted and not (private and shadows.fallible):
        return
    from dpsql.sql.tables import referenced_tables

    names = [n for n, _ in referenced_tables(tree)]
    reads = dict(shadows.tainted)
    for name in names + list(also):
        if name in reads:
            raise PrivacyViolation(
                f"public table {name} is a view that reads {reads[name]}, which the policy does "
                "not declare public",
                detail="its rows would be derived from data dpsql protects, without noise",
                hint="ask the data owner to declare it private (with a privacy unit) or to remove "
                "it from public_tables",
            )
    if private and shadows.fallible:  # after: a view of protected data is refused as such
        from dpsql.sql.public_views import check_fallible_views

        check_fallible_views(names, shadows.fallible)  # not ``also``: dpsql reads those alone


def _type_name(t: exp.DataType) -> tuple[str, str] | None:
    """(qualified name, name as written) of a user-defined type, or None for a built-in one."""
    if t.this == exp.DataType.Type.ARRAY and t.expressions:
        inner = t.expressions[0]
        return _type_name(inner) if isinstance(inner, exp.DataType) else None
    if t.this != exp.DataType.Type.USERDEFINED:
        return None
    kind = t.args.get("kind")
    parts = [kind] if isinstance(kind, exp.Identifier) else []
    if isinstance(kind, exp.Dot):
        parts = [x for x in (kind.this, kind.expression) if isinstance(x, exp.Identifier)]
    names = [p.name if p.quoted else p.name.lower() for p in parts]
    if not names or len(names) > 2:
        return None
    return ".".join(["public", *names] if len(names) == 1 else names), names[-1]


def _check_row_types(tree: exp.Expr, hidden: frozenset[str]) -> None:
    if not hidden:
        return
    from dpsql.errors import UndefinedObject

    for t in tree.find_all(exp.DataType):
        got = _type_name(t)
        if got is not None and got[0] in hidden:
            raise UndefinedObject(
                f'type "{got[1]}" does not exist',
                hint="only the tables declared in the dpsql policy can be used",
            )

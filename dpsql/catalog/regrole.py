"""``regrole`` values in catalog queries: printed as PostgreSQL prints them for the analyst.

Upstream, the analyst's role is dpsql's login role, so ``'ann'::regrole`` would print that role's
name. A regrole value is therefore computed as a plain ``oid`` (by :mod:`dpsql.catalog.roles`)
and, where its text reaches the client, printed by :func:`role_name`: the analyst's role as the
analyst's name (quoted as PostgreSQL quotes identifiers), a predefined role (``pg_monitor``) as
its name, any other id as its digits (what PostgreSQL prints for an id no role has).

Where the text reaches the client: a select-list item of the outer query (with the column label
PostgreSQL gives it, :func:`pg_label`), or a cast to a text type (``'ann'::regrole::text``, also
inside a WHERE). Elsewhere (comparisons, joins, subqueries) the value stays an ``oid``, which
compares as the regrole would.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.catalog.build import cast_target, cast_to, fill, template

# The upstream role dpsql runs as: the analyst's role in every rewritten query.
OWN_OID = (
    "(SELECT dpsql_r.oid FROM pg_catalog.pg_roles AS dpsql_r WHERE dpsql_r.rolname = CURRENT_USER)"
)
LABEL = "dpsql_label"  # meta key: the column label PostgreSQL gives a replaced expression

_TEXTUAL = frozenset({"text", "name", "varchar", "bpchar", "char", "character"})

_ROLE_NAME = (
    "CASE WHEN __v__ = " + OWN_OID + " THEN quote_ident(__a__) "
    "WHEN CAST(CAST(__v__ AS REGROLE) AS TEXT) LIKE 'pg\\_%' "
    "THEN CAST(CAST(__v__ AS REGROLE) AS TEXT) "
    "ELSE CAST(__v__ AS TEXT) END"
)


def role_name(oid: exp.Expr, analyst: str) -> exp.Expr:
    """The text a ``regrole`` holding ``oid`` prints through dpsql (NULL stays NULL).

    ``oid`` is an expression dpsql computed: the analyst's role, a predefined role or an id.
    """
    values = {"__v__": cast_to(oid, "OID"), "__a__": cast_to(exp.Literal.string(analyst), "TEXT")}
    return fill(template(_ROLE_NAME), values)


def place_regrole(node: exp.Expr, oid: exp.Expr, analyst: str) -> None:
    """Replace ``node`` (a regrole-valued cast or call) by ``oid``, printed as a name where the
    client reads its text (see the module)."""
    top, parent = node, node.parent
    while isinstance(parent, exp.Paren):
        top, parent = parent, parent.parent
    textual = isinstance(parent, exp.Cast) and _base_type(parent) in _TEXTUAL
    item = parent if textual and parent is not None else top
    output = _output_item(item)
    label = pg_label(item) if output and not isinstance(item.parent, exp.Alias) else None
    new = role_name(oid, analyst) if textual or output else cast_to(oid, "OID")
    if item is node and label is not None:
        node.replace(exp.alias_(new, label, quoted=True))
        return
    node.replace(new)
    if label is not None:
        alias = exp.Alias(alias=exp.to_identifier(label, quoted=True))
        item.replace(alias)
        alias.set("this", item)


def _base_type(cast: exp.Cast) -> str:
    return cast_target(cast).split("(")[0].strip()


def _output_item(item: exp.Expr) -> bool:
    """``item`` is (the value of) a select-list item of a SELECT whose rows reach the client."""
    parent = item.parent
    if isinstance(parent, exp.Alias):
        item, parent = parent, parent.parent
    if not isinstance(parent, exp.Select) or item.arg_key != "expressions":
        return False
    node: exp.Expr = parent
    while isinstance(node.parent, (exp.Subquery, exp.SetOperation, exp.Paren)):
        if isinstance(node.parent, exp.Subquery) and node.parent.alias:
            return False  # a derived table: read by the outer query, not the client
        if isinstance(node.parent, exp.SetOperation) and node.arg_key not in ("this", "expression"):
            return False
        node = node.parent
    return node.parent is None


def pg_label(node: exp.Expr) -> str:
    """The column label PostgreSQL gives a select-list item without an alias (its
    FigureColname rules, for the expressions regrole values come in)."""
    return _figure(node)[0] or "?column?"


def _figure(node: exp.Expr) -> tuple[str, int]:
    """(label, strength) as PostgreSQL's FigureColnameInternal: 2 a name, 1 a type, 0 none."""
    if LABEL in node.meta:
        return str(node.meta[LABEL]), 2
    if isinstance(node, exp.Paren):
        return _figure(node.this)
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier):
        return (node.this.name if node.this.quoted else node.this.name.lower()), 2
    if isinstance(node, exp.Dot):
        return _figure(node.expression)
    if isinstance(node, exp.Cast):
        name, strength = _figure(node.this)
        return (name, strength) if strength > 1 else (_base_type(node), 1)
    if isinstance(node, exp.Case):
        return "case", 1
    if isinstance(node, exp.Anonymous):
        return node.name.lower(), 2
    if isinstance(node, exp.Func):
        return node.sql_name().lower(), 2
    return "", 0

"""Roles in catalog queries: an analyst sees one role, itself, and never the upstream's roles.

PostgreSQL clients need a current user (psql's prompt, DBeaver's ``pg_roles`` row, Metabase's
``current_user``) and owner names (``\\dt``, ``\\l``), but the upstream's role names (its
superuser, dpsql's login role, other analysts' upstream roles) are none of the analyst's
business. So, in a catalog query (the rewrite of :mod:`dpsql.catalog.check`):

* ``current_user``, ``session_user``, ``current_role`` and ``user`` are the analyst's name (the
  name it logged in with); ``pg_get_userbyid(x)`` is that name for every role id, so every
  object's owner reads as the analyst;
* ``pg_roles`` and ``pg_user`` hold one row, the analyst (no attribute: not a superuser, no
  password, no settings); ``pg_auth_members``, ``pg_default_acl`` and
  ``information_schema.applicable_roles`` are empty, ``enabled_roles`` is the analyst, and
  comments on roles (``pg_shdescription``, ``shobj_description``) are absent;
* access-control lists (``relacl``, ``nspacl``, ``datacl``, ``typacl``, ``proacl``, ``attacl``
  ...) are NULL (they print role names), and role names in views (``pg_tables.tableowner``,
  ``pg_views.viewowner``, ``pg_policies.roles``, ``information_schema.schemata.schema_owner``,
  the grantor and grantee of ``table_privileges`` ...) are the analyst (``PUBLIC`` stays);
* a role *name* given to ``'x'::regrole``, ``to_regrole``, ``pg_has_role`` or a
  ``has_*_privilege`` function is the analyst's own or does not exist: ``'x'::regrole`` and
  ``has_table_privilege('x', ...)`` raise 42704 ``role "x" does not exist`` for every other
  name, decided from the analyst's name alone (never from the upstream, so no oracle); a role
  *id* or a computed value is answered for the analyst's role only (NULL for any other);
* a ``regrole`` value (``'ann'::regrole``, ``to_regrole('ann')``, ``relowner::regrole``) prints
  as PostgreSQL prints it for the analyst's role: its name (never the upstream's, which is what
  the value would print upstream); a predefined role prints its name, any other id prints its
  digits (as PostgreSQL prints an id no role has). It is printed so where it reaches the client
  (a select-list item of the outer query, with PostgreSQL's column label) or is cast to a text
  type (``'ann'::regrole::text``); elsewhere (comparisons, joins) it is the plain ``oid``.

The relations (``pg_roles`` ...) are rewritten by :mod:`dpsql.catalog.overrides`.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.catalog.build import cast_target, cast_to, fill, qualified_call, replace_call, template
from dpsql.catalog.regrole import LABEL, OWN_OID, place_regrole
from dpsql.errors import UndefinedObject

# SQL keywords that read the session's role (unquoted, they are never column names).
ROLE_KEYWORDS = frozenset({"current_user", "session_user", "current_role", "user"})

# has_*_privilege functions: with this many arguments, the first one is a role.
_ROLE_FIRST: dict[str, int] = {
    **dict.fromkeys(
        """has_table_privilege has_sequence_privilege has_any_column_privilege
        has_schema_privilege has_type_privilege has_function_privilege has_database_privilege
        has_tablespace_privilege has_foreign_data_wrapper_privilege has_server_privilege
        has_language_privilege""".split(),
        3,
    ),
    "has_column_privilege": 4,
}


def analyst_name(analyst: str) -> exp.Expr:
    return cast_to(exp.Literal.string(analyst), "NAME")


def role_references(tree: exp.Expr) -> list[exp.Expr]:
    """The nodes that read the session's role (``current_user``, ``user`` ...), outermost form
    (with a ``pg_catalog.`` qualifier when written)."""
    out: list[exp.Expr] = []
    for node in tree.walk():
        if isinstance(node, (exp.CurrentUser, exp.SessionUser)):
            out.append(node)
        elif isinstance(node, exp.Anonymous) and node.name.lower() in ROLE_KEYWORDS:
            parent = node.parent
            dotted = isinstance(parent, exp.Dot) and parent.expression is node
            out.append(parent if dotted and parent is not None else node)
        elif (
            isinstance(node, exp.Column)
            and not node.table
            and isinstance(node.this, exp.Identifier)
            and not node.this.quoted
            and node.name.lower() in ROLE_KEYWORDS
        ):
            out.append(node)
    return out


def replace_role_references(tree: exp.Expr, analyst: str) -> None:
    """``current_user`` and friends -> the analyst's name (a ``name``, as PostgreSQL's); a
    select-list item keeps PostgreSQL's column label (``current_user``, ``user`` ...)."""
    for node in role_references(tree):
        new = analyst_name(analyst)
        new.meta[LABEL] = _label(node)  # for a label computed later (current_user::regrole)
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            new = exp.alias_(new, _label(node), quoted=True)
        node.replace(new)


def _label(node: exp.Expr) -> str:
    if isinstance(node, exp.CurrentUser):
        return "current_user"
    if isinstance(node, exp.SessionUser):
        return "session_user"
    if isinstance(node, exp.Dot):
        return str(node.expression.name).lower()
    return node.name.lower()


def _literal(node: exp.Expr) -> exp.Literal | None:
    while isinstance(node, exp.Cast):
        node = node.this
    return node if isinstance(node, exp.Literal) and node.is_string else None


def _missing(name: str, at: exp.Expr | None = None) -> UndefinedObject:
    start = at.meta.get("start") if at is not None else None
    return UndefinedObject(
        f'role "{name}" does not exist',
        hint="through dpsql the only role is your own (current_user); owners and grantees "
        "show as your name",
        position=start + 1 if isinstance(start, int) else None,
    )


def _folded(text: str) -> str:
    """A role name as ``regrole``'s input reads it: ``"Ann"`` is Ann, ``Ann`` is ann."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text.lower()


def _predefined(name: str) -> bool:
    """PostgreSQL's predefined roles (``pg_monitor`` ...): no user role may start with pg_."""
    return name.startswith("pg_")


def _own_oid() -> exp.Expr:
    return template(OWN_OID)


def _computed_role(x: exp.Expr, analyst: str) -> exp.Expr:
    """An OID: the analyst's role when ``x`` (a role id or name, known upstream only) is its
    id or name, else NULL."""
    text = cast_to(x.copy(), "TEXT")
    cond = exp.In(
        this=text,
        expressions=[exp.Literal.string(analyst), cast_to(_own_oid(), "TEXT")],
    )
    return exp.Case(ifs=[exp.If(this=cond, true=_own_oid())])


def named_role(text: exp.Expr, analyst: str) -> exp.Expr:
    """An OID for a role name known upstream only (``text``): the analyst's role for its name,
    a predefined role (``pg_*``, the same on every server) for its name, else NULL."""
    sql = (
        "CASE WHEN __t__ = __a__ THEN " + OWN_OID + " "
        "WHEN __t__ LIKE 'pg\\_%' THEN CAST(to_regrole(__t__) AS OID) END"
    )
    values = {"__t__": text, "__a__": cast_to(exp.Literal.string(analyst), "TEXT")}
    return fill(template(sql), values)


def regrole_input(x: exp.Expr, analyst: str) -> exp.Expr:
    """``CAST(x AS regrole)`` as an OID: a role id stays itself (the cast looks nothing up); a
    name is the analyst's role, a predefined role, or (a literal) 42704 as a missing role, or
    (computed upstream) NULL."""
    if isinstance(x, exp.Literal) and not x.is_string:
        return cast_to(x.copy(), "OID")
    lit = _literal(x)
    if lit is not None and lit.name.strip().isdigit():
        return cast_to(exp.Literal.string(lit.name.strip()), "OID")
    if lit is not None:
        return _role_by_name(x, analyst, fold=True, public_ok=False)
    text = cast_to(x.copy(), "TEXT")
    digits = exp.RegexpLike(this=text.copy(), expression=exp.Literal.string("^[0-9]+$"))
    return exp.Case(
        ifs=[exp.If(this=digits, true=cast_to(text.copy(), "OID"))],
        default=named_role(text, analyst),
    )


def _role_by_name(x: exp.Expr, analyst: str, *, fold: bool, public_ok: bool) -> exp.Expr:
    """A role argument: the analyst's name -> the upstream role; another literal name raises
    42704; anything else is answered for the analyst's role only."""
    lit = _literal(x)
    if lit is None:
        return _computed_role(x, analyst)
    name = _folded(lit.name) if fold else lit.name
    if public_ok and name.lower() == "public" and (fold or name == "public"):
        return x
    if _predefined(name):  # pg_monitor & co exist on every server: nothing to hide
        return cast_to(cast_to(exp.Literal.string(name), "REGROLE"), "OID")
    if name != analyst:
        raise _missing(name, lit)
    return _own_oid()


def guard_roles(node: exp.Func, analyst: str) -> None:
    """Rewrite one client function or cast that takes or returns a role (see the module)."""
    if isinstance(node, exp.Cast):
        if cast_target(node) == "regrole":
            place_regrole(node, regrole_input(node.this, analyst), analyst)
        return
    if not isinstance(node, exp.Anonymous):
        return
    name = node.name.lower()
    args = node.expressions
    if name == "pg_get_userbyid" and len(args) == 1:
        owner = exp.Case(
            ifs=[exp.If(this=exp.Is(this=args[0].copy(), expression=exp.null()), true=exp.null())],
            default=analyst_name(analyst),
        )
        replace_call(node, owner)
    elif name == "to_regrole" and len(args) == 1:
        lit = _literal(args[0])
        wanted = _folded(lit.name) if lit is not None else None
        if wanted is None:
            value = named_role(cast_to(args[0].copy(), "TEXT"), analyst)
        elif wanted != analyst and not _predefined(wanted):
            value = cast_to(exp.null(), "OID")  # missing, not an error
        else:
            value = _role_by_name(args[0], analyst, fold=True, public_ok=False)
        place_regrole(qualified_call(node), value, analyst)
    elif name == "pg_has_role" and len(args) in (2, 3):
        roles = args[: len(args) - 1]
        for arg in roles:
            arg.replace(_role_by_name(arg, analyst, fold=False, public_ok=False))
        if any((lit := _literal(a)) is not None and _predefined(lit.name) for a in roles):
            # the analyst's role is a member of no predefined role (the upstream's would tell
            # how dpsql is deployed, e.g. as a superuser)
            replace_call(node, exp.false())
    elif _ROLE_FIRST.get(name) == len(args):
        args[0].replace(_role_by_name(args[0], analyst, fold=False, public_ok=True))
    elif name == "shobj_description" and len(args) == 2:
        _guard_shobj_description(node)


def _guard_shobj_description(node: exp.Anonymous) -> None:
    """Comments on the current database and tablespaces only (never on roles)."""
    obj, catalog = node.expressions
    cond = fill(
        template(
            "CAST(__c__ AS TEXT) IN ('pg_tablespace', 'pg_catalog.pg_tablespace') "
            "OR (CAST(__c__ AS TEXT) IN ('pg_database', 'pg_catalog.pg_database') AND "
            "CAST(__o__ AS OID) = (SELECT d.oid FROM pg_catalog.pg_database AS d "
            "WHERE d.datname = current_database()))"
        ),
        {"__c__": catalog.copy(), "__o__": obj.copy()},
    )
    obj.replace(exp.Case(ifs=[exp.If(this=cond, true=cast_to(obj.copy(), "OID"))]))

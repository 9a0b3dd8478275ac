"""Roles in catalog queries: an analyst sees one role, itself, and never the upstream's roles.

PostgreSQL clients need a current user (psql's prompt, DBeaver's ``pg_roles`` row, Metabase's
``current_user``) and owner names (``\\dt``, ``\\l``), but the upstream's role names (its
superuser, dpsql's login role, other analysts' upstream roles) are none of the analyst's
business. So, in a catalog query (the rewrite of :mod:`dpsql.sql.catalog`):

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
  ``regrole`` values are returned as plain ``oid`` (a ``regrole`` prints the upstream name).

The relation overrides (:data:`OVERRIDES`) also blank definitions that name hidden objects
(view definitions, column defaults) and the source of user functions.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UndefinedObject
from dpsql.sql.catalog_functions import ident_name
from dpsql.sql.catalog_sql import cast_target, cast_to, fill, template

# SQL keywords that read the session's role (unquoted, they are never column names).
ROLE_KEYWORDS = frozenset({"current_user", "session_user", "current_role", "user"})

# The upstream role dpsql runs as: the analyst's role in every rewritten query.
_OWN_OID = (
    "(SELECT dpsql_r.oid FROM pg_catalog.pg_roles AS dpsql_r WHERE dpsql_r.rolname = CURRENT_USER)"
)

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
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            new = exp.alias_(new, _label(node), quoted=True)
        node.replace(new)


def _label(node: exp.Expr) -> str:
    if isinstance(node, exp.CurrentUser):
        return "current_user"
    if isinstance(node, exp.SessionUser):
        return "session_user"
    if isinstance(node, exp.Dot):
        return node.expression.name.lower()
    return node.name.lower()


def _literal(node: exp.Expr) -> exp.Literal | None:
    while isinstance(node, exp.Cast):
        node = node.this
    return node if isinstance(node, exp.Literal) and node.is_string else None


def _missing(name: str) -> UndefinedObject:
    return UndefinedObject(
        f'role "{name}" does not exist',
        hint="through dpsql the only role is your own (current_user); owners and grantees "
        "show as your name",
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
    return template(_OWN_OID)


def _computed_role(x: exp.Expr, analyst: str) -> exp.Expr:
    """An OID: the analyst's role when ``x`` (a role id or name, known upstream only) is its
    id or name, else NULL."""
    text = cast_to(x.copy(), "TEXT")
    cond = exp.In(
        this=text,
        expressions=[exp.Literal.string(analyst), cast_to(_own_oid(), "TEXT")],
    )
    return exp.Case(ifs=[exp.If(this=cond, true=_own_oid())])


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
    if fold and name.isdigit():  # '16384'::regrole is a role id
        return _computed_role(x, analyst)
    if name != analyst:
        raise _missing(name)
    return _own_oid()


def guard_roles(node: exp.Func, analyst: str) -> None:
    """Rewrite one client function or cast that takes or returns a role (see the module)."""
    if isinstance(node, exp.Cast):
        target = cast_target(node)
        if target == "regrole":
            value = _role_by_name(node.this, analyst, fold=True, public_ok=False)
            node.replace(cast_to(value, "OID") if value is not node.this else value)
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
        _replace(node, owner)
    elif name == "to_regrole" and len(args) == 1:
        lit = _literal(args[0])
        wanted = _folded(lit.name) if lit is not None else None
        if wanted is not None and wanted != analyst and not _predefined(wanted):
            _replace(node, cast_to(exp.null(), "OID"))  # missing, not an error
        else:
            _replace(node, _role_by_name(args[0], analyst, fold=True, public_ok=False))
    elif name == "pg_has_role" and len(args) in (2, 3):
        roles = args[: len(args) - 1]
        for arg in roles:
            arg.replace(_role_by_name(arg, analyst, fold=False, public_ok=False))
        if any((lit := _literal(a)) is not None and _predefined(lit.name) for a in roles):
            # the analyst's role is a member of no predefined role (the upstream's would tell
            # how dpsql is deployed, e.g. as a superuser)
            _replace(node, exp.false())
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


def _replace(node: exp.Func, new: exp.Expr) -> None:
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        parent.replace(new)
    else:
        node.replace(new)


# -- relations ---------------------------------------------------------------------------------

_NOBODY = {"rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication", "rolbypassrls"}
_NAME = "__analyst__"
_ANALYST_UNLESS_PUBLIC = (
    "CASE WHEN CAST(t.{c} AS TEXT) = 'PUBLIC' THEN 'PUBLIC' ELSE __analyst__ END"
)

# Definitions: shown only when they name nothing hidden (see catalog_rules "named_deps"); the
# source of functions other than PostgreSQL's own is never shown (opaque text).
_SYSTEM = "('pg_catalog', 'information_schema')"
_SYSTEM_NSP = f"(SELECT sn.oid FROM pg_catalog.pg_namespace AS sn WHERE sn.nspname IN {_SYSTEM})"
_SYSTEM_PROC = f"CASE WHEN t.pronamespace IN {_SYSTEM_NSP} THEN {{c}} END"
_VIEWDEF = (
    "CASE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite AS rw WHERE rw.ev_class = "
    "to_regclass(quote_ident({s}) || '.' || quote_ident({n})) "
    "AND NOT dpsql_named_deps('pg_catalog.pg_rewrite', rw.oid)) THEN {d} END"
)
_DEFAULT = (
    "CASE WHEN EXISTS (SELECT 1 FROM __pg_attrdef__ AS vd JOIN pg_catalog.pg_attribute AS va "
    "ON va.attrelid = vd.adrelid AND va.attnum = vd.adnum WHERE vd.adrelid = "
    "to_regclass(quote_ident(t.table_schema) || '.' || quote_ident(t.table_name)) "
    "AND va.attname = t.column_name) THEN {d} END"
)

# Columns replaced in a catalog relation (``t`` is the relation's row; ``__analyst__`` the
# analyst's name). The relation is read as jsonb_populate_record(row || overrides), which keeps
# every column (whatever the PostgreSQL version) in its order and type.
OVERRIDES: dict[tuple[str, str], dict[str, str]] = {
    ("pg_catalog", "pg_roles"): {
        "rolname": _NAME,
        **dict.fromkeys(_NOBODY, "FALSE"),
        "rolinherit": "TRUE",
        "rolcanlogin": "TRUE",
        "rolconnlimit": "-1",
        "rolpassword": "'********'",
        "rolvaliduntil": "NULL",
        "rolconfig": "NULL",
    },
    ("pg_catalog", "pg_user"): {
        "usename": _NAME,
        **dict.fromkeys(("usecreatedb", "usesuper", "userepl", "usebypassrls"), "FALSE"),
        "passwd": "'********'",
        "valuntil": "NULL",
        "useconfig": "NULL",
    },
    ("pg_catalog", "pg_database"): {"datacl": "NULL"},
    ("pg_catalog", "pg_namespace"): {"nspacl": "NULL"},
    ("pg_catalog", "pg_tablespace"): {"spcacl": "NULL"},
    ("pg_catalog", "pg_language"): {"lanacl": "NULL"},
    ("pg_catalog", "pg_foreign_data_wrapper"): {"fdwacl": "NULL"},
    ("pg_catalog", "pg_type"): {
        "typacl": "NULL",
        "typdefaultbin": "NULL",
        "typdefault": "CASE WHEN dpsql_named_deps('pg_catalog.pg_type', t.oid) "
        "THEN t.typdefault END",
    },
    ("information_schema", "domains"): {
        "domain_default": "CASE WHEN dpsql_named_deps('pg_catalog.pg_type', "
        "to_regtype(quote_ident(t.domain_schema) || '.' || quote_ident(t.domain_name))) "
        "THEN t.domain_default END",
    },
    ("pg_catalog", "pg_proc"): {
        "proargtypes": "CAST(t.proargtypes AS TEXT)",  # an oidvector is not a JSON array
        "prosrc": _SYSTEM_PROC.format(c="t.prosrc"),
        "probin": _SYSTEM_PROC.format(c="t.probin"),
        "proacl": "NULL",
        "proargdefaults": "NULL",
        "prosqlbody": "NULL",
    },
    ("pg_catalog", "pg_attribute"): {"attacl": "NULL", "attmissingval": "NULL"},
    ("pg_catalog", "pg_tables"): {"tableowner": _NAME},
    ("pg_catalog", "pg_views"): {
        "viewowner": _NAME,
        "definition": _VIEWDEF.format(s="t.schemaname", n="t.viewname", d="t.definition"),
    },
    ("pg_catalog", "pg_matviews"): {
        "matviewowner": _NAME,
        "definition": _VIEWDEF.format(s="t.schemaname", n="t.matviewname", d="t.definition"),
    },
    ("information_schema", "views"): {
        "view_definition": _VIEWDEF.format(
            s="t.table_schema", n="t.table_name", d="t.view_definition"
        ),
    },
    ("information_schema", "columns"): {
        "column_default": _DEFAULT.format(d="t.column_default"),
        "generation_expression": _DEFAULT.format(d="t.generation_expression"),
    },
    ("information_schema", "routines"): {
        "routine_definition": f"CASE WHEN t.routine_schema IN {_SYSTEM} "
        "THEN t.routine_definition END",
    },
    ("pg_catalog", "pg_policies"): {
        "roles": "CASE WHEN 'public' = ANY(t.roles) THEN t.roles ELSE ARRAY[__analyst__] END"
    },
    ("information_schema", "schemata"): {"schema_owner": _NAME},
    ("information_schema", "enabled_roles"): {"role_name": _NAME},
    **{
        ("information_schema", v): {
            "grantor": _ANALYST_UNLESS_PUBLIC.format(c="grantor"),
            "grantee": _ANALYST_UNLESS_PUBLIC.format(c="grantee"),
        }
        for v in ("table_privileges", "role_table_grants", "column_privileges")
    },
}

# Large catalogs: rows for which no override changes anything pass through as they are (the
# jsonb round trip costs ~0.2 ms a row), e.g. the many types without an ACL.
PASS_THROUGH: dict[tuple[str, str], str] = {
    ("pg_catalog", "pg_type"): "t.typacl IS NULL AND t.typdefault IS NULL",
    ("pg_catalog", "pg_proc"): f"t.proacl IS NULL AND t.pronamespace IN {_SYSTEM_NSP}",
    ("information_schema", "columns"): "t.column_default IS NULL AND "
    f"t.generation_expression IS NULL OR t.table_schema IN {_SYSTEM}",
    ("information_schema", "routines"): f"t.routine_schema IN {_SYSTEM}",
    ("pg_catalog", "pg_attribute"): "t.attacl IS NULL AND t.attmissingval IS NULL",
}


def overridden_tables(query: exp.Expr, tables: list[exp.Table]) -> set[int]:
    """ids of the catalog relations in ``query`` whose overridden columns the client may read:
    by name (qualified with the relation's alias, or unqualified), with ``alias.*`` or a bare
    ``*``, or as a whole-row value (``row_to_json(alias)``). The others are read plainly (which
    plans better). Call before any relation is rewritten."""
    stars = [
        s.parent for s in query.find_all(exp.Star) if isinstance(s.parent, (exp.Select, exp.Column))
    ]
    columns = list(query.find_all(exp.Column))
    out: set[int] = set()
    for table in tables:
        key = (ident_name(table.args.get("db")) or "pg_catalog", ident_name(table.this))
        if key not in OVERRIDES:
            continue
        alias = table.alias_or_name.lower()
        wanted = set(OVERRIDES[key]) - _REPRESENTATION

        def reads(col: exp.Column, alias: str = alias, wanted: set[str] = wanted) -> bool:
            name, qualifier = col.name.lower(), col.table.lower()
            if isinstance(col.this, exp.Star):
                return qualifier == alias
            return (not qualifier and name == alias) or (
                name in wanted and qualifier in ("", alias)
            )

        if any(isinstance(p, exp.Select) for p in stars) or any(reads(c) for c in columns):
            out.add(id(table))
    return out


# Overrides that only keep the jsonb round trip working (node trees and vectors that can't be
# read back from JSON): reading them alone does not need the round trip.
_REPRESENTATION = frozenset(
    {"proargtypes", "proargdefaults", "prosqlbody", "typdefaultbin", "attmissingval"}
)


def overridden_relation(schema: str, name: str, where: exp.Expr, analyst: str) -> exp.Query:
    """The relation (one of :data:`OVERRIDES`) with its overrides applied, filtered by
    ``where`` (over ``t``)."""
    overrides = OVERRIDES[(schema, name)]
    who = analyst_name(analyst)
    pairs: list[exp.Expr] = []
    for col, sql in overrides.items():
        value = who.copy() if sql == _NAME else fill(template(sql), {_NAME: who})
        pairs += [exp.Literal.string(col), value]
    row = exp.DPipe(
        this=exp.Anonymous(this="to_jsonb", expressions=[exp.column("t")]),
        expression=exp.Anonymous(this="jsonb_build_object", expressions=pairs),
        safe=True,
    )
    typed_null = cast_to(exp.null(), f"{schema}.{name}")
    record = exp.Lateral(
        this=exp.Anonymous(this="jsonb_populate_record", expressions=[typed_null, row]),
        alias=exp.TableAlias(this=exp.to_identifier("r")),
    )
    source = exp.table_(name, db=schema, alias="t")
    # OFFSET 0: planned on its own (few rows), never re-run inside the client's joins
    rewritten = exp.select("r.*").from_(source).join(record, join_type="CROSS").offset(0)
    keep = PASS_THROUGH.get((schema, name))
    if keep is None:
        return rewritten.where(where)
    cond = template(keep)
    same = exp.select("t.*").from_(source.copy()).where(exp.and_(where.copy(), cond.copy()))
    changed = rewritten.where(exp.and_(where, exp.not_(exp.paren(cond))))
    both = exp.union(same, changed.subquery(), distinct=False)
    return exp.select("*").from_(both.subquery("u")).offset(0)  # computed once, then joined

"""Catalog introspection (psql ``\\d``, drivers, ORMs, BI tools): check and rewrite the query so
that it shows only what the analyst may see and no statistic measured on the data.

``check_catalog_query(tree, policy, analyst)`` returns a new tree, safe to run upstream in a
read-only transaction:

* every catalog relation is replaced by a filtered derived table (``pg_catalog.pg_class`` becomes
  ``(SELECT ... FROM pg_catalog.pg_class AS t WHERE t.oid IN (SELECT oid FROM dpsql_vis_rel)) AS
  pg_class``), so whatever the client joins, hidden tables, their columns, indexes, constraints,
  comments, types and schemas (and the ``dpsql`` ledger schema) are absent;
* ``pg_class.reltuples/relpages/relallvisible`` are constants; ``pg_stats``, ``pg_statistic``,
  ``pg_stat_*`` and the like are empty; size and ``pg_stat_get_*`` functions return NULL;
* functions come from an allow list (:mod:`dpsql.catalog.rules`); those that take an object
  id (``pg_get_viewdef``, ``format_type``, casts to ``regclass`` ...) get NULL for hidden objects;
* user tables other than the policy's public ones are refused, as is anything that writes, locks
  or calls an unlisted function.

>>> import sqlglot
>>> from dpsql.policy.model import Policy
>>> q = sqlglot.parse_one("SELECT relname, reltuples FROM pg_class", read="postgres")
>>> sql = check_catalog_query(q, Policy(), "ann").sql("postgres")
>>> "CAST(-1 AS REAL) AS reltuples" in sql and "dpsql_vis_rel" in sql
True
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.scope import Scope, traverse_scope

from dpsql.catalog import function_rules, overrides, roles, rules
from dpsql.catalog.build import (
    attach_visibility,
    cast_target,
    cast_to,
    fill,
    filtered_relation,
    relation_filter,
    template,
)
from dpsql.catalog.functions import (
    SYSTEM_SCHEMAS,
    check_function,
    guard,
    ident_name,
    reg_element,
)
from dpsql.catalog.literals import check_untyped_literals
from dpsql.catalog.own_views import names_own_views, with_own_rows
from dpsql.catalog.regrole import pg_label
from dpsql.catalog.session_functions import (
    SessionInfo,
    activity_rows,
    replace_session_functions,
)
from dpsql.errors import PrivacyViolation, UnsupportedSql
from dpsql.policy.model import Policy


def check_catalog_query(
    tree: exp.Expr, policy: Policy, analyst: str, session: SessionInfo | None = None
) -> exp.Expr:
    """A rewritten copy of the catalog query ``tree`` that is safe to run upstream.

    Args:
        tree: the parsed statement (postgres dialect); never mutated.
        policy: the policy whose private and public tables the analyst may see.
        analyst: the analyst asking: the catalog shows one role, named so
            (:mod:`dpsql.catalog.roles`); its tables come with ``policy`` (its view).
        session: the client's database and process id, for ``current_database()``,
            ``pg_backend_pid()`` ... (:mod:`dpsql.catalog.session_functions`).

    Raises:
        PrivacyViolation: 42501, the query reads user data, a forbidden relation or function.
        UnsupportedSql: 0A000, not a read-only query dpsql can answer from the catalog.
    """
    query = tree.copy()
    _check_statement(query)
    check_untyped_literals(query)
    _keep_labels(query)  # first: the labels of what the client wrote
    if session is not None:
        replace_session_functions(query, session)
    _expand_reg_array_casts(query)
    cte_refs = _cte_references(query)
    tables = [t for t in query.find_all(exp.Table) if id(t) not in cte_refs]
    funcs = list(query.find_all(exp.Func))
    for node in funcs:
        check_function(node)
    _replace_tableoid(query)
    roles.replace_role_references(query, analyst)  # before dpsql's own SQL (it reads the real one)
    overridden = overrides.overridden_tables(query, tables)
    # psql's \d dpsql.history: dpsql's own views (own_views); a listing of schemas alone
    # (psql's \dn, SQLAlchemy's get_schema_names: pg_namespace and nothing else) lists their
    # schema too (newcomer25 #15), but no other catalog query gets its rows unnamed (a union in
    # a driver's recursive type query made asyncpg's 1.3 s -> 29.5 s)
    own = names_own_views(query) or (
        bool(tables) and all(t.name.lower() == "pg_namespace" for t in tables)
    )
    used = False
    for table in tables:
        if session is not None and session.activity and _is_activity(table):
            _activity_relation(table, session)
            continue
        used |= _rewrite_relation(table, policy, analyst, id(table) in overridden, own)
    for node in reversed([f for f in funcs if f.root() is query]):
        roles.guard_roles(node, analyst)
        used |= node.root() is query and guard(node)
    _strip_catalog_qualifiers(query)
    if used:
        attach_visibility(query, policy)
    return query


def is_catalog_query(tree: exp.Expr) -> bool:
    """True when ``tree`` touches the system catalog, so the engine should route it here.

    That is: it names a relation in ``pg_catalog``/``information_schema`` (or an unqualified
    ``pg_*`` relation), or it reads no relation but calls a catalog function or casts to an
    object-identifier type. Deliberately broad: :func:`check_catalog_query` then refuses what
    is not allowed, so a catalog relation never reaches a path that would run it unfiltered.
    """
    try:
        cte_refs = _cte_references(tree)
    except UnsupportedSql:
        return False
    tables = [
        t
        for t in tree.find_all(exp.Table)
        if id(t) not in cte_refs and not isinstance(t.this, exp.Func)
    ]
    if any(_is_system_relation(t) for t in tables):
        return True
    if tables:
        return False
    return any(_is_catalog_function(f) for f in tree.find_all(exp.Func))


def names_objects(tree: exp.Expr) -> bool:
    """True when ``tree`` calls a function or cast that takes an object name or id
    (``'t'::regclass``, ``has_table_privilege``, ``obj_description`` ...): such a query goes
    through the catalog checks even when it also reads a public table, or it would be an
    existence oracle (and read comments) for hidden tables."""
    if roles.role_references(tree):
        return True  # current_user & co: the analyst's name, never the upstream role's
    return any(
        _is_catalog_function(f)
        and not isinstance(f, (exp.CurrentSchema, exp.CurrentSchemas, exp.CurrentVersion))
        and not (isinstance(f, exp.Anonymous) and f.name.lower() in _HARMLESS)
        for f in tree.find_all(exp.Func)
    )


_HARMLESS = frozenset({"version", "pg_typeof", "pg_backend_pid", "pg_is_in_recovery"})


def _is_system_relation(table: exp.Table) -> bool:
    db, name = ident_name(table.args.get("db")), ident_name(table.this)
    return db in SYSTEM_SCHEMAS or (not db and name.startswith("pg_"))


_CATALOG_FUNCTION_PREFIXES = ("pg_", "has_", "obj_", "col_", "to_reg", "_pg_", "shobj_")
_CATALOG_FUNCTIONS = frozenset(
    {
        "version",
        "current_setting",
        "set_config",
        "format_type",
        "current_schemas",
        "ts_token_type",
        "getdatabaseencoding",
        "current_database",
    }  # fmt: skip
)


def _is_catalog_function(node: exp.Func) -> bool:
    if isinstance(node, exp.Cast):
        target = cast_target(node)
        acl = target.lstrip("_").split("[")[0] == "aclitem"  # reads role names
        return acl or target.startswith("reg") or reg_element(target) is not None
    if isinstance(node, (exp.CurrentSchema, exp.CurrentSchemas, exp.CurrentVersion)):
        return True
    if isinstance(node, (exp.CurrentDatabase, exp.CurrentCatalog)):
        return True  # the client's database (dpsql.catalog.session_functions)
    if not isinstance(node, exp.Anonymous):
        return False
    name = node.name.lower()
    return name in _CATALOG_FUNCTIONS or name.startswith(_CATALOG_FUNCTION_PREFIXES)


# -- statement shape --------------------------------------------------------------------------


def _check_statement(query: exp.Expr) -> None:
    if not isinstance(query, exp.Query):
        raise UnsupportedSql(
            f"a catalog query must be a SELECT, not {query.key.upper()}",
            hint="introspect with SELECT ... FROM pg_catalog / information_schema",
        )
    for node in query.walk():
        if isinstance(node, (exp.DML, exp.Command, exp.Create, exp.Drop, exp.Alter)):
            raise UnsupportedSql(
                "catalog queries are read-only",
                hint="dpsql never writes upstream; send only SELECT statements",
            )
        if isinstance(node, exp.Select) and (node.args.get("into") or node.args.get("locks")):
            raise UnsupportedSql(
                "SELECT INTO and FOR UPDATE/SHARE are not allowed in catalog queries",
                hint="remove the INTO / FOR UPDATE clause",
            )
        if isinstance(
            node, (exp.TableAlias, exp.CTE, exp.Identifier)
        ) and node.name.lower().startswith("dpsql_"):
            raise UnsupportedSql(
                f"names starting with dpsql_ are reserved: {node.name}",
                hint="rename the alias or CTE",
            )


def _cte_references(query: exp.Expr) -> set[int]:
    """ids of the Table nodes that name a CTE in scope (not a relation)."""
    refs: set[int] = set()
    try:
        scopes = traverse_scope(query)
    except OptimizeError as e:
        raise UnsupportedSql(
            f"can't resolve the query's scopes: {e}", hint="simplify the catalog query"
        ) from e
    for scope in scopes:
        for table in scope.tables:
            source = scope.sources.get(table.alias_or_name)
            if not table.db and isinstance(source, Scope) and table.name in scope.cte_sources:
                refs.add(id(table))
    return refs


# -- relations --------------------------------------------------------------------------------


def _catalog_name(table: exp.Table) -> tuple[str, str] | None:
    """(schema, name) when ``table`` is an allowed catalog relation, else None."""
    db, name = ident_name(table.args.get("db")), ident_name(table.this)
    if table.args.get("catalog"):
        return None
    if db in ("", "pg_catalog") and (
        name == "pg_class"
        or name in rules.CATALOG_FILTERS
        or name in rules.EMPTY_RELATIONS
        or name.startswith(rules.EMPTY_PREFIXES)
    ):
        return "pg_catalog", name
    if db == "information_schema" and name in rules.INFORMATION_SCHEMA_FILTERS:
        return "information_schema", name
    return None


def _is_activity(table: exp.Table) -> bool:
    return _catalog_name(table) == ("pg_catalog", "pg_stat_activity")


def _activity_relation(table: exp.Table, session: SessionInfo) -> None:
    """``pg_stat_activity`` as the rows of the analyst's own sessions on this dpsql process
    (:func:`dpsql.catalog.session_functions.activity_rows`), in its row type: never another
    analyst's session, nor an upstream backend."""
    alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier("pg_stat_activity"))
    rows = exp.Anonymous(
        this="jsonb_populate_recordset",
        expressions=[
            cast_to(exp.null(), "pg_catalog.pg_stat_activity"),
            cast_to(exp.Literal.string(activity_rows(session)), "JSONB"),
        ],
    )
    source = exp.Table(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r")))
    table.replace(exp.Subquery(this=exp.select("r.*").from_(source), alias=alias))


def _rewrite_relation(
    table: exp.Table, policy: Policy, analyst: str, overridden: bool, own: bool = False
) -> bool:
    """Replace a catalog relation by its filtered form; refuse other relations."""
    if isinstance(table.this, exp.Func):
        return False  # a set-returning function, checked with the functions
    found = _catalog_name(table)
    if found is None:
        db, name = ident_name(table.args.get("db")), ident_name(table.this)
        qualified = f"{db or 'public'}.{name}"
        if (
            db not in SYSTEM_SCHEMAS
            and not table.args.get("catalog")
            and policy.is_public(qualified)
        ):
            table.set("db", exp.to_identifier(db or "public"))
            return False
        if db in SYSTEM_SCHEMAS or name.startswith("pg_"):
            raise PrivacyViolation(
                f"catalog relation {db or 'pg_catalog'}.{name} is not available through dpsql",
                hint="introspect with pg_class, pg_attribute, pg_namespace, pg_type, "
                "information_schema.tables/columns ...",
            )
        raise PrivacyViolation(
            f"a catalog query can't read table {qualified}",
            hint="query private tables with aggregates in a separate statement; catalog "
            "queries may join only pg_catalog, information_schema and public tables",
        )
    schema, name = found
    alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name))
    sub: exp.Expr = (
        overrides.overridden_relation(schema, name, relation_filter(schema, name), analyst)
        if overridden
        else filtered_relation(schema, name)
    )
    if own and schema == "pg_catalog" and isinstance(sub, exp.Select):
        sub = with_own_rows(name, sub)
    table.replace(exp.Subquery(this=sub, alias=alias))
    return True


# Calls that dpsql replaces whole (by a CASE or a constant): PostgreSQL's column label is kept.
_REPLACED_CALLS = frozenset(
    {
        *function_rules.GUARDED_RESULTS, *function_rules.BLANKED_FUNCTIONS, "pg_describe_object",
        "current_setting", "to_regrole", "pg_get_userbyid", "pg_has_role",
    }
)  # fmt: skip


def _keep_labels(query: exp.Expr) -> None:
    """Alias the select-list items that dpsql replaces whole (``'t'::regclass``,
    ``to_regclass(...)``, ``pg_relation_size(...)`` ...) with the label PostgreSQL gives them,
    so that drivers reading columns by name find them."""
    for select in query.find_all(exp.Select):
        for item in select.expressions:
            call = item.expression if isinstance(item, exp.Dot) else item
            name = call.name.lower() if isinstance(call, exp.Anonymous) else ""
            replaced = name in _REPLACED_CALLS or (
                isinstance(call, exp.Cast)
                and cast_target(call) in (*function_rules.GUARDED_CASTS, "regrole")
            )
            if replaced and not isinstance(item, exp.Alias):
                alias = exp.Alias(alias=exp.to_identifier(pg_label(item), quoted=True))
                item.replace(alias)
                alias.set("this", item)  # moved, not copied: later passes hold its nodes


_ARRAY_CAST = (
    "CASE WHEN __x__ IS NULL THEN NULL ELSE ARRAY(SELECT CAST(dpsql_e.e AS __t__) "
    "FROM unnest(CAST(__x__ AS _oid)) WITH ORDINALITY AS dpsql_e(e, n) ORDER BY dpsql_e.n) END"
)


def _expand_reg_array_casts(query: exp.Expr) -> None:
    """``proargtypes::regtype[]`` (a catalog column of object ids; pgcli's function metadata)
    -> an array of element casts, each guarded like any ``x::regtype`` (NULL for a hidden
    object), in order, NULL for NULL. A constant array (``'{16398}'::regclass[]``) stays
    refused by :func:`~dpsql.catalog.functions.check_function`."""
    for cast in list(query.find_all(exp.Cast)):
        element = reg_element(cast_target(cast))
        if element not in function_rules.GUARDED_CASTS or not isinstance(cast.this, exp.Column):
            continue
        tree = fill(template(_ARRAY_CAST.replace("__t__", element.upper())),
                    {"__x__": cast.this})  # fmt: skip
        if isinstance(cast.parent, exp.Select) and cast.arg_key == "expressions":
            tree = exp.alias_(tree, pg_label(cast), quoted=True)  # PostgreSQL's label
        cast.replace(tree)


def _replace_tableoid(query: exp.Expr) -> None:
    """``c.tableoid`` of a catalog relation -> its oid (``'pg_catalog.pg_cast'::regclass``): a
    catalog is one table, and the filtered derived table that replaces it has no system column
    (psql joins ``pg_description`` on ``d.classoid = c.tableoid``)."""
    for scope in traverse_scope(query):
        for col in scope.columns:
            if col.name.lower() != "tableoid":
                continue
            source = _column_source(scope, col)
            if not isinstance(source, exp.Table):
                continue
            found = _catalog_name(source)
            if found is not None and not isinstance(source.this, exp.Func):
                name = exp.Literal.string(".".join(found))
                col.replace(cast_to(cast_to(name, "REGCLASS"), "OID"))


def _column_source(scope: Scope, col: exp.Column) -> exp.Table | Scope | None:
    """The relation a column reads, searching enclosing scopes (a correlated reference); an
    unqualified column only when its scope reads one relation."""
    current: Scope | None = scope
    while current is not None:
        if col.table:
            if col.table in current.sources:
                return current.sources[col.table]
        elif len(current.sources) == 1:
            return next(iter(current.sources.values()))
        current = current.parent
    return None


def _strip_catalog_qualifiers(query: exp.Expr) -> None:
    """``pg_catalog.pg_class.relname`` -> ``pg_class.relname`` (the derived table's alias)."""
    for col in query.find_all(exp.Column):
        if col.args.get("db") and ident_name(col.args.get("db")) in SYSTEM_SCHEMAS:
            col.set("db", None)
            col.set("catalog", None)

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
* functions come from an allow list (:mod:`dpsql.sql.catalog_rules`); those that take an object
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

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.scope import Scope, traverse_scope

from dpsql.errors import PrivacyViolation, UnsupportedSql
from dpsql.policy.model import Policy
from dpsql.sql import catalog_rules as rules
from dpsql.sql.catalog_sql import (
    att_visible,
    attach_visibility,
    cast_target,
    cast_to,
    filtered_relation,
    visible,
)

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")

# sqlglot's typed nodes for SQL constructs and plain functions that read nothing.
SAFE_NODES: frozenset[str] = frozenset(
    """
    And Or Not Xor Case If Cast Collate Coalesce Nullif Greatest Least Exists Any All
    Array ArrayAgg ArrayPosition ArraySize ArrayToString ArrayContains ArrayContainsAll
    ArrayOverlaps ArrayConcat ArrayAppend ArrayPrepend ArrayRemove ArrayFilter Unnest Explode
    ExplodingGenerateSeries GenerateSeries StringToArray Split SplitPart GroupConcat
    CurrentDatabase CurrentSchema CurrentSchemas CurrentUser SessionUser CurrentDate
    CurrentTime CurrentTimestamp Format Concat ConcatWs Substring Trim Upper Lower Length
    Replace Left Right Pad RegexpLike RegexpILike RegexpReplace RegexpExtract RegexpSplit
    StartsWith Count Min Max Sum Avg LogicalAnd LogicalOr RowNumber Rank DenseRank Abs Round
    Floor Ceil ToChar JSONObject JSONArray JSONArrayAgg JSONObjectAgg JSONBObjectAgg
    ParseJSON Extract Length Lag Lead First Last Distinct CurrentVersion
    """.split()
)

_OBJ_DESCRIPTION_KINDS = {
    "pg_class": "rel",
    "pg_namespace": "nsp",
    "pg_type": "type",
    "pg_proc": "proc",
    "pg_constraint": "con",
    "pg_trigger": "trigger",
    "pg_rewrite": "rule",
}
_OBJ_DESCRIPTION_FREE = frozenset(
    {"pg_database", "pg_tablespace", "pg_am", "pg_extension", "pg_language", "pg_collation"}
)


@dataclass(frozen=True)
class _Context:
    policy: Policy


def check_catalog_query(tree: exp.Expr, policy: Policy, analyst: str) -> exp.Expr:
    """A rewritten copy of the catalog query ``tree`` that is safe to run upstream.

    Args:
        tree: the parsed statement (postgres dialect); never mutated.
        policy: the policy whose private and public tables the analyst may see.
        analyst: the analyst asking (every analyst sees the same catalog for now).

    Raises:
        PrivacyViolation: 42501, the query reads user data, a forbidden relation or function.
        UnsupportedSql: 0A000, not a read-only query dpsql can answer from the catalog.
    """
    del analyst  # per-analyst visibility is not part of the policy model yet
    query = tree.copy()
    _check_statement(query)
    cte_refs = _cte_references(query)
    tables = [t for t in query.find_all(exp.Table) if id(t) not in cte_refs]
    funcs = list(query.find_all(exp.Func))
    for node in funcs:
        _check_function(node)
    used = False
    for table in tables:
        used |= _rewrite_relation(table, policy)
    for node in reversed([f for f in funcs if f.root() is query]):
        used |= _guard(node)
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


def _is_system_relation(table: exp.Table) -> bool:
    db, name = _ident_name(table.args.get("db")), _ident_name(table.this)
    return db in SYSTEM_SCHEMAS or (not db and name.startswith("pg_"))


_CATALOG_FUNCTION_PREFIXES = ("pg_", "has_", "obj_", "col_", "to_reg", "_pg_", "shobj_")
_CATALOG_FUNCTIONS = frozenset(
    {"version", "current_setting", "set_config", "format_type", "current_schemas"}
)


def _is_catalog_function(node: exp.Func) -> bool:
    if isinstance(node, exp.Cast):
        return cast_target(node).startswith("reg")
    if isinstance(node, (exp.CurrentSchema, exp.CurrentSchemas, exp.CurrentVersion)):
        return True
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


# -- functions and casts ----------------------------------------------------------------------


def _qualifier(node: exp.Expr) -> str | None:
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return (
            parent.this.sql("postgres").lower()
            if not isinstance(parent.this, exp.Identifier)
            else parent.this.name.lower()
        )
    if isinstance(parent, exp.Table) and parent.this is node:
        return parent.db.lower() or None
    return None


def _check_function(node: exp.Func) -> None:
    """Refuse unlisted functions; blank the data-measuring ones; emulate set_config."""
    qual = _qualifier(node)
    if qual is not None and qual not in SYSTEM_SCHEMAS:
        raise PrivacyViolation(
            f"function {qual}.{_display_name(node)} is not allowed in a catalog query",
            hint="catalog queries may call PostgreSQL's built-in catalog functions only",
        )
    if isinstance(node, exp.Cast):
        target = cast_target(node)
        kind = node.to.args.get("kind") if isinstance(node.to, exp.DataType) else None
        if isinstance(kind, exp.Dot) and _ident_name(kind.this) != "pg_catalog":
            raise PrivacyViolation(
                f"casts to {kind.sql('postgres')} are not allowed in a catalog query",
                hint="cast to built-in types only",
            )
        if (
            target.startswith("reg")
            and target not in set(rules.GUARDED_CASTS) | rules.ALLOWED_CASTS
        ):
            raise PrivacyViolation(f"casts to {target} are not allowed in a catalog query")
        return
    if not isinstance(node, exp.Anonymous):
        if type(node).__name__ not in SAFE_NODES:
            raise UnsupportedSql(
                f"function {_display_name(node)} is not allowed in a catalog query",
                hint="catalog queries may call the catalog and string/array functions "
                "that clients use (format_type, pg_get_expr, obj_description, ...)",
            )
        return
    name = node.name.lower()
    if name in rules.BLANKED_FUNCTIONS or name.startswith(rules.BLANKED_PREFIXES):
        _replace_call(node, cast_to(exp.null(), rules.BLANKED_FUNCTIONS.get(name, "BIGINT")))
    elif name == "set_config":
        _emulate_set_config(node)
    elif name == "current_setting":
        _check_current_setting(node)
    elif name == "obj_description":
        _obj_description_kind(node)
    elif name not in rules.ALLOWED_FUNCTIONS and name not in rules.GUARDED_FUNCTIONS:
        raise PrivacyViolation(
            f"function {name} is not allowed in a catalog query",
            hint="catalog queries may call the catalog and string/array functions that "
            "clients use (format_type, pg_get_expr, obj_description, has_table_privilege, ...)",
        )


def _call_with_qualifier(node: exp.Func) -> exp.Expr:
    """The call with its ``pg_catalog.`` qualifier (the Dot node) when it has one."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return parent
    return node


def _replace_call(node: exp.Func, new: exp.Expr) -> None:
    """Replace a function call, with its ``pg_catalog.`` qualifier if it has one."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        parent.replace(new)
    else:
        node.replace(new)


def _display_name(node: exp.Func) -> str:
    return node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()


def _literal_text(node: exp.Expr | None) -> str | None:
    """The text of a string literal, also under casts (``'jit'::text``, a bound ``$1::VARCHAR``)."""
    while isinstance(node, exp.Cast):
        node = node.this
    return node.name if isinstance(node, exp.Literal) and node.is_string else None


def _emulate_set_config(node: exp.Anonymous) -> None:
    args = node.expressions
    name = _literal_text(args[0]) if args else None
    if len(args) != 3 or name is None or name.lower() not in rules.EMULATED_SET_CONFIG:
        raise PrivacyViolation(
            "set_config() is not allowed in a catalog query",
            hint="change settings with SET; dpsql accepts SET for session settings",
        )
    _replace_call(node, cast_to(args[1], "TEXT"))


def _check_current_setting(node: exp.Anonymous) -> None:
    """Literal names are checked here; a bound name is checked upstream (NULL when denied)."""
    args = node.expressions
    if args and isinstance(args[0], (exp.Placeholder, exp.Parameter, exp.Cast)):
        inner = args[0].this if isinstance(args[0], exp.Cast) else args[0]
        if isinstance(inner, (exp.Placeholder, exp.Parameter)):
            lowered = exp.Lower(this=cast_to(args[0].copy(), "TEXT"))
            denied = exp.or_(
                *(
                    exp.Like(this=lowered.copy(), expression=exp.Literal.string(f"%{w}%"))
                    for w in rules.DENIED_SETTING_WORDS
                )
            )
            call = _call_with_qualifier(node).copy()
            _replace_call(node, exp.Case(ifs=[exp.If(this=exp.not_(exp.paren(denied)), true=call)]))
            return
    inner = args[0] if args else None
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, exp.Null):
        return  # a parameter described before it is bound: current_setting(NULL) is NULL
    name = _literal_text(args[0]) if args else None
    if name is None or any(w in name.lower() for w in rules.DENIED_SETTING_WORDS):
        raise PrivacyViolation(
            f"current_setting({args[0].sql('postgres') if args else ''}) is not allowed",
            hint="read ordinary settings by their literal name, e.g. current_setting('TimeZone')",
        )


def _obj_description_kind(node: exp.Anonymous) -> str | None:
    args = node.expressions
    if len(args) == 1:
        return "rel"
    inner = args[1]
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, (exp.Placeholder, exp.Parameter, exp.Null)):
        return "any"  # the catalog is bound later: the object must be a visible one of any kind
    catalog = (_literal_text(args[1]) or "").lower().removeprefix("pg_catalog.")
    if catalog in _OBJ_DESCRIPTION_KINDS:
        return _OBJ_DESCRIPTION_KINDS[catalog]
    if catalog in _OBJ_DESCRIPTION_FREE:
        return None
    raise PrivacyViolation(
        "obj_description() needs a literal catalog name such as 'pg_class'",
        hint="call obj_description(oid, 'pg_class')",
    )


def _guard(node: exp.Func) -> bool:
    """Make object-id arguments NULL unless the object is visible; True when a guard was added."""
    if isinstance(node, exp.Cast):
        kind = rules.GUARDED_CASTS.get(cast_target(node))
        if kind is None:
            return False
        guarded = exp.Case(ifs=[exp.If(this=visible(kind, node.copy()), true=node.copy())])
        node.replace(guarded)
        return True
    if not isinstance(node, exp.Anonymous):
        return False
    name = node.name.lower()
    if name in rules.GUARDED_RESULTS:
        kind = rules.GUARDED_RESULTS[name]
        call = _call_with_qualifier(node)
        guarded = exp.Case(ifs=[exp.If(this=visible(kind, call.copy()), true=call.copy())])
        call.replace(guarded)
        return True
    if name == "obj_description":
        kind = _obj_description_kind(node)
        index = 0
    elif name in rules.GUARDED_FUNCTIONS:
        index, kind = rules.GUARDED_FUNCTIONS[name]
    else:
        return False
    args = node.expressions
    if kind is None or index >= len(args):
        return False
    arg = args[index]
    cond = visible(kind, arg.copy())
    if name == "col_description" and len(args) > 1:
        cond = exp.and_(cond, att_visible(arg.copy(), args[1].copy()))
    then = cast_to(arg.copy(), rules.KIND_TYPE[kind])
    arg.replace(exp.Case(ifs=[exp.If(this=cond, true=then)]))
    return True


# -- relations --------------------------------------------------------------------------------


def _ident_name(node: exp.Expr | None) -> str:
    if node is None:
        return ""
    if isinstance(node, exp.Identifier):
        text = str(node.this)
        return text if node.quoted else text.lower()
    return str(node.name).lower()


def _catalog_name(table: exp.Table) -> tuple[str, str] | None:
    """(schema, name) when ``table`` is an allowed catalog relation, else None."""
    db, name = _ident_name(table.args.get("db")), _ident_name(table.this)
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


def _rewrite_relation(table: exp.Table, policy: Policy) -> bool:
    """Replace a catalog relation by its filtered form; refuse other relations."""
    if isinstance(table.this, exp.Func):
        return False  # a set-returning function, checked with the functions
    found = _catalog_name(table)
    if found is None:
        db, name = _ident_name(table.args.get("db")), _ident_name(table.this)
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
    table.replace(exp.Subquery(this=filtered_relation(schema, name), alias=alias))
    return True


def _strip_catalog_qualifiers(query: exp.Expr) -> None:
    """``pg_catalog.pg_class.relname`` -> ``pg_class.relname`` (the derived table's alias)."""
    for col in query.find_all(exp.Column):
        if col.args.get("db") and _ident_name(col.args.get("db")) in SYSTEM_SCHEMAS:
            col.set("db", None)
            col.set("catalog", None)

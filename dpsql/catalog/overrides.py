"""Catalog columns that dpsql replaces, whatever relation the client reads them through.

A catalog relation listed in :data:`OVERRIDES` is read as ``jsonb_populate_record(row ||
overrides)``, which keeps every column (whatever the PostgreSQL version) in its order and type,
with these values replaced (``t`` is the relation's row, ``__analyst__`` the analyst's name):

* role names and access-control lists (see :mod:`dpsql.catalog.roles`): the analyst's one
  role in ``pg_roles``/``pg_user``, owners and grantees as the analyst, ACLs NULL;
* definitions that name hidden objects (view definitions, column and domain defaults; see
  ``named_deps`` in :mod:`dpsql.catalog.rules`) and the source of user functions: NULL.

Only the references whose replaced columns the client may read are rewritten so
(:func:`overridden_tables`); the others read the plain filtered relation, which plans better.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.catalog.build import cast_to, fill, template
from dpsql.catalog.functions import ident_name
from dpsql.catalog.roles import analyst_name

# a tuple, not a set: the rewritten SQL lists them in this order whatever PYTHONHASHSEED is
_NOBODY = ("rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication", "rolbypassrls")
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
    # NATURAL JOIN and USING compare columns without naming them as columns: a plain
    # pg_roles.rolname would meet the client's value there
    joins = list(query.find_all(exp.Join))
    implicit = any(j.args.get("method") or j.args.get("using") for j in joins)
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

        if implicit or any(isinstance(p, exp.Select) for p in stars) or any(map(reads, columns)):
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

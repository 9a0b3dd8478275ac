"""What a catalog query may read, as data: relations, functions, casts and their filters.

Everything not listed here is refused (default deny). The SQL below is constant text written by
dpsql (never by an analyst); :mod:`dpsql.catalog.check` parses it once with sqlglot and fills in the
policy's table and column names as literals through sqlglot builders.

Visibility is computed upstream, per query, by the CTEs of :mod:`dpsql.catalog.visibility`.
"""

from __future__ import annotations

# The function and cast rules live in their own module; re-exported for ``rules.X`` users.
from dpsql.catalog.function_rules import (  # noqa: F401
    ALLOWED_CASTS,
    ALLOWED_FUNCTIONS,
    ALLOWED_SETTINGS,
    BLANKED_FUNCTIONS,
    BLANKED_PREFIXES,
    DENIED_SETTING_WORDS,
    DENIED_SETTINGS,
    EMULATED_SET_CONFIG,
    GUARDED_CASTS,
    GUARDED_FUNCTIONS,
    GUARDED_RESULTS,
    PRIVILEGE_ARGS,
    REFUSED_FUNCTIONS,
    REG_COLUMNS,
)
from dpsql.catalog.objects import (
    HIDDEN_CATALOGS,
    OBJECT_FILTERS,
    PROC_BY_SPECIFIC_NAME,
    PROC_FILTER,
    ROW_FILTERS,
    description_filter,
    visible_set,
)
from dpsql.catalog.visibility import VISIBILITY_CTES  # noqa: F401

# Predicates over one object id, keyed by kind (``__x__`` is the guarded expression).
VISIBLE: dict[str, str] = {
    "rel": "__x__ IN (SELECT oid FROM dpsql_vis_rel)",
    "nsp": "__x__ IN (SELECT oid FROM dpsql_vis_nsp)",
    "type": "__x__ IN (SELECT oid FROM dpsql_vis_type)",
    "con": "__x__ IN (SELECT vk.oid FROM __pg_constraint__ AS vk)",
    "trigger": "__x__ IN (SELECT vt.oid FROM __pg_trigger__ AS vt)",
    "rule": "__x__ IN (SELECT vr.oid FROM __pg_rewrite__ AS vr)",
    # an index whose definition names nothing hidden (dpsql_vis_rel leaves out the others)
    "index": "__x__ IN (SELECT oid FROM dpsql_vis_rel)",
    # a view whose definition (its rules) mentions only visible relations, columns, functions
    "view": "__x__ IN (SELECT oid FROM dpsql_vis_rel) AND NOT EXISTS (SELECT 1 FROM "
    "pg_catalog.pg_rewrite AS rw WHERE rw.ev_class = __x__ "
    "AND NOT dpsql_named_deps('pg_catalog.pg_rewrite', rw.oid))",
    # a function whose source is shown: PostgreSQL's own (a user function's body is opaque
    # text that may name hidden tables or hold data)
    "body": "__x__ IN (SELECT t.oid FROM pg_catalog.pg_proc AS t "
    "JOIN pg_catalog.pg_namespace AS n ON n.oid = t.pronamespace "
    "WHERE n.nspname IN ('pg_catalog', 'information_schema'))",
    "stx": "__x__ IN (SELECT vs.oid FROM __pg_statistic_ext__ AS vs)",
    "proc": f"__x__ IN (SELECT t.oid FROM pg_catalog.pg_proc AS t WHERE {PROC_FILTER})",
    # objects of other catalogs (operators, collations, casts ...: catalog_objects)
    **{c: f"__x__ IN ({visible_set(c)})" for c in OBJECT_FILTERS},
    "none": "FALSE",  # a catalog with no object the analyst sees (e.g. pg_largeobject)
    # an object id whose catalog is only known at run time (a bound parameter)
    "any": "(__x__ IN (SELECT oid FROM dpsql_vis_rel) OR __x__ IN (SELECT oid FROM dpsql_vis_nsp) "
    "OR __x__ IN (SELECT oid FROM dpsql_vis_type))",
}

# The SQL type an object id is cast to before it is compared (so text names work as well).
KIND_TYPE: dict[str, str] = {
    **dict.fromkeys(OBJECT_FILTERS, "OID"),
    "none": "OID",
    "rel": "REGCLASS",
    "nsp": "REGNAMESPACE",
    "type": "REGTYPE",
    "con": "OID",
    "trigger": "OID",
    "rule": "OID",
    "view": "REGCLASS",
    "index": "REGCLASS",
    "body": "OID",
    "stx": "OID",
    "proc": "OID",
    "any": "OID",
}

_ATT_VISIBLE = (
    "NOT EXISTS (SELECT 1 FROM dpsql_hidden_att AS h WHERE h.attrelid = {rel} AND h.attnum = {num})"
)

# pg_catalog relations (tables and views) a catalog query may read, with the row filter applied
# to them (``t`` is the relation). "TRUE" means all rows are metadata that reveals nothing.
CATALOG_FILTERS: dict[str, str] = {
    "pg_attribute": "t.attrelid IN (SELECT oid FROM dpsql_vis_rel) AND "
    + _ATT_VISIBLE.format(rel="t.attrelid", num="t.attnum"),
    "pg_attrdef": "t.adrelid IN (SELECT oid FROM dpsql_vis_rel) AND "
    + _ATT_VISIBLE.format(rel="t.adrelid", num="t.adnum")
    + " AND dpsql_named_deps('pg_catalog.pg_attrdef', t.oid)"
    + " AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS x JOIN dpsql_hidden_att AS h "
    "ON h.attrelid = x.refobjid AND h.attnum = x.refobjsubid "
    "WHERE x.classid = CAST('pg_catalog.pg_attrdef' AS REGCLASS) AND x.objid = t.oid)",
    "pg_index": "t.indrelid IN (SELECT oid FROM dpsql_vis_rel) "
    "AND t.indexrelid IN (SELECT oid FROM dpsql_vis_rel)",
    "pg_constraint": "(t.conrelid = 0 OR t.conrelid IN (SELECT oid FROM dpsql_vis_rel)) "
    "AND (t.confrelid = 0 OR t.confrelid IN (SELECT oid FROM dpsql_vis_rel)) "
    "AND (t.contypid = 0 OR t.contypid IN (SELECT oid FROM dpsql_vis_type)) "
    "AND t.connamespace IN (SELECT oid FROM dpsql_vis_nsp) "
    "AND NOT EXISTS (SELECT 1 FROM dpsql_hidden_att AS h WHERE "
    "(h.attrelid = t.conrelid AND h.attnum = ANY(t.conkey)) "
    "OR (h.attrelid = t.confrelid AND h.attnum = ANY(t.confkey))) "
    "AND dpsql_named_deps('pg_catalog.pg_constraint', t.oid)",
    "pg_description": description_filter(),
    "pg_depend": "(t.classid <> CAST('pg_catalog.pg_class' AS REGCLASS) "
    "OR t.objid IN (SELECT oid FROM dpsql_vis_rel)) "
    "AND (t.refclassid <> CAST('pg_catalog.pg_class' AS REGCLASS) "
    "OR t.refobjid IN (SELECT oid FROM dpsql_vis_rel))",
    "pg_inherits": "t.inhrelid IN (SELECT oid FROM dpsql_vis_rel) "
    "AND t.inhparent IN (SELECT oid FROM dpsql_vis_rel)",
    "pg_trigger": "t.tgrelid IN (SELECT oid FROM dpsql_vis_rel) "
    "AND dpsql_named_deps('pg_catalog.pg_trigger', t.oid)",
    "pg_rewrite": "t.ev_class IN (SELECT oid FROM dpsql_vis_rel) "
    "AND dpsql_named_deps('pg_catalog.pg_rewrite', t.oid)",
    "pg_policy": "t.polrelid IN (SELECT oid FROM dpsql_vis_rel) "
    "AND dpsql_named_deps('pg_catalog.pg_policy', t.oid)",
    "pg_sequence": "t.seqrelid IN (SELECT oid FROM dpsql_vis_rel)",
    "pg_statistic_ext": "t.stxrelid IN (SELECT oid FROM dpsql_vis_rel) AND NOT EXISTS "
    "(SELECT 1 FROM dpsql_hidden_att AS h WHERE h.attrelid = t.stxrelid "
    "AND h.attnum = ANY(CAST(t.stxkeys AS SMALLINT[])))",
    "pg_partitioned_table": "t.partrelid IN (SELECT oid FROM dpsql_vis_rel)",
    "pg_foreign_table": "t.ftrelid IN (SELECT oid FROM dpsql_vis_rel)",
    "pg_publication_rel": "t.prrelid IN (SELECT oid FROM dpsql_vis_rel)",
    "pg_publication_namespace": "t.pnnspid IN (SELECT oid FROM dpsql_vis_nsp)",
    "pg_namespace": "t.oid IN (SELECT oid FROM dpsql_vis_nsp)",
    "pg_type": "t.oid IN (SELECT oid FROM dpsql_vis_type)",
    "pg_enum": "t.enumtypid IN (SELECT oid FROM dpsql_vis_type)",
    "pg_range": "t.rngtypid IN (SELECT oid FROM dpsql_vis_type)",
    "pg_proc": PROC_FILTER,
    "pg_roles": "t.rolname = current_user",  # the analyst's one role (catalog_roles)
    "pg_user": "t.usename = current_user",
    "pg_auth_members": "FALSE",
    "pg_default_acl": "FALSE",
    "pg_shdescription": "(t.classoid = CAST('pg_catalog.pg_database' AS REGCLASS) AND t.objoid = "
    "(SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())) "
    "OR t.classoid = CAST('pg_catalog.pg_tablespace' AS REGCLASS)",
    "pg_settings": "NOT (t.name LIKE '%file%' OR t.name LIKE '%director%' "
    "OR t.name LIKE '%command%' OR t.name LIKE '%path%' AND t.name <> 'search_path' "
    "OR t.name LIKE 'dpsql.%' OR t.name LIKE 'ssl%' OR t.name LIKE '%conninfo%' "
    "OR t.name LIKE '%password%' OR t.name LIKE '%passphrase%' OR t.name LIKE '%secret%')",
    "pg_tables": "dpsql_named_rel(t.schemaname, t.tablename)",
    "pg_views": "dpsql_named_rel(t.schemaname, t.viewname)",
    "pg_matviews": "dpsql_named_rel(t.schemaname, t.matviewname)",
    "pg_policies": "dpsql_named_rel(t.schemaname, t.tablename) AND EXISTS (SELECT 1 FROM "
    "__pg_policy__ AS vp WHERE vp.polname = t.policyname AND vp.polrelid = "
    "to_regclass(quote_ident(t.schemaname) || '.' || quote_ident(t.tablename)))",
    "pg_indexes": "dpsql_named_rel(t.schemaname, t.tablename) "
    "AND dpsql_named_rel(t.schemaname, t.indexname)",
    **OBJECT_FILTERS,
    **ROW_FILTERS,
    **dict.fromkeys(HIDDEN_CATALOGS, "FALSE"),
    **dict.fromkeys(
        (
            "pg_available_extensions",
            "pg_available_extension_versions",
            "pg_timezone_names",
            "pg_timezone_abbrevs",
        ),
        "TRUE",
    ),  # fmt: skip
}

# Relations whose rows are statistics about the data (or other sessions' activity): they are
# replaced by an empty relation of the same shape, so clients keep working and learn nothing.
EMPTY_RELATIONS = frozenset(
    {
        "pg_stats",
        "pg_stats_ext",
        "pg_stats_ext_exprs",
        "pg_statistic",
        "pg_statistic_ext_data",
        "pg_sequences",
        "pg_locks",
        "pg_prepared_statements",
        "pg_prepared_xacts",
        "pg_cursors",
    }
)
EMPTY_PREFIXES = ("pg_stat_", "pg_statio_")

# pg_class is exposed with an explicit column list (PostgreSQL 12-17): the size estimates that
# ANALYZE writes from the data are constants, and columns added by later versions stay unseen.
PG_CLASS_COLUMNS: tuple[str, ...] = tuple(
    (
        "oid relname relnamespace reltype reloftype relowner relam relfilenode reltablespace "
        "relpages reltuples relallvisible reltoastrelid relhasindex relisshared relpersistence "
        "relkind relnatts relchecks relhasrules relhastriggers relhassubclass relrowsecurity "
        "relforcerowsecurity relispopulated relreplident relispartition relrewrite relfrozenxid "
        "relminmxid relacl reloptions relpartbound"
    ).split()
)
PG_CLASS_BLANKED: dict[str, str] = {
    "reltuples": "CAST(-1 AS REAL)",
    "relacl": "CAST(NULL AS ACLITEM[])",  # prints role names
    "relpages": "CAST(0 AS INT)",
    "relallvisible": "CAST(0 AS INT)",
}

_NAMED = "dpsql_named_rel({s}, {n})"
_NAMED_COL = "dpsql_named_att({s}, {n}, {c})"
_NSP = "dpsql_named_nsp({s})"
_CON = "dpsql_named_con({s}, {n})"
# the columns most information_schema views name their object by
_TABLE = _NAMED.format(s="t.table_schema", n="t.table_name")
_COLUMN = _NAMED_COL.format(s="t.table_schema", n="t.table_name", c="t.column_name")
_CONSTRAINT = _CON.format(s="t.constraint_schema", n="t.constraint_name")

# information_schema views a catalog query may read, with their row filter.
INFORMATION_SCHEMA_FILTERS: dict[str, str] = {
    "tables": _TABLE,
    "views": _TABLE,
    "columns": _COLUMN,
    "column_privileges": _COLUMN,
    "column_udt_usage": _COLUMN,
    "key_column_usage": f"{_COLUMN} AND {_CONSTRAINT}",
    "constraint_column_usage": f"{_COLUMN} AND {_CONSTRAINT}",
    "constraint_table_usage": _TABLE,
    "table_constraints": f"{_TABLE} AND {_CONSTRAINT}",
    "table_privileges": _TABLE,
    "role_table_grants": _TABLE,
    "triggers": _NAMED.format(s="t.event_object_schema", n="t.event_object_table")
    + " AND EXISTS (SELECT 1 FROM __pg_trigger__ AS vt WHERE vt.tgname = t.trigger_name "
    "AND vt.tgrelid = to_regclass(quote_ident(t.event_object_schema) || '.' || "
    "quote_ident(t.event_object_table)))",
    "sequences": _NAMED.format(s="t.sequence_schema", n="t.sequence_name"),
    "view_table_usage": _NAMED.format(s="t.view_schema", n="t.view_name") + " AND " + _TABLE,
    "referential_constraints": _CONSTRAINT,
    "check_constraints": _CONSTRAINT,
    "schemata": _NSP.format(s="t.schema_name"),
    "routines": _NSP.format(s="t.routine_schema") + " AND " + PROC_BY_SPECIFIC_NAME,
    "parameters": _NSP.format(s="t.specific_schema") + " AND " + PROC_BY_SPECIFIC_NAME,
    "domains": _NSP.format(s="t.domain_schema"),
    "enabled_roles": "t.role_name = current_user",  # the analyst's one role (catalog_roles)
    "applicable_roles": "FALSE",
    **dict.fromkeys(
        (
            "character_sets",
            "collations",
            "collation_character_set_applicability",
            "information_schema_catalog_name",
            "sql_features",
            "sql_implementation_info",
            "sql_parts",
            "sql_sizing",
        ),
        "TRUE",
    ),
}

# Templates for the name-based predicates used above (views that show names, not oids).
NAMED_PREDICATES: dict[str, str] = {
    "named_rel": "EXISTS (SELECT 1 FROM pg_catalog.pg_class AS vc "
    "JOIN pg_catalog.pg_namespace AS vn ON vn.oid = vc.relnamespace "
    "WHERE vn.nspname = __1__ AND vc.relname = __2__ "
    "AND vc.oid IN (SELECT oid FROM dpsql_vis_rel))",
    "named_att": "EXISTS (SELECT 1 FROM pg_catalog.pg_class AS vc "
    "JOIN pg_catalog.pg_namespace AS vn ON vn.oid = vc.relnamespace "
    "JOIN pg_catalog.pg_attribute AS va ON va.attrelid = vc.oid "
    "WHERE vn.nspname = __1__ AND vc.relname = __2__ AND va.attname = __3__ "
    "AND vc.oid IN (SELECT oid FROM dpsql_vis_rel) AND NOT EXISTS "
    "(SELECT 1 FROM dpsql_hidden_att AS h WHERE h.attrelid = va.attrelid "
    "AND h.attnum = va.attnum))",
    "named_nsp": "__1__ IN (SELECT vn.nspname FROM pg_catalog.pg_namespace AS vn "
    "WHERE vn.oid IN (SELECT oid FROM dpsql_vis_nsp))",
    # every dependency of an object (class __1__, id __2__) is visible: its definition (a view's
    # rule, a default, a check, a trigger, a policy, an index) names nothing hidden
    "named_deps": "NOT EXISTS (SELECT 1 FROM dpsql_hidden_dep AS hd "
    "WHERE hd.classid = CAST(__1__ AS REGCLASS) AND hd.objid = __2__)",
    "named_con": "EXISTS (SELECT 1 FROM __pg_constraint__ AS vk "
    "JOIN pg_catalog.pg_namespace AS vn ON vn.oid = vk.connamespace "
    "WHERE vn.nspname = __1__ AND vk.conname = __2__)",
}

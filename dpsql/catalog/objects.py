"""Which objects of each catalog an analyst sees, beyond relations, schemas and types.

One rule, applied to every catalog: an object is visible when it lives in a visible schema
(``dpsql_vis_nsp``) and its definition names nothing hidden (``dpsql_hidden_dep``: a hidden
relation, column, type, or a function, operator, collation ... in a hidden schema). Cluster-wide
objects without a schema (casts, access methods, languages, foreign-data wrappers, event
triggers, transforms) follow the second half. Owners read as the analyst everywhere
(``pg_get_userbyid``, :mod:`dpsql.catalog.roles`).

Objects that are about other roles or hold connection details are absent: user mappings (their
options hold passwords), subscriptions (``subconninfo``), per-role settings
(``pg_db_role_setting``), large objects (data outside the policy); a foreign server is listed
only when a visible foreign table uses it.

:data:`OBJECT_FILTERS` is the row filter of each catalog (over its alias ``t``); the same
filter decides ``obj_description(oid, 'pg_x')``, the rows of ``pg_description`` and
``pg_describe_object`` (via :func:`visible_set`).
"""

from __future__ import annotations


def _deps(catalog: str) -> str:
    return (
        "NOT t.oid IN (SELECT hd.objid FROM dpsql_hidden_dep AS hd "
        f"WHERE hd.classid = CAST('pg_catalog.{catalog}' AS REGCLASS))"
    )


def _in_schema(column: str, catalog: str) -> str:
    return f"t.{column} IN (SELECT oid FROM dpsql_vis_nsp) AND {_deps(catalog)}"


# Functions: in a visible schema, with no hidden type in their signature (a function's
# arguments and result print with their types' schemas).
PROC_FILTER = "t.pronamespace IN (SELECT oid FROM dpsql_vis_nsp) AND " + _deps("pg_proc")
# information_schema.routines/parameters: the function is the number that ends specific_name
PROC_BY_SPECIFIC_NAME = (
    "CAST(substring(t.specific_name FROM '_([0-9]+)$') AS OID) IN "
    f"(SELECT t.oid FROM pg_catalog.pg_proc AS t WHERE {PROC_FILTER})"
)

# Row filters of catalogs whose rows are objects with an oid (``t`` is the catalog's row).
OBJECT_FILTERS: dict[str, str] = {
    "pg_operator": _in_schema("oprnamespace", "pg_operator"),
    "pg_collation": _in_schema("collnamespace", "pg_collation"),
    "pg_conversion": _in_schema("connamespace", "pg_conversion"),
    "pg_opclass": _in_schema("opcnamespace", "pg_opclass"),
    "pg_opfamily": _in_schema("opfnamespace", "pg_opfamily"),
    "pg_ts_config": _in_schema("cfgnamespace", "pg_ts_config"),
    "pg_ts_dict": _in_schema("dictnamespace", "pg_ts_dict"),
    "pg_ts_parser": _in_schema("prsnamespace", "pg_ts_parser"),
    "pg_ts_template": _in_schema("tmplnamespace", "pg_ts_template"),
    "pg_amop": _deps("pg_amop"),
    "pg_amproc": _deps("pg_amproc"),
    "pg_cast": _deps("pg_cast"),
    "pg_am": _deps("pg_am"),
    "pg_language": _deps("pg_language"),
    "pg_transform": _deps("pg_transform"),
    "pg_event_trigger": _deps("pg_event_trigger"),
    "pg_foreign_data_wrapper": _deps("pg_foreign_data_wrapper"),
    "pg_foreign_server": "t.oid IN (SELECT ft.ftserver FROM pg_catalog.pg_foreign_table AS ft "
    "WHERE ft.ftrelid IN (SELECT oid FROM dpsql_vis_rel))",
    "pg_extension": "t.extnamespace IN (SELECT oid FROM dpsql_vis_nsp)",
    "pg_publication": "TRUE",
    "pg_tablespace": "TRUE",
    "pg_database": "t.datname = current_database()",
}

# Catalogs without an oid of their own: visible when what they point at is.
ROW_FILTERS: dict[str, str] = {
    "pg_aggregate": f"t.aggfnoid IN (SELECT t.oid FROM pg_catalog.pg_proc AS t WHERE {PROC_FILTER})",
    "pg_ts_config_map": "t.mapcfg IN (SELECT c.oid FROM pg_catalog.pg_ts_config AS c "
    "WHERE c.cfgnamespace IN (SELECT oid FROM dpsql_vis_nsp)) "
    "AND t.mapdict IN (SELECT d.oid FROM pg_catalog.pg_ts_dict AS d "
    "WHERE d.dictnamespace IN (SELECT oid FROM dpsql_vis_nsp))",
    "pg_publication_tables": "dpsql_named_rel(t.schemaname, t.tablename)",
}

# Catalogs shown empty (the same columns, no rows), read without privileges on them: some are
# readable by superusers only (pg_user_mapping, pg_subscription's conninfo).
HIDDEN_CATALOGS = frozenset(
    {
        "pg_user_mapping",
        "pg_user_mappings",
        "pg_subscription",
        "pg_subscription_rel",
        "pg_db_role_setting",
        "pg_largeobject_metadata",
        "pg_init_privs",
        "pg_seclabel",
        "pg_shseclabel",
        "pg_seclabels",
        "pg_replication_origin",
        "pg_parameter_acl",
    }
)

# Catalogs whose objects carry their own visibility rule elsewhere (``__x__`` an oid).
_OTHER_SETS: dict[str, str] = {
    "pg_class": "SELECT oid FROM dpsql_vis_rel",
    "pg_namespace": "SELECT oid FROM dpsql_vis_nsp",
    "pg_type": "SELECT oid FROM dpsql_vis_type",
    "pg_proc": f"SELECT t.oid FROM pg_catalog.pg_proc AS t WHERE {PROC_FILTER}",
    "pg_constraint": "SELECT vk.oid FROM __pg_constraint__ AS vk",
    "pg_trigger": "SELECT vt.oid FROM __pg_trigger__ AS vt",
    "pg_rewrite": "SELECT vr.oid FROM __pg_rewrite__ AS vr",
    "pg_policy": "SELECT vp.oid FROM __pg_policy__ AS vp",
    "pg_statistic_ext": "SELECT vs.oid FROM __pg_statistic_ext__ AS vs",
}


def visible_set(catalog: str) -> str | None:
    """``SELECT oid ...``: the visible objects of ``catalog``, or None if it has no objects
    an analyst sees (a hidden catalog, or one dpsql does not know)."""
    if catalog in _OTHER_SETS:
        return _OTHER_SETS[catalog]
    if catalog in OBJECT_FILTERS:
        return f"SELECT t.oid FROM pg_catalog.{catalog} AS t WHERE {OBJECT_FILTERS[catalog]}"
    return None


def description_filter() -> str:
    """``pg_description``'s row filter (over ``t``): comments on visible objects only; for a
    relation also its visible columns."""
    parts = [
        "(t.classoid = CAST('pg_catalog.pg_class' AS REGCLASS) "
        "AND t.objoid IN (SELECT oid FROM dpsql_vis_rel) AND NOT EXISTS (SELECT 1 FROM "
        "dpsql_hidden_att AS h WHERE h.attrelid = t.objoid AND h.attnum = t.objsubid))"
    ]
    for catalog in (*_OTHER_SETS, *OBJECT_FILTERS):
        if catalog == "pg_class" or catalog == "pg_database":
            continue
        found = visible_set(catalog)
        assert found is not None
        parts.append(
            f"(t.classoid = CAST('pg_catalog.{catalog}' AS REGCLASS) AND t.objoid IN ({found}))"
        )
    return " OR ".join(parts)


def describe_guard() -> str:
    """A predicate over ``__1__`` (a catalog id) and ``__2__`` (an object id): the object is
    visible (for ``pg_describe_object``: NULL otherwise, as for a missing object)."""
    arms = " ".join(
        f"WHEN CAST('pg_catalog.{c}' AS REGCLASS) THEN __2__ IN ({visible_set(c)})"
        for c in (*_OTHER_SETS, *OBJECT_FILTERS)
    )
    return f"CASE CAST(__1__ AS OID) {arms} ELSE FALSE END"

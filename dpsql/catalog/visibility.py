"""The visibility CTEs every rewritten catalog query starts with (names start with ``dpsql_``).

Computed upstream, per query; PostgreSQL computes only those the query reads:

* ``dpsql_vis_table``: the policy's private and public tables (``to_regclass`` of each name);
* ``dpsql_hidden_att``: the columns of private tables that the policy does not declare;
* ``dpsql_vis_nsp``: ``pg_catalog``, ``information_schema``, ``public`` and the schemas of
  visible tables (never the ``dpsql`` ledger schema unless a visible table lives there);
* ``dpsql_hidden_index``: indexes of visible tables whose definition names a hidden object (a
  function, type, operator, collation, operator class ... in a hidden schema);
* ``dpsql_vis_rel``: system relations, the visible tables, their indexes (not on hidden columns,
  not in ``dpsql_hidden_index``) and the sequences they own;
* ``dpsql_vis_type``: types in visible schemas that are not row types of hidden relations;
* ``dpsql_hidden_dep``: objects (any class) whose definition depends on a hidden relation,
  column, type or schema, or on a function, operator, collation, operator class or family, or
  text search configuration or dictionary in a hidden schema (``pg_depend``).

A definition's references are checked with hashed subplans over each catalog, except for the few
dependencies of visible tables' indexes (looked up by id; per-row subplans over all of pg_depend
would inflate cost estimates past PostgreSQL's JIT threshold).
"""

from __future__ import annotations

_CLASS = "CAST('pg_catalog.pg_class' AS REGCLASS)"
_VIS_NSP = "(SELECT oid FROM dpsql_vis_nsp)"

# The schema-qualified catalogs a definition can name besides relations and types (functions,
# operators, collations, operator classes and families, text search configurations and
# dictionaries), with their namespace column.
_NAMESPACED = (
    ("pg_proc", "pronamespace"),
    ("pg_operator", "oprnamespace"),
    ("pg_collation", "collnamespace"),
    ("pg_opclass", "opcnamespace"),
    ("pg_opfamily", "opfnamespace"),
    ("pg_ts_config", "cfgnamespace"),
    ("pg_ts_dict", "dictnamespace"),
    ("pg_type", "typnamespace"),
)


def _regclass(catalog: str) -> str:
    return f"CAST('pg_catalog.{catalog}' AS REGCLASS)"


# For a few pg_depend rows ``d`` (an index's): the referenced object's schema, looked up by id
# (one index probe for the row's catalog; CASE evaluates only that branch).
_REF_NSP_BY_ID = (
    "CASE d.refclassid "
    + " ".join(
        f"WHEN {_regclass(c)} THEN (SELECT r.{col} FROM pg_catalog.{c} AS r WHERE r.oid = "
        "d.refobjid)"
        for c, col in _NAMESPACED
    )
    + f" WHEN {_regclass('pg_namespace')} THEN d.refobjid END"
)

# For all of pg_depend (``dd``): a reference to an object in a hidden schema, as hashed subplans
# (each catalog scanned once; per-row lookups would be estimated per row of pg_depend).
_HIDDEN_NAMESPACED = " OR ".join(
    f"(dd.refclassid = {_regclass(c)} AND dd.refobjid IN (SELECT r.oid FROM pg_catalog.{c} "
    f"AS r WHERE NOT r.{col} IN {_VIS_NSP}))"
    for c, col in _NAMESPACED
    if c != "pg_type"  # types: dpsql_vis_type (also row types of hidden relations)
)


VISIBILITY_CTES: tuple[tuple[str, str], ...] = (
    (
        "dpsql_vis_table",
        "SELECT c.oid FROM pg_catalog.pg_class AS c WHERE __visible_tables__",
    ),
    (
        "dpsql_hidden_att",
        "SELECT a.attrelid, a.attnum FROM pg_catalog.pg_attribute AS a WHERE __hidden_columns__",
    ),
    (
        "dpsql_vis_nsp",
        """
        SELECT n.oid FROM pg_catalog.pg_namespace AS n
         WHERE n.nspname IN ('pg_catalog', 'information_schema', 'public')
        UNION
        SELECT c.relnamespace FROM pg_catalog.pg_class AS c
         WHERE c.oid IN (SELECT oid FROM dpsql_vis_table)
        """,
    ),
    (
        # an index expression or predicate may cast to a hidden table's row type (in a visible
        # schema): a type of a relation other than a visible table is hidden too
        "dpsql_hidden_index",
        f"""
        SELECT d.objid FROM pg_catalog.pg_index AS i
          JOIN pg_catalog.pg_depend AS d ON d.classid = {_CLASS} AND d.objid = i.indexrelid
         WHERE i.indrelid IN (SELECT oid FROM dpsql_vis_table)
           AND d.refclassid <> {_CLASS}
           AND (NOT {_REF_NSP_BY_ID} IN {_VIS_NSP}
                OR (d.refclassid = {_regclass("pg_type")} AND EXISTS (
                    SELECT 1 FROM pg_catalog.pg_type AS rt WHERE rt.oid = d.refobjid
                       AND rt.typrelid <> 0
                       AND NOT rt.typrelid IN (SELECT oid FROM dpsql_vis_table))))
        """,
    ),
    (
        "dpsql_vis_rel",
        """
        SELECT c.oid FROM pg_catalog.pg_class AS c
          JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname IN ('pg_catalog', 'information_schema')
        UNION ALL
        SELECT t.oid FROM dpsql_vis_table AS t
        UNION ALL
        SELECT i.indexrelid FROM pg_catalog.pg_index AS i
         WHERE i.indrelid IN (SELECT oid FROM dpsql_vis_table)
           AND NOT i.indexrelid IN (SELECT hi.objid FROM dpsql_hidden_index AS hi)
           AND NOT EXISTS (SELECT 1 FROM dpsql_hidden_att AS h
                            WHERE h.attrelid = i.indrelid
                              AND h.attnum = ANY(CAST(i.indkey AS SMALLINT[])))
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS x
                             JOIN dpsql_hidden_att AS h
                               ON h.attrelid = x.refobjid AND h.attnum = x.refobjsubid
                            WHERE x.classid = CAST('pg_catalog.pg_class' AS REGCLASS)
                              AND x.objid = i.indexrelid)
        UNION ALL
        SELECT d.objid FROM pg_catalog.pg_depend AS d
         WHERE d.classid = CAST('pg_catalog.pg_class' AS REGCLASS)
           AND d.refclassid = CAST('pg_catalog.pg_class' AS REGCLASS)
           AND d.deptype IN ('a', 'i')
           AND d.refobjid IN (SELECT oid FROM dpsql_vis_table)
           AND d.objid IN (SELECT s.oid FROM pg_catalog.pg_class AS s WHERE s.relkind = 'S')
           AND NOT EXISTS (SELECT 1 FROM dpsql_hidden_att AS h
                            WHERE h.attrelid = d.refobjid AND h.attnum = d.refobjsubid)
        """,
    ),
    (
        "dpsql_vis_type",
        """
        SELECT t.oid FROM pg_catalog.pg_type AS t
         WHERE t.typnamespace IN (SELECT oid FROM dpsql_vis_nsp)
           AND (t.typrelid = 0 OR t.typrelid IN (SELECT oid FROM dpsql_vis_rel))
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type AS e
                            WHERE e.oid = t.typelem AND e.typrelid <> 0
                              AND NOT e.typrelid IN (SELECT oid FROM dpsql_vis_rel))
        """,
    ),
    (
        # objects whose definition depends on something hidden (computed once per query, only
        # when a definition is read)
        "dpsql_hidden_dep",
        f"""
        SELECT dd.classid, dd.objid FROM pg_catalog.pg_depend AS dd
         WHERE (dd.refclassid = {_CLASS}
                AND (NOT dd.refobjid IN (SELECT oid FROM dpsql_vis_rel)
                     OR EXISTS (SELECT 1 FROM dpsql_hidden_att AS h
                                 WHERE h.attrelid = dd.refobjid AND h.attnum = dd.refobjsubid)))
            OR (dd.refclassid = {_regclass("pg_type")}
                AND NOT dd.refobjid IN (SELECT oid FROM dpsql_vis_type))
            OR (dd.refclassid = {_regclass("pg_namespace")} AND NOT dd.refobjid IN {_VIS_NSP})
            OR {_HIDDEN_NAMESPACED}
        """,
    ),
)

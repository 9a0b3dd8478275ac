"""What a catalog query may call, as data: allowed, guarded, blanked and refused functions and
casts (the relations are in :mod:`dpsql.catalog.rules`, which re-exports these names).

Everything not listed is refused (default deny); :mod:`dpsql.catalog.functions` applies them.
"""

from __future__ import annotations

# Functions a catalog query may call (besides the typed sqlglot nodes in catalog.SAFE_NODES).
# The value names the argument that is an object id and its kind: that argument is replaced by
# NULL unless the object is visible, so e.g. pg_get_viewdef(<oid of a hidden view>) is NULL.
GUARDED_FUNCTIONS: dict[str, tuple[int, str]] = {
    "format_type": (0, "type"),
    "pg_get_expr": (1, "rel"),
    "pg_get_constraintdef": (0, "con"),
    "pg_get_indexdef": (0, "index"),
    "pg_get_viewdef": (0, "view"),
    "pg_get_triggerdef": (0, "trigger"),
    "pg_get_ruledef": (0, "rule"),
    "pg_get_partkeydef": (0, "rel"),
    "pg_get_partition_constraintdef": (0, "rel"),
    "pg_get_statisticsobjdef": (0, "stx"),
    "pg_get_statisticsobjdef_columns": (0, "stx"),
    "pg_get_statisticsobjdef_expressions": (0, "stx"),
    "pg_get_functiondef": (0, "body"),
    "pg_get_function_sqlbody": (0, "body"),
    "ts_token_type": (0, "pg_ts_parser"),
    "pg_get_function_arguments": (0, "proc"),
    "pg_get_function_result": (0, "proc"),
    "pg_get_function_identity_arguments": (0, "proc"),
    "pg_function_is_visible": (0, "proc"),
    "pg_relation_is_publishable": (0, "rel"),
    "pg_partition_ancestors": (0, "rel"),
    "pg_partition_root": (0, "rel"),
    "pg_partition_tree": (0, "rel"),
    "pg_table_is_visible": (0, "rel"),
    "pg_type_is_visible": (0, "type"),
    "col_description": (0, "rel"),
}

ALLOWED_FUNCTIONS = frozenset(
    """
    pg_get_serial_sequence pg_get_userbyid pg_get_keywords pg_typeof pg_encoding_to_char pg_char_to_encoding
    pg_client_encoding pg_encoding_max_length pg_is_in_recovery pg_options_to_table
    shobj_description pg_collation_is_visible pg_opclass_is_visible
    pg_operator_is_visible pg_conversion_is_visible pg_opfamily_is_visible
    pg_ts_config_is_visible pg_ts_dict_is_visible pg_ts_parser_is_visible
    pg_ts_template_is_visible pg_statistics_obj_is_visible has_table_privilege
    has_schema_privilege has_any_column_privilege has_column_privilege has_database_privilege
    has_function_privilege has_sequence_privilege has_type_privilege has_tablespace_privilege
    has_foreign_data_wrapper_privilege has_server_privilege has_language_privilege pg_has_role
    current_schemas current_schema current_database current_catalog current_user session_user
    current_role user version to_regclass to_regtype to_regnamespace to_regproc
    to_regprocedure to_regrole to_regoper to_regoperator to_regcollation quote_ident
    quote_literal quote_nullable parse_ident format array_lower array_upper array_length
    array_to_string array_position array_positions array_agg array_cat array_append
    array_prepend array_remove array_dims array_ndims cardinality unnest generate_series
    generate_subscripts string_agg string_to_array regexp_replace regexp_match regexp_matches
    split_part substr substring upper lower length char_length concat concat_ws replace trim
    btrim ltrim rtrim left right lpad rpad coalesce nullif greatest least starts_with
    json_build_object json_build_array json_agg jsonb_build_object jsonb_build_array jsonb_agg
    json_object_agg jsonb_object_agg to_json to_jsonb array_to_json row_to_json
    pg_describe_object getdatabaseencoding
    pg_size_pretty all any some now abs round floor ceil bool_and bool_or every count min max
    sum row_number rank dense_rank
    _pg_expandarray _pg_index_position _pg_truetypid _pg_truetypmod _pg_char_max_length
    _pg_char_octet_length _pg_numeric_precision _pg_numeric_precision_radix _pg_numeric_scale
    _pg_datetime_precision _pg_interval_type
    """.split()
)

# Functions that report sizes or activity measured on the data, or server file paths: replaced
# by a NULL of their result type.
BLANKED_FUNCTIONS: dict[str, str] = {
    "pg_relation_size": "BIGINT",
    "pg_total_relation_size": "BIGINT",
    "pg_table_size": "BIGINT",
    "pg_indexes_size": "BIGINT",
    "pg_database_size": "BIGINT",
    "pg_tablespace_size": "BIGINT",
    "pg_column_size": "BIGINT",
    "pg_tablespace_location": "TEXT",
}
BLANKED_PREFIXES = ("pg_stat_get_",)
# Their result types where not BIGINT (PostgreSQL 15's pg_proc), so a NULL is typed as theirs
_STAT_TYPES = {
    "DOUBLE PRECISION": "checkpoint_sync_time checkpoint_write_time db_active_time "
    "db_blk_read_time db_blk_write_time db_idle_in_transaction_time db_session_time "
    "function_self_time function_total_time xact_function_self_time xact_function_total_time",
    "INET": "backend_client_addr",
    "INTEGER": "backend_client_port backend_pid db_numbackends",
    "OID": "backend_dbid backend_userid",
    "TEXT": "backend_activity backend_wait_event backend_wait_event_type",
    "TIMESTAMPTZ": "backend_activity_start backend_start backend_xact_start "
    "bgwriter_stat_reset_time db_checksum_last_failure db_stat_reset_time last_analyze_time "
    "last_autoanalyze_time last_autovacuum_time last_vacuum_time snapshot_timestamp",
}
BLANKED_TYPES = {f"pg_stat_get_{n}": t for t, names in _STAT_TYPES.items() for n in names.split()}
# pg_stat_get_* functions that return records or sets of them (rows of the server's activity
# and statistics): no NULL stands for their rows and columns, so they are refused
STAT_RECORDS = frozenset(
    f"pg_stat_get_{n}"
    for n in "activity archiver backend_idset progress_info recovery_prefetch replication_slot "
    "slru subscription subscription_stats wal wal_receiver wal_senders".split()
)

# Refused with a specific hint: server file locations, and object descriptions by class and id
# (read the filtered catalogs instead).
_FILES = "server file locations are not available through dpsql; sizes read as NULL"
_DESCRIBE = "read names from pg_class, pg_namespace, pg_type ... (filtered to what you may see)"
REFUSED_FUNCTIONS: dict[str, str] = {
    "pg_relation_filenode": _FILES,
    "pg_relation_filepath": _FILES,
    "pg_filenode_relation": _FILES,
    "pg_identify_object": _DESCRIBE,
    "pg_identify_object_as_address": _DESCRIBE,
    "pg_get_object_address": _DESCRIBE,
}

# Settings readable with current_setting(): anything but paths, commands and dpsql's own.
# (the same words as the pg_settings filter: a setting pg_settings hides, current_setting hides)
DENIED_SETTING_WORDS = (
    "file", "director", "command", "path", "dpsql.", "ssl", "password", "passphrase", "conninfo",
    "secret",
)  # fmt: skip
ALLOWED_SETTINGS = frozenset({"search_path"})  # despite a denied word
# Settings that name the upstream role (or tell whether it is a superuser), by exact name.
DENIED_SETTINGS = frozenset({"session_authorization", "role", "is_superuser"})

# set_config() is emulated (returns the new value, changes nothing) for these settings only:
# asyncpg turns JIT off around its type introspection.
EMULATED_SET_CONFIG = frozenset({"jit"})

# Functions whose result is an object id that prints as a name: NULL unless visible.
GUARDED_RESULTS: dict[str, str] = {
    "to_regclass": "rel",
    "to_regtype": "type",
    "to_regnamespace": "nsp",
    "to_regproc": "proc",
    "to_regprocedure": "proc",
    "to_regoper": "pg_operator",
    "to_regoperator": "pg_operator",
    "to_regcollation": "pg_collation",
}

# has_*_privilege functions that take an object by name or id: (kind, the object-id type its
# name is looked up as, argument count -> position of the object, a column name/number follows).
PRIVILEGE_ARGS: dict[str, tuple[str, str, dict[int, int], bool]] = {
    "has_table_privilege": ("rel", "REGCLASS", {2: 0, 3: 1}, False),
    "has_sequence_privilege": ("rel", "REGCLASS", {2: 0, 3: 1}, False),
    "has_any_column_privilege": ("rel", "REGCLASS", {2: 0, 3: 1}, False),
    "has_column_privilege": ("rel", "REGCLASS", {3: 0, 4: 1}, True),
    "has_schema_privilege": ("nsp", "REGNAMESPACE", {2: 0, 3: 1}, False),
    "has_type_privilege": ("type", "REGTYPE", {2: 0, 3: 1}, False),
    "has_function_privilege": ("proc", "REGPROCEDURE", {2: 0, 3: 1}, False),
}

# Casts to object-identifier types print names; those are guarded like the functions above.
GUARDED_CASTS: dict[str, str] = {
    "regclass": "rel", "regtype": "type", "regnamespace": "nsp", "regproc": "proc",
    "regprocedure": "proc", "regoper": "pg_operator", "regoperator": "pg_operator",
    "regcollation": "pg_collation", "regconfig": "pg_ts_config", "regdictionary": "pg_ts_dict",
}  # fmt: skip
ALLOWED_CASTS = frozenset({"regrole"})  # catalog_roles rewrites it

# Catalog columns typed regproc (PostgreSQL 12-17); pg_sequences.data_type (regtype) lives in an
# emptied relation and is not listed, as its name is common in information_schema queries.
REG_COLUMNS = frozenset(
    """
    aggcombinefn aggdeserialfn aggfinalfn aggfnoid aggmfinalfn aggminvtransfn aggmtransfn
    aggserialfn aggtransfn amhandler amproc conproc oprcode oprjoin oprrest prosupport prsend
    prsheadline prslextype prsstart prstoken rngcanonical rngsubdiff tmplinit tmpllexize
    trffromsql trftosql typanalyze typinput typmodin typmodout typoutput typreceive typsend
    typsubscript
    """.split()
)

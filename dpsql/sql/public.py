"""Checks for queries over public tables only (answered as-is, no noise).

Even without private data, a query may not run functions with side effects or that read files,
other tables or settings (pg_read_file, query_to_xml, dblink, set_config, pg_sleep, ...).
Functions sqlglot does not know are allowed only when named here.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import PrivacyViolation, UnsupportedSql

SAFE_FUNCTIONS = frozenset(
    """
    version current_schema current_schemas current_user session_user current_database
    current_catalog user pg_backend_pid format_type pg_get_userbyid obj_description col_description
    shobj_description pg_table_is_visible pg_type_is_visible pg_function_is_visible
    has_table_privilege has_schema_privilege has_database_privilege has_column_privilege
    pg_encoding_to_char pg_is_in_recovery generate_series unnest array_length array_upper
    array_lower cardinality array_to_string string_to_array regexp_replace regexp_match split_part
    replace left right lpad rpad ltrim rtrim btrim initcap reverse repeat position strpos md5
    to_char to_date to_timestamp to_number date_part age justify_days make_date make_timestamp
    now clock_timestamp statement_timestamp transaction_timestamp timeofday
    to_hex width_bucket div gcd lcm factorial pi radians degrees sin cos tan
    asin acos atan atan2 cot mod power exp ln log log10 cbrt sqrt sign trunc round floor ceil ceiling abs
    jsonb_build_object json_build_object jsonb_build_array json_build_array to_json to_jsonb
    row_number rank dense_rank lag lead first_value last_value ntile percent_rank cume_dist
    concat concat_ws quote_ident quote_literal quote_nullable format pg_typeof row
    """.split()
)

DANGEROUS = frozenset(
    """
    pg_sleep pg_sleep_for pg_sleep_until pg_read_file pg_read_binary_file pg_ls_dir pg_stat_file
    lo_import lo_export lo_get lo_open lo_put loread lowrite lo_create lo_unlink dblink dblink_exec
    dblink_connect set_config current_setting nextval setval currval lastval
    pg_terminate_backend pg_cancel_backend pg_reload_conf pg_rotate_logfile query_to_xml
    query_to_xmlschema query_to_xml_and_xmlschema table_to_xml cursor_to_xml database_to_xml
    schema_to_xml ts_stat pg_advisory_lock pg_advisory_xact_lock txid_current
    pg_current_xact_id pg_notify pg_logical_emit_message
    """.split()
)


def function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def check_public(tree: exp.Expr) -> None:
    """Refuse unsafe functions and constructs in a public (or catalog) query."""
    for n in tree.walk():
        if isinstance(n, exp.Func):
            name = function_name(n)
            if name in DANGEROUS or (isinstance(n, exp.Anonymous) and name not in SAFE_FUNCTIONS):
                raise PrivacyViolation(
                    f"function {name}() is not allowed through dpsql",
                    hint="dpsql allows side-effect-free functions only; ask the data owner if you "
                    "need this one",
                )
        if isinstance(n, (exp.Into, exp.Lock)):
            raise UnsupportedSql("SELECT INTO and row locks are not allowed (read-only)")
        if isinstance(n, exp.Command):
            raise UnsupportedSql(f"{n.name} is not allowed here")

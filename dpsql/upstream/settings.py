"""How every connection dpsql opens to PostgreSQL is set up (:func:`session_settings`), and how
PostgreSQL writes values as text on it (:data:`OUTPUT_SETTINGS`, the ledger's connections too).

dpsql tells its clients that dates are ISO, times are in UTC, intervals in ``postgres`` style,
bytea in ``hex`` and text in UTF-8 (:data:`dpsql.wire.setting_values.DEFAULTS`), and passes PostgreSQL's
text bytes through to them as they are on the fast path; psycopg can read timestamps only in ISO
style. A database's or role's own defaults (``ALTER DATABASE ... SET DateStyle = 'SQL, DMY'``,
``TimeZone = 'Europe/Berlin'``, ``bytea_output = 'escape'``, ``client_encoding = 'LATIN1'``) would
otherwise reach clients that were told something else, or stop psycopg reading a timestamp.
"""

from __future__ import annotations

from psycopg import sql

OUTPUT_SETTINGS: tuple[tuple[str, str], ...] = (
    ("DateStyle", "ISO, MDY"),
    ("IntervalStyle", "postgres"),
    ("TimeZone", "UTC"),
    ("extra_float_digits", "1"),
    ("bytea_output", "hex"),
    ("client_encoding", "UTF8"),
)


def output_statements() -> tuple[sql.Composed, ...]:
    """``SET name = value`` for each of :data:`OUTPUT_SETTINGS`."""
    return tuple(
        sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
        for name, value in OUTPUT_SETTINGS
    )


def session_settings(timeout_ms: int) -> tuple[sql.SQL | sql.Composed, ...]:
    """What every upstream connection (the engine's pool and the wire fast path's) runs first.

    Autocommit with read-only transactions by default: each statement is its own read-only
    transaction, one round trip instead of BEGIN READ ONLY / query / ROLLBACK. Clients never reach
    these settings (dpsql never forwards SET).

    The search path is pinned to ``public`` (``pg_catalog`` is searched first implicitly, and
    ``current_schema()`` stays ``public`` for clients that ask): dpsql classifies an unqualified
    table name as ``public.<name>`` (:func:`dpsql.sql.tables.referenced_tables`) and public
    statements run as written, so PostgreSQL must resolve names the same way. With the server's
    default (``"$user", public``) or a role's own ``search_path``, a schema named after the
    upstream role would shadow a public table and an unqualified ``SELECT * FROM regions`` would
    return the raw rows of a table the policy never declared. ``standard_conforming_strings`` is
    pinned ``on`` for the same reason: dpsql's parser reads string literals that way. How values
    are written as text is pinned to what dpsql reports to its clients (:data:`OUTPUT_SETTINGS`).
    """
    return (
        sql.SQL("SET search_path = public"),
        # dpsql parses and writes string literals as standard strings (a backslash is an
        # ordinary character): with standard_conforming_strings = off (a database's or role's
        # setting) a backslash before a quote escapes it, and a literal ending in a backslash would
        # let the rest of the statement run as SQL (tests/redteam/test_string_settings.py)
        sql.SQL("SET standard_conforming_strings = on"),
        sql.SQL("SET default_transaction_read_only = on"),
        sql.SQL("SET statement_timeout = {}").format(sql.Literal(timeout_ms)),
        sql.SQL("SET application_name = 'dpsql'"),
        *output_statements(),
    )

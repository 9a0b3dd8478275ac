"""How PostgreSQL writes values as text on every connection dpsql opens to it.

dpsql tells its clients that dates are ISO, times are in UTC, intervals in ``postgres`` style,
bytea in ``hex`` and text in UTF-8 (:data:`dpsql.wire.state.DEFAULTS`), and passes PostgreSQL's
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

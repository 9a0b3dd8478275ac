"""What PostgreSQL's own errors become in dpsql's words: an upstream error on a private query
stripped of its text (:func:`sanitized_upstream`), dpsql's catalog guards' failing lookup read
back as PostgreSQL's error for a missing name (:func:`no_such_object`), a driver's message
without its context lines (:func:`first_line`). The classes they return are
:mod:`dpsql.errors`'.
"""

from __future__ import annotations

from dpsql.errors import DpsqlError, NoSuchObject, UpstreamError

# A catalog statement's lookup of a name that is missing or hidden fails upstream with this text
# (:mod:`dpsql.catalog.missing`): PostgreSQL's 22P02 for an oid input, ``invalid input syntax
# for type oid: "dpsql: no such object: 42P01 relation "x" does not exist"``, read back here
# as the error PostgreSQL gives for a missing name (42P01 ``relation "x" does not exist``).
NO_SUCH_OBJECT = "dpsql: no such object: "
_NO_SUCH_OBJECT_TEXT = f'invalid input syntax for type oid: "{NO_SUCH_OBJECT}'


def no_such_object(sqlstate: str | None, message: str) -> DpsqlError | None:
    """The error a public statement's upstream failure stands for when it is dpsql's failing
    lookup of a missing or hidden name (:data:`NO_SUCH_OBJECT`), else None.

    >>> e = no_such_object("22P02", 'invalid input syntax for type oid: '
    ...     '"dpsql: no such object: 42P01 relation "x" does not exist"')
    >>> e.sqlstate, e.message
    ('42P01', 'relation "x" does not exist')
    """
    if sqlstate != "22P02" or not message.startswith(_NO_SUCH_OBJECT_TEXT):
        return None
    rest = message[len(_NO_SUCH_OBJECT_TEXT) :].removesuffix('"')
    code, _, words = rest.partition(" ")
    if len(code) != 5 or not words:
        return None
    hint = _NO_SUCH_OBJECT_HINTS.get(code)  # one per kind: the same for hidden and missing
    return NoSuchObject(words, hint=hint, sqlstate=code)  # ERROR (InvalidCatalogName's is FATAL)


_NO_SUCH_OBJECT_HINTS = {
    "42P01": "check the name: \\dt lists the tables you can read",
    "3F000": "check the schema's name: \\dn lists the schemas you can see",
    "42704": "check the type's name: \\dT lists the types you can see",
    "42883": "check the function's name and argument types: \\df lists the functions you can see",
    "42703": "check the column's name: \\d with the table's name lists its columns",
    "3D000": "this server serves one database: current_database() names it",
}


def first_line(e: BaseException) -> str:
    """The first line of an exception's text, '' when it has none: a driver's message without the
    lines of context after it (psycopg's first line never holds the connection's password).

    >>> first_line(ValueError("syntax error\\nLINE 1: ...")), first_line(ValueError())
    ('syntax error', '')
    """
    return next(iter(str(e).strip().splitlines()), "")


def sanitized_upstream(sqlstate: str | None) -> UpstreamError:
    """An upstream error on a private query, stripped of its text (which may contain row values).

    The SQLSTATE class (first two characters) is kept so clients can still tell kinds apart.

    >>> sanitized_upstream("22012").sqlstate
    '22000'
    """
    cls = (sqlstate or "XX")[:2]
    code = cls + "000"
    hint = "check casts and divisions in the query; make expressions total (e.g. NULLIF guards)"
    if cls == "0A":  # feature_not_supported: the statement's form, not its data
        hint = (
            "the database does not support this form of statement; on a Citus coordinator, a "
            "correlated subquery (EXISTS, IN) over a table local to the coordinator is one: make "
            "it a reference table (dpsql check --upstream lists such tables)"
        )
    return UpstreamError(
        "the private query failed in the database",
        detail=f"error class {code}; the database's message is withheld because it may contain "
        "private values",
        hint=hint,
        sqlstate=code,
    )

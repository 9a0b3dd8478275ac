"""PostgreSQL's error for a name that is not there, given alike for a missing and a hidden one.

``'x'::regclass``, ``has_table_privilege('x', 'select')``, ``pg_get_serial_sequence('t', 'c')``
... fail in PostgreSQL when the name is missing (42P01 ``relation "x" does not exist``, 3F000
``schema "s" does not exist``, 42703 ``column "c" of relation "t" does not exist`` ...). dpsql
looks names up without an error (:func:`dpsql.catalog.build.as_object`), so that a hidden object
is not told apart from a missing one, and answered NULL for both: a value where PostgreSQL
refuses. Here a name written as a literal that is missing *or hidden* fails with PostgreSQL's
words for a missing one: the guard's CASE gets an ``ELSE`` that fails upstream, only when it is
reached, with :data:`dpsql.errors.upstream.NO_SUCH_OBJECT` and the words (``CAST((SELECT CAST('dpsql: no
such object: 42P01 relation "x" does not exist' AS TEXT)) AS oid)``: a scalar subquery, which
the planner neither folds nor evaluates to estimate a WHERE's selectivity, where a stable call
such as ``concat`` was evaluated while planning ``WHERE c.oid = CASE ... END``), read back as
that error when the failure comes back (:func:`dpsql.errors.upstream.no_such_object`). The words are computed from the literal
alone, as PostgreSQL parses the name (:func:`parse_names`), never from what the catalog holds:
a hidden object and a missing one give the same words.

An object id (``16398::regclass``, ``has_table_privilege(16398, 'select')``) is not a name:
PostgreSQL answers NULL (or prints the number) for a missing one, and so does dpsql, hidden or
missing. A name computed per row (a column) keeps NULL.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors.upstream import NO_SUCH_OBJECT

# Failing words by the object-identifier type a name is read as: (SQLSTATE, object word)
_WORDS = {
    "REGCLASS": ("42P01", "relation"),
    "REGTYPE": ("42704", "type"),
    "REGPROC": ("42883", "function"),
    "REGNAMESPACE": ("3F000", "schema"),
}


def parse_names(text: str) -> list[str] | None:
    """``text`` read as PostgreSQL reads a possibly qualified name (``stringToQualifiedNameList``):
    dot-separated identifiers, unquoted ones lowercased and trimmed, ``"..."`` kept as written
    (a doubled quote is a quote). None when it is not such a name (PostgreSQL's own syntax
    error then).

    >>> parse_names("Public.X"), parse_names("s.'My T'".replace("'", chr(34)))
    (['public', 'x'], ['s', 'My T'])
    >>> parse_names("a..b"), parse_names("int[]")
    (None, None)
    """
    names: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            j, part = i + 1, []
            while True:
                k = text.find('"', j)
                if k < 0:
                    return None
                part.append(text[j:k])
                if k + 1 < n and text[k + 1] == '"':
                    part.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            name = "".join(part)
            if not name:
                return None
        else:
            j = i
            while i < n and (text[i].isalnum() or text[i] in "_$"):
                i += 1
            name = text[j:i].lower()
            if not name or name[0].isdigit() or name[0] == "$":
                return None
        names.append(name)
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return names
        if text[i] != ".":
            return None
        i += 1


def fail(type_name: str, sqlstate: str, message: str) -> exp.Expr:
    """A ``type_name`` value that fails upstream with ``sqlstate`` and ``message`` (module
    docstring) when it is evaluated, never while the statement is planned."""
    text = exp.Cast(
        this=exp.Literal.string(f"{NO_SUCH_OBJECT}{sqlstate} {message}"),
        to=exp.DataType.build("text", dialect="postgres"),
    )
    marker = exp.Subquery(this=exp.select(text))  # an InitPlan: run only where it is reached
    oid = exp.Cast(this=marker, to=exp.DataType.build("oid", dialect="postgres"))
    return exp.Cast(this=oid, to=exp.DataType.build(type_name, dialect="postgres", udt=True))


def _quoted(name: str) -> exp.Literal:
    return exp.Literal.string('"' + name.replace('"', '""') + '"')


def schema_visible(schema: str) -> exp.Expr:
    """Whether the schema named ``schema`` (as parsed) exists and is visible to the analyst."""
    from dpsql.catalog.build import visible

    found = exp.Anonymous(this="to_regnamespace", expressions=[_quoted(schema)])
    return exp.func("COALESCE", visible("nsp", found), exp.false())


def missing_name(x: exp.Expr, type_name: str, as_type: str | None = None) -> exp.Expr | None:
    """What a lookup of ``x`` as a ``type_name`` gives when the object is not visible: PostgreSQL's
    failure for a missing name, when ``x`` is a name written as a literal; None otherwise (an
    id, a computed value: NULL, as before). Typed ``as_type`` (default ``type_name``)."""
    if not (isinstance(x, exp.Literal) and x.is_string) or x.name.strip().isdigit():
        return None
    text = x.name
    typ = as_type or type_name
    if type_name == "REGPROCEDURE":  # the signature as written: function "f(int)"
        return fail(typ, "42883", f'function "{text}" does not exist')
    if type_name not in _WORDS:
        return None
    names = parse_names(text)
    if names is None:
        return None
    sqlstate, word = _WORDS[type_name]
    if type_name == "REGNAMESPACE":
        if len(names) != 1:
            return None
        return fail(typ, sqlstate, f'schema "{names[0]}" does not exist')
    out = fail(typ, sqlstate, f'{word} "{".".join(names)}" does not exist')
    if len(names) >= 2:  # a schema missing (or hidden) is PostgreSQL's 3F000 first
        schema = names[-2]
        out = exp.Case(
            ifs=[exp.If(this=schema_visible(schema), true=out)],
            default=fail(typ, "3F000", f'schema "{schema}" does not exist'),
        )
    return out


def missing_column(table: exp.Expr, column: exp.Expr, as_type: str) -> exp.Expr | None:
    """PostgreSQL's 42703 ``column "c" of relation "t" does not exist`` for a column named as a
    literal (as written: has_column_privilege and pg_get_serial_sequence keep its case) of a
    table named as a literal; None otherwise."""
    if not (isinstance(table, exp.Literal) and table.is_string):
        return None
    if not (isinstance(column, exp.Literal) and column.is_string):
        return None
    names = parse_names(table.name)
    if names is None:
        return None
    return fail(
        as_type, "42703", f'column "{column.name}" of relation "{names[-1]}" does not exist'
    )


def missing_database(x: exp.Expr) -> exp.Expr | None:
    """PostgreSQL's 3D000 ``database "x" does not exist`` for a database named as a literal (its
    name as written) that is not the current one; None for an id or a computed value."""
    if not (isinstance(x, exp.Literal) and x.is_string) or x.name.strip().isdigit():
        return None
    return fail("TEXT", "3D000", f'database "{x.name}" does not exist')

"""``x = ANY(<list>)`` and ``x <> ALL(<list>)`` of a constant list are ``IN`` / ``NOT IN`` lists.

psycopg 3 sends an IN list as one array parameter (its documented idiom is ``x = ANY(%s)``),
asyncpg users write ``x = ANY($1::text[])``; the list is a public constant exactly as the
literals of ``x IN ('a', 'b')``, which narrow declared keys. Rewritten here, before the checks,
for a list written as ``ARRAY[...]`` of constants (a bound parameter becomes one:
:func:`dpsql.sql.bind.literal`), as a simple array literal (``'{books,travel}'``), or, while the
statement is prepared and its values unknown, as a parameter (``x IN ($1)``: a condition the
analysis cannot read, which never narrows anything; the bound statement is analyzed again with
the list; described before any value is bound, with NULL: ``x = ANY(NULL)``, NULL as ``x IN
(NULL)``). Same three-valued logic: ``x = ANY(ARRAY['a', NULL])`` is ``x IN ('a', NULL)``; an
empty list is false for ``= ANY`` and true for ``<> ALL`` (as in PostgreSQL, even for NULL x).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedSql

_CONSTANT = (exp.Literal, exp.Null, exp.Boolean, exp.Neg, exp.Cast, exp.Paren, exp.DataType)


def _items(arr: exp.Expr) -> list[exp.Expr] | None:
    """The elements of a constant list (copies), or None when ``arr`` is not one."""
    while isinstance(arr, exp.Paren) or (
        isinstance(arr, exp.Cast) and arr.to.this == exp.DataType.Type.ARRAY
    ):
        arr = arr.this
    if isinstance(arr, (exp.Parameter, exp.Placeholder)):
        return [arr.copy()]
    if isinstance(arr, exp.Null):  # x = ANY(NULL) is NULL whatever x, as x IN (NULL) is
        return [exp.Null()]
    if isinstance(arr, exp.Array):
        items = list(arr.expressions)
        if all(all(isinstance(n, _CONSTANT) for n in i.walk()) for i in items):
            return [i.copy() for i in items]
        return None
    if isinstance(arr, exp.Literal) and arr.is_string:
        return _array_text(str(arr.this))
    return None


def _array_text(text: str) -> list[exp.Expr] | None:
    """The elements of a one-dimensional array's text as PostgreSQL's ``array_in`` reads it
    (``{books,travel}``; node-postgres sends a JS array quoted: ``{"books","travel"}``, with
    ``\\`` escapes inside quotes; an unquoted NULL is NULL, a quoted one the text), None for
    anything else (nested, an unquoted backslash, a stray quote or brace).

    >>> [e.sql() for e in _array_text('{"a b", c ,NULL,"NULL","x,y"}')]
    ["'a b'", "'c'", 'NULL', "'NULL'", "'x,y'"]
    """
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    body = text[1:-1]
    if not body.strip():
        return []
    out: list[exp.Expr] = []
    i, n = 0, len(body)
    while True:
        while i < n and body[i].isspace():
            i += 1
        if i < n and body[i] == '"':
            i += 1
            buf: list[str] = []
            while i < n and body[i] != '"':
                if body[i] == "\\":
                    i += 1
                    if i == n:
                        return None
                buf.append(body[i])
                i += 1
            if i == n:
                return None
            i += 1
            while i < n and body[i].isspace():
                i += 1
            out.append(exp.Literal.string("".join(buf)))
        else:
            end = body.find(",", i)
            end = n if end < 0 else end
            raw = body[i:end].strip()
            if not raw or any(c in raw for c in '"\\{}'):
                return None
            out.append(exp.Null() if raw.upper() == "NULL" else exp.Literal.string(raw))
            i = end
        if i == n:
            return out
        if body[i] != ",":
            return None
        i += 1


def any_as_in(tree: exp.Expr) -> exp.Expr:
    """``tree`` with each ``x = ANY(list)`` / ``x <> ALL(list)`` of a constant list rewritten
    to ``x IN (...)`` / ``x NOT IN (...)`` (in place; the analysis's own copy).

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT 1 FROM t WHERE c = ANY('{a,b}') AND d <> ALL(ARRAY[1])",
    ...                       read="postgres")
    >>> any_as_in(q).sql("postgres")
    "SELECT 1 FROM t WHERE c IN ('a', 'b') AND (NOT d IN (1))"

    Raises:
        UnsupportedSql: ``<> ALL`` / ``= ALL`` of anything else (was "function all()").
    """
    for n in list(tree.find_all(exp.EQ, exp.NEQ)):
        rhs = n.expression
        is_any = isinstance(n, exp.EQ) and isinstance(rhs, exp.Any)
        is_all = (
            isinstance(n, exp.NEQ)
            and isinstance(rhs, exp.Anonymous)
            and str(rhs.this).upper() == "ALL"
            and len(rhs.expressions) == 1
        )
        if isinstance(rhs, exp.Anonymous) and str(rhs.this).upper() == "ALL" and not is_all:
            raise UnsupportedSql(
                "= ALL (...) is not supported in private queries",
                hint="write x <> ALL (list) as x NOT IN ('a', 'b'), x = ANY (list) as x IN (...)",
            )
        if not (is_any or is_all):
            continue
        items = _items(rhs.this if is_any else rhs.expressions[0])
        if items is None:
            if is_all:
                raise UnsupportedSql(
                    "<> ALL (...) is supported with a list of constants or a parameter only",
                    hint="write x NOT IN ('a', 'b'), or x <> ALL(ARRAY['a', 'b'])",
                )
            continue
        x = n.this.copy()
        new: exp.Expr
        if not items:
            new = exp.false() if is_any else exp.true()
        else:
            new = exp.In(this=x, expressions=items)
            if is_all:
                new = exp.Not(this=new)
        n.replace(exp.Paren(this=new) if isinstance(n.parent, exp.Binary) and is_all else new)
    return tree

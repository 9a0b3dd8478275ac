"""Names for messages: what the user wrote, never sqlglot's internal node or function names.

sqlglot parses ``to_date(...)`` into ``StrToDate`` (``sql_name()`` = ``str_to_date``) and
``now()`` into ``CurrentTimestamp``; a message built from those would name functions the user
never wrote. :func:`spell_functions` records each function's name as written in the statement
(the parser's token span, kept in the node's ``meta`` through copies); :func:`function_name`
reads it back, falling back to the PostgreSQL dialect's own rendering.

>>> import sqlglot
>>> text = "SELECT TO_DATE('2025-03-01', 'YYYY-MM-DD'), now()"
>>> tree = spell_functions(sqlglot.parse_one(text, read="postgres"), text)
>>> [function_name(f) for f in tree.expressions]
['to_date', 'now']
"""

from __future__ import annotations

import re

import sqlglot
import sqlglot.errors
from sqlglot import exp

from dpsql.sql.nodes import POSTGRES

SPELLED = "dpsql_spelled"
WRITTEN = "dpsql_written"  # an aggregate call's text as written (whitespace collapsed)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")

# Operators and clauses sqlglot gives a node of their own, as PostgreSQL users write them.
_SYNTAX: dict[type[exp.Expr], str] = {
    exp.Bracket: "array subscripts [...]",
    exp.RegexpLike: "the regular expression operator ~",
    exp.RegexpILike: "the regular expression operator ~*",
    exp.SimilarTo: "SIMILAR TO",
    exp.Collate: "COLLATE",
    exp.AtTimeZone: "AT TIME ZONE",
    exp.Distinct: "DISTINCT",
    exp.Star: "*",
    exp.Window: "window functions (OVER)",
    exp.Array: "ARRAY[...]",
    exp.JSONExtract: "the JSON operator ->",
    exp.JSONExtractScalar: "the JSON operator ->>",
    exp.JSONBExtract: "the JSON operator #>",
    exp.JSONBExtractScalar: "the JSON operator #>>",
    exp.JSONBContains: "the JSON operator ?",
    exp.ArrayContains: "the operator @>",
    exp.ArrayContainsAll: "the operator @>",
    exp.ArrayOverlaps: "the operator &&",
    exp.ArrayContainedBy: "the operator <@",
    exp.BitwiseAnd: "the operator &",
    exp.BitwiseOr: "the operator |",
    exp.BitwiseXor: "the operator #",
    exp.BitwiseNot: "the operator ~",
    exp.BitwiseLeftShift: "the operator <<",
    exp.BitwiseRightShift: "the operator >>",
    exp.Pow: "the operator ^",
    exp.Select: "a subquery",
    exp.Subquery: "a subquery",
    exp.Exists: "EXISTS",
    exp.Any: "ANY",
    exp.All: "ALL",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM",
    exp.NullSafeNEQ: "IS DISTINCT FROM",
    exp.Escape: "ESCAPE",
    exp.Dot: "a qualified name",
    exp.Placeholder: "a parameter",
    exp.Parameter: "a parameter",
}


def spell_functions(tree: exp.Expr, text: str) -> exp.Expr:
    """Record in place, on every function call of ``tree``, its name as written in ``text``;
    on every aggregate call, also its whole text as written (``WRITTEN``: the call with its
    ``WITHIN GROUP (...)`` and ``FILTER (...)``, whitespace collapsed), read back by
    :func:`dpsql.sql.wording.user_sql` for notices and messages.

    >>> import sqlglot
    >>> text = "SELECT variance(amount),  MEDIAN( x ) FILTER (WHERE y > ')')"
    >>> tree = spell_functions(sqlglot.parse_one(text, read="postgres"), text)
    >>> [f.meta[WRITTEN] for f in tree.find_all(exp.AggFunc)]
    ['variance(amount)', "MEDIAN( x ) FILTER (WHERE y > ')')"]
    """
    for node in tree.find_all(exp.Func):
        start, end = node.meta.get("start"), node.meta.get("end")
        if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end < len(text):
            word = text[start : end + 1]
            if _NAME.fullmatch(word) and text[end + 1 :].lstrip().startswith("("):
                node.meta[SPELLED] = word
                if isinstance(node, (exp.AggFunc, exp.Anonymous, *_RAW)):
                    stop = _call_end(text, end + 1)
                    if stop is not None:
                        node.meta[WRITTEN] = " ".join(text[start:stop].split())
                        _spell_argument(node, text, end + 1)
    return tree


def _spell_argument(node: exp.Func, text: str, i: int) -> None:
    """Record on an aggregate's one computed argument (``CAST(amount AS integer)``) its text as
    written, for notices that name the value summed (``of CAST(amount AS integer)``)."""
    arg = node.this
    if not isinstance(node, exp.AggFunc) or not isinstance(arg, exp.Expr) or node.expressions:
        return
    if isinstance(arg, (exp.Column, exp.Star, exp.Distinct, exp.Literal)):
        return
    stop = _bracket_end(text, i)
    if stop is None:
        return
    inner = text[text.index("(", i) + 1 : stop - 1].strip()
    try:
        again = sqlglot.parse_one(inner, read="postgres")
    except sqlglot.errors.SqlglotError:
        return
    for ident in again.find_all(exp.Identifier):
        if not ident.quoted and isinstance(ident.this, str):
            ident.set("this", ident.this.translate(_ASCII_LOWER))
    if again == arg:
        arg.meta[WRITTEN] = " ".join(inner.split())


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


_RAW = (exp.GroupConcat, exp.ArrayAgg)  # string_agg, array_agg: named in their refusal

_TRAILER = re.compile(r"\s*(WITHIN\s+GROUP|FILTER)\s*(?=\()", re.IGNORECASE)


def _call_end(text: str, i: int) -> int | None:
    """The end of the call whose argument list opens at or after ``i`` (after its ``WITHIN
    GROUP (...)`` and ``FILTER (...)``), or None when its brackets don't close."""
    stop = _bracket_end(text, i)
    while stop is not None:
        m = _TRAILER.match(text, stop)
        if m is None:
            return stop
        stop = _bracket_end(text, m.end())
    return None


def _bracket_end(text: str, i: int) -> int | None:
    """The index after the bracket that closes the first ``(`` at or after ``i`` (skipping
    quoted strings, quoted identifiers and comments)."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            j = text.find(c, i + 1)
            while j != -1 and text.startswith(c, j + 1):  # '' and "" escape the quote
                j = text.find(c, j + 2)
            if j == -1:
                return None
            i = j
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j == -1 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j == -1 else j + 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0 and not c.isspace():
            return None
        i += 1
    return None


def function_name(node: exp.Func) -> str:
    """The function's name as the user wrote it (lower case), else as PostgreSQL spells it
    (operators that sqlglot parses as functions are named by :func:`describe`)."""
    spelled = node.meta.get(SPELLED)
    if isinstance(spelled, str):
        return spelled.lower()
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    rendered = node.sql(POSTGRES)
    m = _NAME.match(rendered)
    return m.group(0).lower() if m else node.sql_name().lower()


_DECIMAL = re.compile(r"\bdecimal\b")


def type_sql(to: exp.Expr) -> str:
    """A type as PostgreSQL users write it (sqlglot spells ``numeric`` as ``DECIMAL``).

    >>> import sqlglot
    >>> type_sql(sqlglot.parse_one("SELECT x::numeric(10, 2)[]", read="postgres").selects[0].to)
    'numeric(10, 2)[]'
    """
    return _DECIMAL.sub("numeric", to.sql(POSTGRES).lower())


def cast_sql(node: exp.Cast) -> str:
    """A cast as PostgreSQL users write it: ``x::type``, or ``CAST(x AS type)`` if written so."""
    to = type_sql(node.to)
    if "format" in node.args:  # sqlglot's CAST(...) parse sets format/safe/action; `::` doesn't
        return f"CAST({node.this.sql('postgres')} AS {to})"
    inner = node.this
    left = inner.sql(POSTGRES)
    if not isinstance(inner, (exp.Column, exp.Literal, exp.Paren, exp.Func)):
        left = f"({left})"
    return f"{left}::{to}"


def describe(node: exp.Expr) -> str:
    """``node`` named for a message: "function to_date()", "x::regtype", "SIMILAR TO", ..."""
    if isinstance(node, (exp.RegexpLike, exp.RegexpILike)) and isinstance(node.parent, exp.Not):
        return _SYNTAX[type(node)].replace("~", "!~")  # a !~ 'x' parses as NOT (a ~ 'x')
    spelled = node.meta.get(SPELLED)
    if isinstance(node, exp.Func) and isinstance(spelled, str):
        return f"function {spelled.lower()}()"  # power(a, b), not the operator ^ sqlglot reads
    for cls in type(node).__mro__:
        if cls in _SYNTAX:
            return _SYNTAX[cls]
    if isinstance(node, exp.Cast):
        return f"the cast {cast_sql(node)}"
    if isinstance(node, exp.Func):
        name = function_name(node)
        if SPELLED not in node.meta and "(" not in node.sql(POSTGRES):
            return name.upper()  # CURRENT_DATE, LOCALTIMESTAMP: keywords, not calls
        return f"function {name}()"
    text = node.sql(POSTGRES)
    return f"the expression {text if len(text) <= 60 else text[:57] + '...'}"


def output_name(item: exp.Expr) -> str:
    """The column name PostgreSQL gives a select item."""
    if isinstance(item, exp.Alias):
        return str(item.alias)
    if isinstance(item, exp.Column):
        return str(item.name)
    if isinstance(item, exp.Window):
        return output_name(item.this)
    if isinstance(item, exp.Cast):
        return output_name(item.this) if isinstance(item.this, exp.Column) else "?column?"
    if isinstance(item, exp.Func):
        spelled = item.meta.get(SPELLED)  # variance(x) is "variance", as PostgreSQL names it
        if isinstance(spelled, str):
            return spelled.lower()
        return (
            str(item.sql_name()).lower()
            if not isinstance(item, exp.Anonymous)
            else str(item.name).lower()
        )
    return "?column?"

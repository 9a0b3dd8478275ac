"""Calls of functions PostgreSQL doesn't have: refused as PostgreSQL does (42883), with the
aggregates dpsql answers and a close name as hint, before anything else reads the statement (an
unknown ``AVERAGE(amount)`` was refused as a raw column, ``foo(code)`` as not allowed).

:data:`BUILTIN` (:mod:`dpsql.sql.pg_function_names`) is the names of PostgreSQL 15's functions
in ``pg_catalog`` and ``information_schema`` (``SELECT DISTINCT proname FROM pg_proc``). A call
of any other name (unqualified, as sqlglot reads it: a function it has no node of) is refused;
dpsql never calls a database's own functions anyway (:mod:`dpsql.sql.shadowing`), so through
dpsql it doesn't exist.

>>> import sqlglot
>>> check_known_functions(sqlglot.parse_one("SELECT AVERAGE(x) FROM t", read="postgres"))
Traceback (most recent call last):
...
dpsql.errors.UndefinedFunction: function average does not exist
"""

from __future__ import annotations

import difflib

from sqlglot import exp

from dpsql.errors import UndefinedFunction
from dpsql.sql.names import function_name
from dpsql.sql.pg_function_names import BUILTIN
from dpsql.sql.public import DANGEROUS

ANSWERED = (
    "COUNT", "SUM", "AVG", "MIN", "MAX", "MEDIAN", "PERCENTILE_CONT", "PERCENTILE_DISC",
    "STDDEV", "VARIANCE", "VAR_POP", "VAR_SAMP", "STDDEV_POP", "STDDEV_SAMP",
)  # fmt: skip
_ALSO = frozenset({"current_catalog", "current_role", "user", "coalesce", "greatest", "least",
                   "nullif", "trim", "all", "any", "some", "row"})  # fmt: skip


def check_known_functions(tree: exp.Expr) -> None:
    """Refuse (42883) a call of a function PostgreSQL doesn't have."""
    for node in tree.find_all(exp.Anonymous):
        if isinstance(node.parent, exp.Dot):
            continue  # schema.f(...): its schema decides (refused elsewhere)
        name = function_name(node)
        if name in BUILTIN or name in _ALSO or name in DANGEROUS:  # dblink: an extension's
            continue
        raise UndefinedFunction(f"function {name} does not exist", hint=_hint(name))


def _hint(name: str) -> str:
    answered = {a.lower(): a for a in ANSWERED}
    close = difflib.get_close_matches(name, list(answered), n=1, cutoff=0.6)
    if close:
        mean = f"did you mean {answered[close[0]]}? "
    else:
        near = difflib.get_close_matches(name, sorted(BUILTIN), n=1, cutoff=0.75)
        mean = f"did you mean {near[0]}? " if near else ""
    return mean + "dpsql answers the aggregates " + ", ".join(ANSWERED)

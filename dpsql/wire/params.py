"""Parameter types for ParameterDescription when the client leaves them unspecified (OID 0).

PostgreSQL infers them; drivers such as asyncpg then encode arguments by those types (an ``int``
for a parameter described as ``text`` is refused). dpsql infers from the statement's tree: an explicit
cast (``$1::int``), ``LIMIT``/``OFFSET``, a comparison, ``BETWEEN`` or ``IN`` against a column of the
private table whose declared type family is known, or an operand of an arithmetic operator in an
aggregate's argument (``SUM(quantity / $1)``: the other operand's type, inferred at prepare:
:mod:`dpsql.sql.aggregate_params`). Anything else stays ``text``, which every client can send and
which PostgreSQL coerces like an untyped literal.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from psycopg.postgres import types as pg_types
from sqlglot import exp

from dpsql.errors import InvalidParameter
from dpsql.execute.prepared import DeferredQuery, ExplainQuery, Prepared, PrivateQuery
from dpsql.sql.nodes import POSTGRES

TEXT = 25
_FAMILY = {"integer": 20, "numeric": 1700, "boolean": 16, "text": 25, "date": 1082,
           "timestamp": 1114}  # fmt: skip
_ALIASES = {"int": "int4", "decimal": "numeric", "double": "float8", "float": "float8",
            "char": "bpchar", "character": "bpchar", "string": "text"}  # fmt: skip
_COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def cast_oid(to: exp.DataType) -> int:
    """The type OID of a sqlglot data type (0 if unknown)."""
    if to.this == exp.DataType.Type.ARRAY and to.expressions:
        elem = cast_oid(to.expressions[0])
        info = pg_types.get(elem) if elem else None
        return info.array_oid if info is not None else 0
    name = to.copy()
    name.set("expressions", [])
    text = name.sql(POSTGRES).lower().split("(")[0].strip()
    info = pg_types.get(_ALIASES.get(text, text))
    return info.oid if info is not None else 0


def _column_oid(node: Any, columns: dict[str, Any]) -> int:
    if isinstance(node, exp.Column):
        col = columns.get(node.name.lower())
        if col is not None:
            return _FAMILY.get(col.family, 0)
    if isinstance(node, exp.Cast):
        return cast_oid(node.to)
    return 0


def _infer_one(p: exp.Parameter, columns: dict[str, Any]) -> int:
    parent = p.parent
    if isinstance(parent, exp.Cast) and parent.this is p:
        return cast_oid(parent.to)
    if isinstance(parent, exp.Limit | exp.Offset):
        return 20
    if isinstance(parent, _COMPARE):
        other = parent.left if parent.right is p else parent.right
        return _column_oid(other, columns)
    if isinstance(parent, exp.Between | exp.In) and parent.this is not p:
        return _column_oid(parent.this, columns)
    return 0


def infer_param_types(prepared: Prepared) -> tuple[int, ...]:
    """Inferred OIDs of ``$1..$n`` (``TEXT`` where nothing is known; an EXPLAIN's from the
    statement it explains)."""
    n = prepared.param_count
    tree = prepared.tree
    out = [0] * n
    if tree is None or n == 0:
        return tuple(TEXT for _ in out)
    inner = prepared.inner if isinstance(prepared, ExplainQuery) else prepared
    if isinstance(inner, DeferredQuery):  # SUM(quantity / $1): the types inferred at prepare
        out[: len(inner.param_oids)] = inner.param_oids[:n]
    private = inner.analysis.private if isinstance(inner, PrivateQuery) else None
    columns: dict[str, Any] = dict(private.columns) if private is not None else {}
    for p in tree.find_all(exp.Parameter):
        if not (isinstance(p.this, exp.Literal) and str(p.this.this).isdigit()):
            continue
        i = int(p.this.this) - 1
        if 0 <= i < n and out[i] == 0:
            out[i] = _infer_one(p, columns)
    return tuple(t or TEXT for t in out)


def typed_deferred(prepared: Prepared, oids: Sequence[int]) -> Prepared:
    """``prepared`` with the parameter types of a Parse (``oids``: declared, else inferred):
    a :class:`DeferredQuery` writes its aggregates' values as literals of them, as PostgreSQL
    types ``quantity / $1`` by ``$1``'s type; any other statement as it is."""
    if isinstance(prepared, DeferredQuery) and prepared.param_oids:
        return replace(prepared, param_oids=tuple(oids))
    return prepared


# ---- parameters passed to the upstream as values (the fast path) -------------------------------
def _integer_oid(v: int) -> int:
    """PostgreSQL's type for an integer constant (its parser folds a minus sign into it): int4,
    else int8, else numeric."""
    return 23 if -(2**31) <= v < 2**31 else 20 if -(2**63) <= v < 2**63 else 1700


def upstream_param(value: object) -> tuple[int, bytes | None]:
    """The (type OID, text) that makes PostgreSQL read parameter ``value`` exactly as it reads the
    literal :func:`dpsql.sql.bind.literal` inlines for it: a string is untyped (OID 0, typed by its
    context like ``'text'``), an integer (or a number written without a point or exponent) is
    int4 / int8 / numeric by value, any other number is numeric, a date or timestamp has its
    cast's type. Only built-in types whose input reads no catalog are produced.

    >>> upstream_param(-5), upstream_param(2**40), upstream_param(1.5), upstream_param("x")
    ((23, b'-5'), (20, b'1099511627776'), (1700, b'1.5'), (0, b'x'))

    Raises:
        InvalidParameter: as :func:`~dpsql.sql.bind.literal` (a non-finite number, a NUL
            character, a type without a SQL literal).
    """
    if value is None:
        return 0, None
    if isinstance(value, bool):
        return 16, b"t" if value else b"f"
    if isinstance(value, int):
        return _integer_oid(value), str(value).encode()
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidParameter("parameter values may not contain NUL characters")
        return 0, value.encode()
    if isinstance(value, (float, Decimal)):
        finite = math.isfinite(value) if isinstance(value, float) else value.is_finite()
        if not finite:
            raise InvalidParameter(f"parameter value {value} is not a finite number")
        text = format(value, "f") if isinstance(value, Decimal) else repr(value)
        integral = text.lstrip("-").isdigit()
        return (_integer_oid(int(text)) if integral else 1700), text.encode()
    if isinstance(value, dt.datetime):
        return (1184 if value.tzinfo else 1114), value.isoformat().encode()
    if isinstance(value, dt.date):
        return 1082, value.isoformat().encode()
    raise InvalidParameter(f"parameters of type {type(value).__name__} are not supported")


def upstream_params(values: Sequence[object]) -> tuple[tuple[bytes | None, ...], tuple[int, ...]]:
    """:func:`upstream_param` of each value: (texts, type OIDs)."""
    got = [upstream_param(v) for v in values]
    return tuple(t for _, t in got), tuple(o for o, _ in got)

"""A post-processing query that only lists the released values, answered without PostgreSQL.

Most private statements' post-processing (:func:`dpsql.sql.postprocess.outer_query`) is a plain
projection: ``SELECT _dp._dp_g0 AS "category", _dp._dp_s0 AS "count" FROM (SELECT CAST(u.g0 AS
TEXT) AS _dp_g0, CAST(u.s0 AS BIGINT) AS _dp_s0, ... FROM UNNEST(...))``: no WHERE, HAVING,
ORDER BY, LIMIT, DISTINCT or expression. Its rows are the released rows in order, each value the
cast of its array element, and those casts are computed here, exactly as PostgreSQL computes
them, saving the statement's last round trip:

* a key (released as its canonical text): ``text`` itself; ``smallint``, ``integer``,
  ``bigint`` from digits within the type's range; ``date`` from ``YYYY-MM-DD`` (years 1000 to
  9999: psycopg's :class:`datetime.date`, what the upstream's ISO DateStyle prints);
* ``bigint`` from ``bigint``, ``double precision`` from ``double precision``: the value itself (a float8 goes to PostgreSQL and back as the shortest text that
  reads as the same double, ``extra_float_digits`` 1);
* ``numeric`` from ``double precision``: PostgreSQL's ``float8_numeric`` prints the double with
  ``%.15g`` (DBL_DIG significant digits, correctly rounded, as Python's formatting) and reads
  that text as a numeric, whose display scale is its digits after the point less its exponent,
  never below 0 (``1e+20`` is ``100000000000000000000``), with no negative zero; psycopg reads
  the numeric's text back into :class:`~decimal.Decimal`, so the value here is
  ``Decimal(<that text>)``.

Anything else (another key or statistic type, a value outside the cases above: a bigint past
int8, a non-finite float, a value of another Python type), an output name PostgreSQL would fold
or truncate, interval columns: ``None``, and the query runs in PostgreSQL as before.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dpsql.result import ResultColumn
from dpsql.sql.analysis import Analysis
from dpsql.sql.postprocess import released_key_types

# PostgreSQL's built-in type oids of the casts computed here (pg_type.oid)
_OIDS = {"text": 25, "int2": 21, "int4": 23, "int8": 20, "float8": 701, "numeric": 1700,
         "date": 1082}  # fmt: skip
_KEY_TYPES = ("text", "int2", "int4", "int8", "date")
_RANGES = {
    "int2": (-(2**15), 2**15 - 1),
    "int4": (-(2**31), 2**31 - 1),
    "int8": (-(2**63), 2**63 - 1),
}
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_RID = ResultColumn("_dp_rid", 20, -1)
_WIDE = decimal.Context(prec=1000)  # a double's every integer digit (< 10^309)
_ZERO = decimal.Decimal(0)


@dataclass(frozen=True)
class Projection:
    """Which released value each output column is, and its type: ``("g", i, kind)`` the i-th
    group key (``kind``: one of :data:`_KEY_TYPES`), ``("s", i, kind)`` the i-th statistic
    (``kind``: its column type: int2, int4, int8, float8 or numeric)."""

    columns: tuple[ResultColumn, ...]  # with the row id's last (as the query's)
    picks: tuple[tuple[str, int, str], ...]


def projection(a: Analysis, key_types: Sequence[str]) -> Projection | None:
    """The :class:`Projection` of ``a``'s post-processing over keys of ``key_types``, or None
    when it is anything but a plain projection of released values of the types above."""
    outer = a.outer
    if not isinstance(outer, exp.Select):
        return None
    if any(v for k, v in outer.args.items() if k not in ("expressions", "from_", "from")):
        return None  # WHERE, HAVING, ORDER BY, LIMIT, DISTINCT, GROUP BY, WITH, windows...
    columns: list[ResultColumn] = []
    picks: list[tuple[str, int, str]] = []
    key_types = released_key_types(a, key_types)
    for item in outer.expressions:
        body = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(body, exp.Column) or body.table != "_dp":
            return None
        name = body.name
        if isinstance(item, exp.Alias):
            ident = item.args.get("alias")
            if not isinstance(ident, exp.Identifier) or not ident.quoted:
                return None  # PostgreSQL folds an unquoted name's case
            name = ident.name
        if not name or len(name.encode()) > 63:  # NAMEDATALEN - 1: PostgreSQL truncates
            return None
        src = body.name
        if src.startswith("_dp_g") and src[5:].isdigit():
            i = int(src[5:])
            if i >= len(key_types) or key_types[i] not in _KEY_TYPES:
                return None
            pick = ("g", i, key_types[i])
        elif src.startswith("_dp_s") and src[5:].isdigit():
            i = int(src[5:])
            if i >= len(a.statistics):
                return None
            s = a.statistics[i]
            kind = s.column_type
            if s.func == "mode" or kind not in ("int2", "int4", "int8", "float8", "numeric"):
                return None
            pick = ("s", i, kind)
        else:
            return None
        columns.append(ResultColumn(name, _OIDS[pick[2]], -1))
        picks.append(pick)
    return Projection((*columns, _RID), tuple(picks))


def project(
    p: Projection, groups: Sequence[Sequence[Any]], stats: Sequence[Sequence[Any]]
) -> list[tuple[Any, ...]] | None:
    """The rows PostgreSQL returns for projection ``p`` over the released ``groups`` and
    ``stats`` (each row with its row id last), or None when a value is not one computed here."""
    out = []
    for rid, (keys, values) in enumerate(zip(groups, stats, strict=True)):
        row: list[Any] = []
        for src, i, kind in p.picks:
            v = _key(keys[i], kind) if src == "g" else _cast(values[i], kind)
            if v is _NOT_HERE:
                return None
            row.append(v)
        row.append(rid)
        out.append(tuple(row))
    return out


_NOT_HERE = object()


def _key(v: Any, kind: str) -> Any:
    """A released key (its canonical text, or NULL) cast to its type."""
    if v is None:
        return None
    if type(v) is not str:
        return _NOT_HERE
    if kind == "text":
        return v
    if kind == "date":  # ISO (the upstream's DateStyle), years 1000-9999 as psycopg reads them
        if not _DATE.fullmatch(v) or v < "1000":
            return _NOT_HERE
        try:
            return datetime.date.fromisoformat(v)
        except ValueError:
            return _NOT_HERE
    if not _INTEGER.fullmatch(v):
        return _NOT_HERE
    n = int(v)
    lo, hi = _RANGES[kind]
    return n if lo <= n <= hi else _NOT_HERE


def _cast(v: Any, kind: str) -> Any:
    """A released statistic (int8 or float8 in its array) cast to its type."""
    if v is None:
        return None
    t = type(v)
    if kind in _RANGES:
        return v if t is int and _RANGES[kind][0] <= v <= _RANGES[kind][1] else _NOT_HERE
    if t is not float or not math.isfinite(v):
        return _NOT_HERE
    if kind == "float8":
        return v
    return numeric(v)


def numeric(v: float) -> decimal.Decimal:
    """``CAST(v AS numeric)`` for a finite double, as psycopg reads PostgreSQL's result."""
    d = decimal.Decimal(format(v, ".15g"))
    if d.is_zero():  # no negative zero
        return _ZERO
    exponent = d.as_tuple().exponent  # (an int: d is finite)
    if isinstance(exponent, int) and exponent > 0:  # printed without an exponent: every digit
        d = d.quantize(_ZERO, context=_WIDE)
    return d

"""Group keys as released: one text per group, whatever row PostgreSQL printed it from.

The bounded SQL returns each group's key as ``CAST(key AS TEXT)`` of the row PostgreSQL kept
for the group. For most types equal values print alike, but not for all: NUMERIC keeps each
value's scale (``1.0 = 1.00``), float8 has ``-0 = 0``, ``bpchar`` ignores trailing spaces. A
group's text would then be the text of one of its rows -- which row is the data's choice, so
one unit could change a released key without any noise (the scale of one row's value, or
``CASE WHEN age > 50 THEN 1.0 ELSE 1.00 END``, a bit of one row). So:

- keys the query selects from the data (partition selection) are released as a canonical text
  of their value (:func:`canonical`: trailing zeros of a NUMERIC dropped, ``-0`` as ``0``,
  trailing spaces of a ``bpchar`` dropped, an interval in days and time: ``'24:00:00'`` and
  ``'1 day'`` are one value, ``'1 day'``); types without one (``timetz``: ``12:00+01`` =
  ``11:00+00``; ``jsonb``: ``1.0`` = ``1``) are refused as keys the query selects;
- public keys (the policy's, a key table's, a CASE's literals) are rows' texts filtered to the
  declared texts, so a group prints as its one declared text as long as no two declared keys
  are equal values (:func:`check_declared`: ``1`` and ``1.0`` of a NUMERIC key are refused).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.sql.nodes import POSTGRES

NUMERIC = frozenset({"numeric"})
FLOATS = frozenset({"float4", "float8"})
PADDED = frozenset({"bpchar"})
INTERVALS = frozenset({"interval"})  # '1 day' = '24:00:00', '1 mon' = '30 days'
_CANONICAL = NUMERIC | FLOATS | PADDED | INTERVALS  # types whose texts canonical() rewrites
# equal values that stay different once read into Python (interval: a timedelta, one per value)
NO_CANONICAL_TEXT = frozenset({"timetz", "jsonb"})
# values made of values (a row, an array, a range: `(1.0,x)` = `(1.00,x)`): never keys
NOT_KEYS = frozenset({"record", "array", "range", "numrange", "nummultirange"})


def _not_a_key(pg_type: str) -> bool:
    return pg_type in NOT_KEYS or pg_type.endswith("[]")


_PLAIN_DECIMAL = re.compile(r"-?[0-9]+\.[0-9]+")


_NAMES: dict[int, tuple[exp.Expr, str]] = {}
_NAMES_SIZE = 1024


def key_name(expr: exp.Expr) -> str:
    """A GROUP BY key as the statement wrote it (shortened), for messages. Kept for the node
    itself (an analysis's key, named by each check and the release of one statement): an entry
    holds the node, so its id is not reused while it lives."""
    hit = _NAMES.get(id(expr))
    if hit is not None and hit[0] is expr:
        return hit[1]
    text = expr.sql(POSTGRES)
    name = text if len(text) <= 60 else text[:57] + "..."
    if len(_NAMES) >= _NAMES_SIZE:
        _NAMES.clear()
    _NAMES[id(expr)] = (expr, name)
    return name


def canonical(text: str | None, pg_type: str) -> str | None:
    """One text per value of ``pg_type`` (equal values, one text).

    >>> [canonical(t, "numeric") for t in ("1.00", "1.0", "10.50", "-0.0", "100", "NaN")]
    ['1', '1', '10.5', '0', '100', 'NaN']
    >>> canonical("-0", "float8"), canonical("a  ", "bpchar"), canonical("x", "text")
    ('0', 'a', 'x')
    """
    if text is None:
        return None
    if pg_type in NUMERIC and _PLAIN_DECIMAL.fullmatch(text):
        text = text.rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    if pg_type in FLOATS and text == "-0":
        return "0"
    if pg_type in PADDED:
        return text.rstrip(" ")
    if pg_type in INTERVALS:
        return canonical_interval(text)
    return text


# PostgreSQL's interval output (IntervalStyle postgres, the upstream's: EncodeInterval): signed
# "N year(s)", "N mon(s)", "N day(s)" where not 0, then [+-]H:MM:SS[.ffffff] where not 0 (or
# alone: 00:00:00)
_INTERVAL = re.compile(
    r"(?:(?P<y>[+-]?\d+) years? ?)?(?:(?P<mo>[+-]?\d+) mons? ?)?(?:(?P<d>[+-]?\d+) days? ?)?"
    r"(?:(?P<ts>[+-]?)(?P<h>\d+):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,6}))?)?"
)
_DAY_US = 86_400_000_000


def interval_span(text: str) -> int | None:
    """The value PostgreSQL compares intervals by (interval_cmp_value: months of 30 days, days
    of 24 hours), in microseconds, of an interval as PostgreSQL prints it (IntervalStyle
    postgres); None for 'infinity' / '-infinity' or any other text.

    >>> [interval_span(t) for t in ("1 day", "24:00:00", "1 mon", "30 days", "-1 days +02:00:00")]
    [86400000000, 86400000000, 2592000000000, 2592000000000, -79200000000]
    """
    m = _INTERVAL.fullmatch(text)
    if m is None or not text:
        return None
    months = 12 * int(m["y"] or 0) + int(m["mo"] or 0)
    us = 0
    if m["h"] is not None:
        us = ((int(m["h"]) * 60 + int(m["mi"])) * 60 + int(m["s"])) * 1_000_000
        us += int((m["f"] or "0").ljust(6, "0"))
        us = -us if m["ts"] == "-" else us
    return (months * 30 + int(m["d"] or 0)) * _DAY_US + us


def canonical_interval(text: str) -> str:
    """One text per interval value: equal intervals print differently (``'1 day'`` and
    ``'24:00:00'``, ``'1 mon'`` and ``'30 days'`` are one value, one group), so a group's text
    would be that of whichever of its rows PostgreSQL kept, a choice one row can make
    (review22). The value in days and time, as PostgreSQL prints such an interval: the
    ``days`` and time of ``justify_hours`` with months counted as 30 days, one sign.

    >>> [canonical_interval(t) for t in ("24:00:00", "1 mon", "1 year", "36:30:00.5", "00:00:00")]
    ['1 day', '30 days', '360 days', '1 day 12:30:00.5', '00:00:00']
    >>> canonical_interval("-1 days +02:00:00"), canonical_interval("infinity")
    ('-22:00:00', 'infinity')
    """
    span = interval_span(text)
    if span is None:
        return text  # 'infinity', '-infinity': one text per value already
    sign = "-" if span < 0 else ""
    days, us = divmod(abs(span), _DAY_US)
    parts = [f"{sign}{days} day{'' if days == 1 and not sign else 's'}"] if days else []
    if us or not days:
        secs, frac = divmod(us, 1_000_000)
        mins, sec = divmod(secs, 60)
        hours, mins = divmod(mins, 60)
        tail = f".{frac:06d}".rstrip("0") if frac else ""
        parts.append(f"{sign if us else ''}{hours:02d}:{mins:02d}:{sec:02d}{tail}")
    return " ".join(parts)


def _value(text: str, pg_type: str) -> Any:
    """What ``text`` equals as a value of ``pg_type`` (for the declared-key check)."""
    if pg_type in NUMERIC or pg_type in FLOATS:
        try:
            return Decimal(text)  # Decimal('-0') == Decimal('0'), Decimal('1.0') == 1
        except InvalidOperation:
            return text
    return canonical(text, pg_type)


def check_declared(
    declared: Sequence[Sequence[str | None]], key_types: Sequence[str], names: Sequence[str]
) -> None:
    """Refuse public keys of which two are one value of the key's type (a group would print as
    the text of whichever of its rows PostgreSQL kept: a choice of the data)."""
    for keys, pg_type, name in zip(declared, key_types, names, strict=False):
        _refuse_compound(pg_type, name)
        seen: dict[Any, str] = {}
        for k in keys:
            if k is None:
                continue
            v = _value(k, pg_type)
            if v in seen and seen[v] != k:
                raise UnsupportedSql(
                    f"the keys {seen[v]!r} and {k!r} of {name} are the same {pg_type} value",
                    hint=f"list each value of {name} once (in the policy's keys, its key "
                    "table or the CASE's results)",
                )
            seen.setdefault(v, k)


def _refuse_compound(pg_type: str, name: str) -> None:
    if _not_a_key(pg_type):
        what = "an array" if pg_type.endswith("[]") or pg_type == "array" else f"a {pg_type}"
        raise UnsupportedSql(
            f"GROUP BY {name}: {what} value is not supported as a group key of a private query "
            "(equal values can print differently, and which one is printed depends on the rows)",
            hint=f"group by a text or number computed from {name}",
        )


def check_selectable(key_types: Sequence[str], names: Sequence[str]) -> None:
    """Refuse keys the query selects from the data whose type has no canonical text (before
    any budget is reserved, where the caller knows the types)."""
    for pg_type, name in zip(key_types, names, strict=False):
        _refuse_compound(pg_type, name)
        if pg_type in NO_CANONICAL_TEXT:
            raise UnsupportedSql(
                f"GROUP BY {name}: a {pg_type} key is not released from the data (equal "
                f"{pg_type} values print differently, and which one is printed depends on the "
                "rows)",
                hint=f"group by a text or number computed from {name}, or declare its keys",
            )


def canonical_rows(
    rows: list[tuple[Any, ...]], key_types: Sequence[str], names: Sequence[str]
) -> list[tuple[Any, ...]]:
    """``rows`` with their first ``len(key_types)`` columns (keys the query selects from the
    data) as canonical texts; refused for a key type without one."""
    nk = len(key_types)
    check_selectable(key_types, names)
    if not any(t in _CANONICAL for t in key_types):
        return rows
    return [(*(canonical(r[i], key_types[i]) for i in range(nk)), *r[nk:]) for r in rows]

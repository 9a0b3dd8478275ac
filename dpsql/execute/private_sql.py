"""The bounded SQL a private query runs on private rows (memoized per statement).

Only :func:`dpsql.sql.rewrite.private_query` writes it: contribution-bounded, clamped, with the
selection counts a query that picks its keys from the data needs, and the group keys cast to text.

The text is memoized with :data:`SALT_MARKER` where the salt of the keyed hashes goes
(:mod:`dpsql.sql.rewrite.keyed_hash`); :func:`salted` puts a fresh salt from the CSPRNG in its
place each time the statement runs, so no two executions share a salt (an identical query
answered from the ledger as a free repeat runs nothing and draws nothing).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.dp import rng
from dpsql.execute.prepared import PrivateQuery
from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.rewrite import private_query

if TYPE_CHECKING:
    from dpsql.execute.caches import Memo


SALT_MARKER = "dpsql_salt_" + rng.token_hex(12)
"""Stands for the salt in memoized SQL: random per process, so no statement text contains it."""


def salted(text: str) -> str:
    """``text`` with a fresh salt (16 hex digits from the CSPRNG) in place of the marker."""
    return text.replace(f"'{SALT_MARKER}'", f"'{rng.token_hex(8)}'")


_SALTED = re.compile(r"CONCAT_WS\('\|', '[0-9a-f]{16}',")


def unsalted(text: str) -> str:
    """The memoized form of a :func:`salted` text (for checks that compare SQL texts): every
    keyed hash's salt (``CONCAT_WS('|', '<salt>', ...``) back to the marker."""
    return _SALTED.sub(f"CONCAT_WS('|', '{SALT_MARKER}',", text)


def private_sql(memo: Memo, prepared: PrivateQuery, a: Analysis) -> str:
    """The bounded SQL of analysis ``a`` of ``prepared``, kept in ``memo`` when ``a`` is the
    prepared statement's own (not one with parameters bound or bounds chosen); with
    ``a.unique_unit`` (the catalog proves one row per unit, :mod:`dpsql.execute.unique_units`:
    the caller checked it again) bounding is skipped."""
    key = ("private", prepared.text, a.unique_unit)
    stable = prepared.is_own(a)
    if stable:
        hit = memo.get(key)
        if hit is not None:
            return str(hit)
    text = bounded_sql(prepared, a)
    if stable:
        memo.remember(key, text)
    return text


def bounded_sql(prepared: PrivateQuery, a: Analysis) -> str:
    """The bounded SQL of analysis ``a`` of ``prepared`` (not memoized), salt marker in place."""
    extra: tuple[Measure, ...] = ()
    if a.needs_selection:
        extra = (Measure("count_rows" if a.private.row_privacy else "count_units"),)
    full = Analysis(**{**a.__dict__, "measures": a.measures + extra})
    q = private_query(full, SALT_MARKER)
    if prepared.units:  # synthetic per-unit tables: their per-unit SELECTs (dpsql.sql.per_unit)
        from dpsql.sql.per_unit import substitute

        q = substitute(q, prepared.units)  # type: ignore[assignment]
    n = len(a.group_keys)
    q.set(
        "expressions",
        [
            exp.alias_(exp.cast(e.copy(), "text"), f"_dp_t{i}") if i < n else e
            for i, e in enumerate(q.expressions)
        ],
    )
    return q.sql("postgres")

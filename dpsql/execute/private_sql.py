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
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from sqlglot import exp

from dpsql.dp import rng
from dpsql.execute.prepared import PrivateQuery
from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.nodes import POSTGRES, cast
from dpsql.sql.rewrite import private_query
from dpsql.sql.rewrite.keyed_hash import HASHED_TYPES, ROW_ORDER_TYPES

if TYPE_CHECKING:
    from dpsql.execute.caches import Memo


T = TypeVar("T")

SALT_MARKER = "dpsql_salt_" + rng.token_hex(12)
"""Stands for the salt in memoized SQL: random per process, so no statement text contains it."""


def salted(text: str) -> str:
    """``text`` with a fresh salt (16 hex digits from the CSPRNG) in place of the marker."""
    return text.replace(f"'{SALT_MARKER}'", f"'{rng.token_hex(8)}'")


_SALTED = re.compile(r"(CONCAT_WS\('\|', |HASHTEXTEXTENDED\()'[0-9a-f]{16}'")


def unsalted(text: str) -> str:
    """The memoized form of a :func:`salted` text (for checks that compare SQL texts): every
    keyed hash's salt (``CONCAT_WS('|', '<salt>', ...`` or ``HASHTEXTEXTENDED('<salt>', 0)``)
    back to the marker."""
    return _SALTED.sub(lambda m: f"{m[1]}'{SALT_MARKER}'", text)


def salt_of(text: str) -> str:
    """The salt of a :func:`salted` text (for checks that replace it)."""
    m = _SALTED.search(text)
    assert m is not None, "no salted keyed hash"
    return m[0][len(m[1]) + 1 : -1]


INTEGER_TYPES = frozenset({"int2", "int4", "int8"})


def integer_keys(a: Analysis, key_types: tuple[str, ...]) -> tuple[int, ...]:
    """The group keys of ``a`` with declared ``keys`` whose PostgreSQL type (``key_types``: the
    type probe's, :func:`dpsql.execute.group_keys.group_types`) is an integer type."""
    return tuple(
        i
        for i, (g, t) in enumerate(zip(a.group_keys, key_types, strict=False))
        if g.keys is not None and t in INTEGER_TYPES
    )


def hashed_keys(a: Analysis, key_types: tuple[str, ...]) -> tuple[int, ...]:
    """The group keys of ``a`` whose PostgreSQL type (``key_types``: the type probe's) is one of
    :data:`~dpsql.sql.rewrite.keyed_hash.HASHED_TYPES` (hashed as values when groups are ranked)."""
    return tuple(
        i
        for i, (_, t) in enumerate(zip(a.group_keys, key_types, strict=False))
        if t in HASHED_TYPES
    )


def hashed_key_types(a: Analysis, key_types: tuple[str, ...]) -> tuple[str, ...]:
    """The PostgreSQL types of :func:`hashed_keys`' keys, in the same order."""
    return tuple(key_types[i] for i in hashed_keys(a, key_types))


def row_value_types(value_types: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The probed arguments (SQL texts) with their type, of a type the rows kept per unit can be
    ordered by (:data:`~dpsql.sql.rewrite.keyed_hash.ROW_ORDER_TYPES`)."""
    return tuple(sorted((k, t) for k, t in value_types.items() if t in ROW_ORDER_TYPES))


def integer_values(value_types: dict[str, str]) -> tuple[str, ...]:
    """The quantile arguments (SQL texts) whose PostgreSQL type is an integer type."""
    return tuple(sorted(text for text, t in value_types.items() if t in INTEGER_TYPES))


def private_sql(
    memo: Memo,
    prepared: PrivateQuery,
    a: Analysis,
    *,
    integer_keys: tuple[int, ...] = (),
    integer_values: tuple[str, ...] = (),
    hashed_keys: tuple[int, ...] = (),
    hashed_key_types: tuple[str, ...] = (),
    unit_type: str = "",
    row_value_types: tuple[tuple[str, str], ...] = (),
) -> str:
    """The bounded SQL of analysis ``a`` of ``prepared``, kept in ``memo`` when ``a`` is the
    prepared statement's own (not one with parameters bound) or one kept for reuse
    (:func:`mark_stable`: stored ``auto`` bounds applied); with ``a.unique_unit`` (the catalog
    proves one row per unit, :mod:`dpsql.execute.unique_units`: the caller checked it again)
    bounding is skipped; ``integer_keys``, ``integer_values``, ``hashed_keys``,
    ``hashed_key_types``, ``unit_type``: :attr:`Analysis.integer_keys`,
    :attr:`Analysis.integer_values`, :attr:`Analysis.hashed_keys`, :attr:`Analysis.hashed_key_types`,
    :attr:`Analysis.unit_type`, :attr:`Analysis.row_value_types`."""
    typed = (
        integer_keys
        or integer_values
        or hashed_keys
        or hashed_key_types
        or unit_type
        or row_value_types
    )
    return memoized(
        memo,
        prepared,
        a,
        (
            "private",
            prepared.text,
            a.unique_unit,
            a.proven_bounds,
            integer_keys,
            integer_values,
            hashed_keys,
            hashed_key_types,
            unit_type,
            row_value_types,
        ),
        lambda: bounded_sql(
            prepared,
            _typed(
                a,
                replace(
                    a,
                    integer_keys=integer_keys,
                    integer_values=integer_values,
                    hashed_keys=hashed_keys,
                    hashed_key_types=hashed_key_types,
                    unit_type=unit_type,
                    row_value_types=row_value_types,
                ),
            )
            if typed
            else a,
        ),
    )


def _typed(a: Analysis, typed: Analysis) -> Analysis:
    """``typed``, ``a`` with the SQL's types set (:data:`dpsql.sql.bias.SQL_TYPING`), sharing
    the bias targets already worked out for ``a`` (its plan's) instead of working them out
    again."""
    from dpsql.sql.bias import share_targets

    share_targets(a, typed)
    return typed


def is_stable(memo: Memo, prepared: PrivateQuery, a: Analysis) -> bool:
    """Whether what is derived from ``a`` alone may be memoized under ``id(a)``: the prepared
    statement's own analysis, or one kept for reuse (:func:`mark_stable`). Not one with
    parameters bound (a new one each execution: the memo would only fill up)."""
    return prepared.is_own(a) or memo.get(("stable", id(a))) is a


def memoized(
    memo: Memo,
    prepared: PrivateQuery,
    a: Analysis,
    key: tuple[Hashable, ...],
    make: Callable[[], T],
) -> T:
    """``make()``, a function of ``a`` and ``key`` alone, kept in ``memo`` under ``key`` and
    ``id(a)`` when ``a`` is stable (:func:`is_stable`), else made each time. The memo holds
    ``a`` itself, so its id can't be reused by another analysis while the entry lives."""
    if not is_stable(memo, prepared, a):
        return make()
    full = (*key, id(a))
    hit = memo.get(full)
    if hit is not None and hit[0] is a:
        kept: T = hit[1]
        return kept
    value = make()
    memo.remember(full, (a, value))
    return value


def mark_stable(memo: Memo, a: Analysis) -> None:
    """Let :func:`private_sql` memoize the SQL of ``a``, an analysis kept for reuse (the
    prepared statement's with stored ``auto`` bounds applied:
    :func:`dpsql.execute.private.with_stored_bounds`)."""
    memo.remember(("stable", id(a)), a)


def bounded_sql(prepared: PrivateQuery, a: Analysis) -> str:
    """The bounded SQL of analysis ``a`` of ``prepared`` (not memoized), salt marker in place."""
    extra: tuple[Measure, ...] = ()
    if a.needs_selection:
        extra = (Measure("count_rows" if a.private.row_privacy else "count_units"),)
    # ``a`` itself when nothing is added: what is memoized for it (its bias targets) is reused
    full = Analysis(**{**a.__dict__, "measures": a.measures + extra}) if extra else a
    q = private_query(full, SALT_MARKER)
    if prepared.units:  # synthetic per-unit tables: their per-unit SELECTs (dpsql.sql.per_unit)
        from dpsql.sql.per_unit import substitute

        q = substitute(q, prepared.units)  # type: ignore[assignment]
    n = len(a.group_keys)
    q.set(
        "expressions",
        [
            exp.alias_(cast(e.copy(), "text"), f"_dp_t{i}", copy=False) if i < n else e
            for i, e in enumerate(q.expressions)
        ],
    )
    return q.sql(POSTGRES, copy=False)  # q is this function's own: generated in place

"""How many rows per unit each private table of a join keeps before the join, under ``auto``.

A join of private tables (on their privacy units: :mod:`dpsql.sql.sources`) caps each table at
some number of rows per unit *before* the join, so that one unit with many rows can't multiply
the join's work (n(u)^k joined rows: whether the query times out would say whether such a unit
exists; :func:`dpsql.sql.select_from.check_join_size`). With fixed bounds that number is R
itself (``max_rows_per_unit``), as it always was.

With ``auto`` R (every joined private table leaves ``max_rows_per_unit`` to ``auto``) R is
chosen from the joined rows (:mod:`dpsql.sql.auto_bounds`), so the tables keep a wider, public
``P`` before the join: the largest P with P^k <= 2^16 (``MAX_JOINED_ROWS_PER_UNIT``, the most
joined rows per unit a fixed R may make: 256 for two tables, 40 for three) when the join reads
no public table, 2^14 when it does (128 for two: a factor 4 left for the public tables' fan-out,
:mod:`dpsql.sql.join_fanout`), and at most the tables' ``auto_max_rows_per_unit``: public
numbers of the statement's text and the policy. The chosen R then bounds each unit's joined
rows per group after the join, exactly as it bounds a single table's rows: the sensitivity
argument reads R and G after the join and does not depend on P. What P removes (rows of a unit
beyond P in one table) is not in the removed-mass estimate: the notice states it as an
assumption.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsql.policy.tables import PrivateTable
from dpsql.sql.analysis import Analysis

PRE_JOIN_JOINED = 2**16
"""P^k may not exceed this: a unit's joined rows before bounding (k private tables)."""
WITH_PUBLIC = 2**14
"""... nor this when the join reads a public table too (its fan-out multiplies P^k)."""


def pre_join_rows(privates: Sequence[PrivateTable], public: bool = False) -> int:
    """P for a join of these private tables when all leave R to ``auto`` (else 0: R is kept);
    ``public``: the join reads a public table too.

    >>> from dpsql.policy.tables import PrivateTable
    >>> t = PrivateTable(privacy_unit="u", columns={"u": {"type": "integer", "identifier": True}})
    >>> pre_join_rows([t, t]), pre_join_rows([t, t], True), pre_join_rows([t, t, t])
    (256, 128, 40)
    >>> pre_join_rows([t])
    0
    """
    k = len(privates)
    if k < 2 or not all(p.auto_rows for p in privates):
        return 0
    top = WITH_PUBLIC if public else PRE_JOIN_JOINED
    p = 1
    while (p + 1) ** k <= top:
        p += 1
    return min(p, *(t.auto_max_rows_per_unit for t in privates))


def precap(a: Analysis) -> int:
    """Rows per unit each private table of ``a``'s join keeps before the join."""
    return a.pre_join_rows or a.max_rows


def private_tables(a: Analysis) -> int:
    """How many private tables ``a`` reads (1 without a join)."""
    return sum(1 for _, _, p in a.sources if p is not None) or 1


def privates(a: Analysis) -> list[PrivateTable]:
    """The private tables ``a`` reads."""
    return [p for _, _, p in a.sources if p is not None] or [a.private]


def fallback_note(a: Analysis) -> str:
    """Why an ``auto`` bound keeps today's default of 1: a join of private tables of which some
    leave it to ``auto`` and others fix it (the smallest number is kept, 1 for ``auto``)."""
    if private_tables(a) < 2:
        return ""
    tables = privates(a)
    mixed = [
        name
        for name, auto in (
            ("max_rows_per_unit", [p.auto_rows for p in tables]),
            ("max_groups_per_unit", [p.auto_groups for p in tables]),
        )
        if any(auto) and not all(auto)
    ]
    if not mixed:
        return ""
    what = " and ".join(mixed)
    return (
        f"{what} is auto for some of the joined private tables and a number for others: it "
        "is not chosen from the data and the smallest is kept (1 for auto); set it the same "
        "way for all of them"
    )

"""The bounded SQL a private query runs on private rows (memoized per statement).

Only :func:`dpsql.sql.rewrite.private_query` writes it: contribution-bounded, clamped, with the
selection counts a query that picks its keys from the data needs, and the group keys cast to text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.execute.prepared import Prepared
from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.rewrite import private_query

if TYPE_CHECKING:
    from dpsql.execute.caches import Memo


def private_sql(memo: Memo, prepared: Prepared, a: Analysis) -> str:
    """The bounded SQL of analysis ``a`` of ``prepared``, kept in ``memo`` when ``a`` is the
    prepared statement's own (not one with parameters bound)."""
    key = ("private", prepared.text, prepared.salt)
    if a is prepared.analysis:
        hit = memo.get(key)
        if hit is not None:
            return str(hit)
    text = bounded_sql(prepared, a)
    if a is prepared.analysis:
        memo.remember(key, text)
    return text


def bounded_sql(prepared: Prepared, a: Analysis) -> str:
    """The bounded SQL of analysis ``a`` of ``prepared`` (not memoized)."""
    extra: tuple[Measure, ...] = ()
    if a.needs_selection:
        extra = (Measure("count_rows" if a.private.row_privacy else "count_units"),)
    full = Analysis(**{**a.__dict__, "measures": a.measures + extra})
    q = private_query(full, prepared.salt)
    n = len(a.group_keys)
    q.set(
        "expressions",
        [
            exp.alias_(exp.cast(e.copy(), "text"), f"_dp_t{i}") if i < n else e
            for i, e in enumerate(q.expressions)
        ],
    )
    return q.sql("postgres")

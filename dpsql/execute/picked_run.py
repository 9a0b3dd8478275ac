"""Reading the rows a cut by noisy values left out, for :mod:`dpsql.execute.picked_words`: the
statement's (or a tree leaf's) own post-processing query over the same released arrays without
its LIMIT / OFFSET, one more round trip over released values only (nothing here reads a private
row), and each statistic's noise half-width where one number says it.

A flat statement's rows shown come from its answer (:mod:`dpsql.execute.finish`); a leaf of a
tree statement (:mod:`dpsql.execute.tree`: a series limit's ``ORDER BY SUM(x) DESC LIMIT 5``, a
UNION leaf's own HAVING or LIMIT) has no answer of its own: its rows shown are read from the
same ranked run at its OFFSET and LIMIT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.execute.noise import Release, noise_widths
from dpsql.sql.analysis import Analysis
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan
from dpsql.sql.postprocess import outer_query, outer_sql

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def ranked_sql(a: Analysis, rel: Release) -> str:
    """The outer query with each row's release id, without LIMIT / OFFSET."""
    q, _ = outer_query(a, rel.key_types, with_rid=True)
    q.set("limit", None)
    q.set("offset", None)
    return outer_sql(q, copy=False)


def ranked_rows(engine: EngineContext, a: Analysis, rel: Release, text: str) -> list[int] | None:
    """The release ids of the rows ``text`` (:func:`ranked_sql`) keeps, in its order (None:
    PostgreSQL refused it: the words only, the answer stands)."""
    arrays: list[list[Any]] = [[g[i] for g in rel.groups] for i in range(len(rel.key_types))]
    arrays += [[row[j] for row in rel.stats] for j in range(len(a.statistics))]
    arrays.append(list(range(len(rel.groups))))
    params = {f"_dpsql_arr{i}": arr for i, arr in enumerate(arrays)}
    try:
        return [r[-1] for r in engine.backend.run(text, params, private=False).rows]
    except DpsqlError:
        return None


def widths(a: Analysis, plan: Plan | SetsPlan, conf: float) -> list[float | None]:
    """Each statistic's noise half-width at ``conf`` where one number says it (a COUNT's or a
    SUM's; None: an AVG's, the fallback's two parts, grouping sets' (each set's own))."""
    from dpsql.execute.bias import target_of

    out: list[float | None] = [None] * len(a.statistics)
    for i, s in enumerate(a.statistics):
        if isinstance(plan, Plan):
            b = target_of(s, plan)
            one = len(s.measures) == 1 and not (b is not None and b.adds)  # (the fallback: two)
            w = noise_widths(plan, s.measures, conf) if one else None
            out[i] = w[0] if w else None
    return out


def picked(
    engine: EngineContext,
    a: Analysis,
    rel: Release,
    shown: list[int] | None,
    plan: Plan | SetsPlan,
    conf: float,
    keyed: bool,
    text: Callable[[], str],
) -> tuple[str, ...]:
    """The words for rows an ORDER BY ... LIMIT or a HAVING threshold picked by noisy values.
    ``shown``: the release ids of the rows shown, in order (None: a tree's leaf, read from the
    ranked run at its constant OFFSET / LIMIT); ``text``: the ranked run's SQL (memoized by the
    caller where it can be)."""
    from dpsql.execute.picked_words import Picked, cuts, ordered_term, picked_notices

    if not rel.noise:
        return ()  # (a release stored before its noise intervals were kept)
    having = a.outer.args.get("where") is not None
    if ordered_term(a) is None and not having:
        return ()
    ranked = shown
    # the rows a LIMIT / OFFSET cut (the ranked ones, or those a HAVING kept): none when every
    # group is shown and no HAVING dropped one (no run needed)
    if shown is None or (cuts(a) and (having or len(shown) < len(rel.groups))):
        ranked = ranked_rows(engine, a, rel, text())
        if ranked is None:
            return ()
    assert ranked is not None
    if shown is None:
        shown = _cut(a, ranked)
        if shown is None:
            return ()
    return picked_notices(a, rel, Picked(shown, ranked, conf, widths(a, plan, conf), keyed))


def _cut(a: Analysis, ranked: Sequence[int]) -> list[int] | None:
    """The rows a constant OFFSET / LIMIT shows of ``ranked`` (None: not constants)."""
    from dpsql.execute.picked_words import offset_of

    off = offset_of(a.outer)
    limit = a.outer.args.get("limit")
    n = limit.expression if isinstance(limit, exp.Limit) else None
    if off is None or (n is not None and not _whole(n)):
        return None
    end = len(ranked) if n is None or isinstance(n, exp.Var) else off + int(str(n.this))
    return list(ranked[off:end])


def _whole(n: exp.Expr) -> bool:
    return isinstance(n, exp.Var) or (
        isinstance(n, exp.Literal) and not n.is_string and str(n.this).isdigit()
    )

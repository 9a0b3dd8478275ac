"""Reading the rows a cut by noisy values left out, for :mod:`dpsql.execute.picked_words`: the
statement's (or a tree leaf's) own post-processing query over the same released arrays without
its LIMIT / OFFSET, one more round trip over released values only (nothing here reads a private
row), and each statistic's noise half-width where one number says it (from the released
noise intervals).

A flat statement's rows shown come from its answer (:mod:`dpsql.execute.finish`); a leaf of a
tree statement (:mod:`dpsql.execute.tree`: a series limit's ``ORDER BY SUM(x) DESC LIMIT 5``, a
UNION leaf's own HAVING or LIMIT) has no answer of its own: its rows shown are read from the
same ranked run at its OFFSET and LIMIT.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.execute.noise import Release
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


def widths(a: Analysis, rel: Release, plan: Plan | SetsPlan) -> list[float | None]:
    """Each statistic's noise half-width, where one number says it: the widest of the noise
    intervals the cut compares (:attr:`Release.noise`, the column as released: at the fallback
    both the kept answer's and the estimate's noise, a chosen-bounds or a Gaussian column's own;
    a row's is narrower only where its end is clamped, a count's at 0, or rounded). None: an
    AVG's (not symmetric), grouping sets' (each set's own), none stored, or a row's value not in
    the middle of its interval (:func:`_centred`: the words then state the intervals). Read from the release,
    never from the plan: a free repeat's plan is not the one the release was made with
    (newcomer27 #19: a fallback COUNT said ±25.5 from its plan where its released noise was
    ±345)."""
    out: list[float | None] = [None] * len(a.statistics)
    if not isinstance(plan, Plan):
        return out
    for si, s in enumerate(a.statistics):
        pairs = [
            (iv, stats[si])
            for row, stats in zip(rel.noise, rel.stats, strict=False)
            if si < len(row) and (iv := row[si]) is not None
        ]
        w = max(((iv[1] - iv[0]) / 2 for iv, _ in pairs), default=None)
        if len(s.measures) == 1 and w is not None and math.isfinite(w):
            out[si] = w if all(_centred(iv, v) for iv, v in pairs) else None
    return out


def _centred(iv: tuple[float, float], value: object) -> bool:
    """Whether a released value lies in the middle of its noise interval, up to the rounding of
    both (to about 1/100 of the half-width): "±w" says it. Not at the fallback where the
    estimate of what the bounds left out came out small (the interval stops lower on the value's
    low side: "each ±269" beside its notice's "at most ±409", newcomer27 / closing-note27). A
    count's cut at 0 passes: its upper end is its noise's."""
    if value is None or iv[0] <= 0:  # (a count's cut at 0: its upper end is the noise's)
        return True
    half = (iv[1] - iv[0]) / 2
    return abs((iv[0] + iv[1]) / 2 - float(value)) <= half / 50 + 1e-9  # type: ignore[arg-type]


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
    return picked_notices(a, rel, Picked(shown, ranked, conf, widths(a, rel, plan), keyed))


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

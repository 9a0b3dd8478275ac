"""The private path's last step: the post-processing query over the released values.

A private statement's released groups and statistics (:class:`~dpsql.execute.noise.Release`)
are passed to PostgreSQL as arrays, and the statement's own outer query (HAVING, ORDER BY,
expressions over the noisy values: :func:`dpsql.sql.postprocess.outer_query`) runs over them;
the result is typed, each statistic's interval attached, and the notices (accuracy, auto bounds,
a free repeat at another confidence) added. Nothing here reads a private row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.dp.accounting import Cost
from dpsql.errors import ConnectionException, DpsqlError
from dpsql.execute import privacy_params
from dpsql.execute.accuracy_words import level_text
from dpsql.execute.auto_bounds_text import keyed_groups
from dpsql.execute.backend import Rows
from dpsql.execute.flat_rounding import round_outputs
from dpsql.execute.noise import Release
from dpsql.execute.notices import guard_notices, interval_notices, null_everywhere, plan_words
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.private_sql import memoized
from dpsql.execute.projection import project, projection
from dpsql.execute.withheld_words import reads_withheld, withheld_notices
from dpsql.result import Result, ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.intervals import derived_outputs
from dpsql.sql.plan import Plan
from dpsql.sql.postprocess import (
    interval_base,
    interval_is_integer,
    interval_time_type,
    outer_query,
    outer_sql,
    repeated_names_notice,
    stat_outputs,
)
from dpsql.sql.wording import plain_sql

if TYPE_CHECKING:
    from dpsql.budget.records import Stored
    from dpsql.execute.context import EngineContext


def finish(
    engine: EngineContext,
    prepared: PrivateQuery,
    a: Analysis,
    rel: Release,
    session: SessionContext,
    *,
    describe_only: bool = False,
    plan: Plan | SetsPlan | None = None,
    cached: bool = False,
    auto: AutoBounds | None = None,
    repeat: Stored | None = None,
    told: Mapping[int, str] | None = None,
) -> Result:
    """Run the post-processing query over the released values and type the result.

    ``a`` is the analysis of ``prepared`` the values were released for (with parameters bound,
    a new one each execution: its post-processing SQL is then not memoized); ``repeat``: the
    stored release a free repeat answers from (its notice says so, and which one); ``told``:
    the words :func:`released_words` gave ``rel`` in this execution (the same plan, confidence
    and notes), said as they are instead of made again.
    """
    outputs = stat_outputs(a)
    names = [e.alias_or_name for e in a.outer.expressions]
    derived = [pos for pos, _, _ in derived_outputs(a)]
    # interval columns in output order: (position, array label, low/high values per row)
    ivcols: list[tuple[int, str, list[tuple[float, float] | None]]] = []
    if session.show_intervals:
        ivcols += [(pos, str(si), [iv[si] for iv in rel.intervals]) for pos, si in outputs]
        for k, pos in enumerate(derived):  # (a release cached before these existed has none)
            ivs: list[tuple[float, float] | None] = (
                [row[k] for row in rel.derived] if rel.derived else [None] * len(rel.groups)
            )
            ivcols.append((pos, f"d{k}", ivs))
        ivcols.sort(key=lambda c: c[0])
    icols = [(label, interval_base(names, pos)) for pos, label, _ in ivcols]
    same = repeated_names_notice(
        names,
        [(pos, base) for (pos, _, _), (_, base) in zip(ivcols, icols, strict=True)],
        lambda: _output_texts(prepared, a, names),  # (a sqlglot generation per output)
    )
    with_rid = not a.outer.args.get("distinct") and not describe_only
    text = _outer_sql(engine, prepared, a, rel, with_rid, icols)
    n = len(rel.groups)
    arrays: list[list[Any]] = [[g[i] for g in rel.groups] for i in range(len(rel.key_types))]
    arrays += [[row[j] for row in rel.stats] for j in range(len(a.statistics))]
    for _, label, ivs in ivcols:
        arrays += interval_arrays(a, label, ivs)
    if with_rid or len(arrays) == 0:
        arrays.append(list(range(n)))
    params = {f"_dpsql_arr{i}": arr for i, arr in enumerate(arrays)}
    try:
        rows = _projected(engine, prepared, a, rel) if with_rid and not icols else None
        if rows is None:
            rows = engine.backend.run(text, params, private=False)
    except DpsqlError as e:
        charged = plan is not None and (cached or plan.cost != Cost())
        if engine.ledger is not None and not describe_only and charged:
            say_stored(e, cached)
        raise
    cols = list(rows.columns)
    data = rows.rows
    intervals = None
    rids: list[int] | None = None
    if with_rid:
        cols = cols[:-1]
        rids = [r[-1] for r in data]
        data = [tuple(r[:-1]) for r in data]
    if not describe_only:  # expressions over the statistics: to their noise's resolution
        data = round_outputs(a, rel, data, rids)
    ends = [pos for pos, _, _ in ivcols]
    if ends and len(cols) == len(names) + 2 * len(ends):
        data = null_with_value(data, ends, len(names))
    if rids is not None:
        intervals = []
        for r, rid in zip(data, rids, strict=True):
            row_iv: list[tuple[float, float] | None] = [None] * len(cols)
            for pos, si in outputs:
                row_iv[pos] = rel.intervals[rid][si]
            for k, pos in enumerate(derived):
                if rel.derived:
                    row_iv[pos] = rel.derived[rid][k]
            for pos in range(len(names)):
                if r[pos] is None:  # no value, no interval (as its _low/_high columns)
                    row_iv[pos] = None
            intervals.append(tuple(row_iv))
    stat_mech = dict(outputs)
    typed = tuple(
        ResultColumn(
            c.name,
            c.type_oid,
            c.typmod,
            _mechanism(plan, a, stat_mech[i]) if i in stat_mech else None,
        )
        for i, c in enumerate(cols)
    )
    conf = privacy_params.confidence(engine.policy, session)
    # a free repeat says what its release was told (the bounds stored now may differ)
    told = rel.words if cached else told
    words = interval_notices(a, plan, conf, rel.notes, told, null_everywhere(a, rel.stats))
    undefined = guard_notices(a, data, reads_withheld(a, rel.stats, rids))
    notices = (*rel.notes, *words, *undefined)
    notices = (*notices, *withheld_notices(a, prepared.tree, rel.stats, rel.groups, data, rids))
    notices = (*notices, same) if same else notices
    if plan is not None and not describe_only and rids is not None:
        keyed = auto is not None and bool(keyed_groups(auto, a))
        notices = (*notices, *_picked(engine, prepared, a, rel, rids, plan, conf, keyed))
    if plan is not None and not describe_only:
        taus = rel.thresholds if cached and rel.thresholds is not None else thresholds(plan)
        cut = _selection_noise(plan, conf) if tuple(taus) == thresholds(plan) else None
        notices = (*notices, *_selection_notices(a, taus, len(data), cut, conf))
    if cached and repeat is not None:
        notices = (*notices, repeat.notice())
    if cached and rel.confidence is not None and abs(rel.confidence - conf) > 1e-12:
        notices = (
            *notices,
            f"free repeat of an earlier answer: its intervals are at confidence {rel.confidence:g}, "
            f"not {conf:g} (the answer itself can't change; ask a different query to re-measure)",
        )
    # nothing to measure (GROUP BY / DISTINCT of declared keys alone): charged nothing
    spent = plan is not None and not cached and plan.cost != Cost()
    chose = auto.epsilon_spent if auto is not None else Fraction(0)
    if auto is not None and plan is not None and not describe_only:
        from dpsql.execute.auto_bounds_text import notice
        from dpsql.execute.bias import added_columns

        stored = engine.ledger is not None and engine.policy.repeats != "off"
        adds = added_columns(plan)
        text = notice(auto, plan.epsilon + chose, stored, a.private.privacy_unit, a=a, adds=adds)
        notices = (text, *notices) if text else notices
    return Result(
        typed,
        data,
        f"SELECT {len(data)}",
        epsilon_spent=float(plan.epsilon + chose) if spent and plan else float(chose),
        delta_spent=float(plan.delta) if spent and plan else 0.0,
        cached=cached,
        intervals=intervals,
        notices=notices,
    )


def _picked(
    engine: EngineContext,
    prepared: PrivateQuery,
    a: Analysis,
    rel: Release,
    shown: list[int],
    plan: Plan | SetsPlan,
    conf: float,
    keyed: bool,
) -> tuple[str, ...]:
    """The words for rows an ORDER BY ... LIMIT or a HAVING threshold picked by noisy values
    (:mod:`dpsql.execute.picked_run`, the ranked run's SQL memoized with the statement's)."""
    from dpsql.execute.picked_run import picked, ranked_sql

    def text() -> str:
        key = ("ranked", prepared.text, tuple(rel.key_types))
        return memoized(engine.caches.sql, prepared, a, key, lambda: ranked_sql(a, rel))

    return picked(engine, a, rel, shown, plan, conf, keyed, text)


def _output_texts(prepared: PrivateQuery, a: Analysis, names: Sequence[str]) -> list[str]:
    """Each output as the analyst wrote it (the statement's select list), for notices."""
    tree = prepared.tree
    if isinstance(tree, exp.Select) and len(tree.expressions) == len(names):
        return [plain_sql(e.unalias()) for e in tree.expressions]
    return list(names)


def null_with_value(
    data: Sequence[tuple[Any, ...]], positions: Sequence[int], width: int
) -> list[tuple[Any, ...]]:
    """Rows whose ``_low``/``_high`` columns (after the ``width`` outputs, a pair per output in
    ``positions``' order) are NULL where their output's value is: ``CAST(AVG(x) AS smallint)``
    NULL (its noisy value out of the type's range, :mod:`dpsql.sql.post_guards`), or an AVG
    whose noisy count came out below 1, beside an interval of its released parts read as one
    that holds the truth of a value not shown. Whatever the expression, value and interval
    agree: no value, no interval."""
    out: list[tuple[Any, ...]] = []
    for row in data:
        if any(row[pos] is None for pos in positions):
            cells = list(row)
            for k, pos in enumerate(positions):
                if row[pos] is None:
                    cells[width + 2 * k] = cells[width + 2 * k + 1] = None
            row = tuple(cells)
        out.append(row)
    return out


def say_stored(e: DpsqlError, cached: bool) -> None:
    """Tell the analyst, on an error of the post-processing query (after the release was
    charged and stored), what was spent and what asking again does: a lost connection's
    statement is answered free when asked again; a refused expression over the released values
    (``ts - TIMESTAMP '2000-01-01'`` over a released ``-infinity``: 22008) fails the same way
    again, so the way out is to change it."""
    if isinstance(e, ConnectionException):
        note = (
            "The answer was released and stored before the connection was lost: the same "
            "statement asked again returns it at no cost."
        )
    else:
        when = (
            "This was a free repeat of a stored answer"
            if cached
            else "The answer was released (its privacy budget spent) and stored"
        )
        note = (
            f"{when}; PostgreSQL refused the statement's own expressions over the released "
            "values (group keys and noisy results), so the same statement fails the same way "
            "when asked again. Change the failing expression (for instance guard it: CASE WHEN "
            "isfinite(x) THEN ... END); a changed statement is a new query."
        )
    e.detail = f"{e.detail} {note}" if e.detail else note


def released_words(
    engine: EngineContext, a: Analysis, plan: Plan | SetsPlan, rel: Release, session: SessionContext
) -> Release:
    """``rel`` with the words its plan gives it now (:attr:`Release.words`, ``thresholds``),
    stored with it for its free repeats."""
    from dataclasses import replace

    conf = privacy_params.confidence(engine.policy, session)
    words = plan_words(a, plan, conf, rel.notes)
    return replace(rel, words=words, thresholds=thresholds(plan))


def thresholds(plan: Plan | SetsPlan) -> tuple[int, ...]:
    """The partition selection thresholds of a plan (none: no group chosen from the data)."""
    plans = [sp.plan for sp in plan.sets] if isinstance(plan, SetsPlan) else [plan]
    return tuple(sorted({p.selection.threshold for p in plans if p.selection is not None}))


def _selection_noise(plan: Plan | SetsPlan, conf: float) -> int | None:
    """The half-width at ``conf`` of the noise on the count partition selection compares with
    its threshold (the widest of the grouping sets'), in units rounded up (the words never
    understate it); None without a selection."""
    plans = [sp.plan for sp in plan.sets] if isinstance(plan, SetsPlan) else [plan]
    found = [math.ceil(p.selection.mechanism.half_width(conf)) for p in plans if p.selection]
    return max(found, default=None)


def _selection_notices(
    a: Analysis, taus: Sequence[int], shown: int, noise: int | None = None, conf: float = 0.95
) -> tuple[str, ...]:
    """What partition selection leaves out, said once: groups chosen from the data appear only
    past a noisy threshold, so small groups are missing without a trace (a statement that
    answered 0 rows read as "no such groups"); and the cut is noisy itself (``noise``: its
    count's half-width at the statement's level, when it is the one the release used)."""
    if not taus:
        return ()
    from dpsql.sql.refusal_text import period_hint
    from dpsql.sql.wording import plain_sql

    unit = a.private.privacy_unit
    keys = ", ".join(plain_sql(g.expr, qualified=True) for g in a.group_keys)
    # newcomer30 W2: "(no declared keys)" was said of GROUP BY category, region, amount where
    # category and region have them: which keys come from the data, and which are declared
    named: dict[bool, list[str]] = {True: [], False: []}
    for g in a.group_keys:
        named[g.declared].append(plain_sql(g.expr, qualified=True))
    undeclared, declared = _and(named[False]), named[True]
    whose = (
        f": {undeclared} {'has' if len(named[False]) == 1 else 'have'} no declared keys ("
        f"{_and(declared)} {'does' if len(declared) == 1 else 'do'}, but a group is a "
        "combination of all of them, so the data decide which appear). A"
        if declared
        else " (no declared keys): a"
    )
    tau = taus[-1]
    none = " (none did here)" if shown == 0 else ""
    period = period_hint(a)
    whys = [
        f" The policy gives the keys of {plain_sql(g.expr, qualified=True)}, but {g.why}: they "
        "are not listed (a narrower range in the WHERE clause or a coarser unit brings them "
        "under the limit)."
        for g in a.group_keys
        if g.why is not None
    ]
    why = "".join(whys)
    return (
        f"groups of {keys} come from the data{whose} group is shown only when "
        f"its noisy count of {unit} passes a threshold of {tau:,}{none}, so groups of fewer "
        f"than about {tau:,} {unit} are left out, and no row says so.{_noisy_cut(tau, noise, unit, conf)}"
        f"{why} "
        + (f"{period[0].upper()}{period[1:]}; or declare" if period else "Declare")
        + f" the keys of {undeclared} (keys: or keys_from: in the policy) to get every group, "
        "counted with noise even when it is small or empty",
    )


def _and(names: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _noisy_cut(tau: int, noise: int | None, unit: str, conf: float) -> str:
    """The selection's cut in words: its count has noise of its own, so the cut is noisy."""
    if noise is None:
        return (
            " The cut is noisy itself: the count it compares is drawn apart from the values "
            "shown, with noise of its own, so a group somewhat above the threshold can be left "
            "out and one below it shown."
        )
    return (
        f" The cut is noisy itself: the count it compares is drawn apart from the values shown, "
        f"with noise of its own (±{noise:,} {unit} at {level_text(conf)}), so a group of up to about "
        f"{tau + noise:,} {unit} can be left out and one of as few as {max(1, tau - noise):,} "
        "shown."
    )


def interval_arrays(
    a: Analysis, label: str, ivs: Sequence[tuple[float, float] | None]
) -> list[list[Any]]:
    """The low and high ends of one output's intervals as the arrays ``outer_query`` reads
    (label: a statistic index, or ``d<k>`` for a derived output)."""
    if interval_is_integer(a, label) or interval_time_type(a, label) == "date":
        # bigint ends, or whole days (from_epoch: ::int), rounded outwards (never inwards)
        return [
            [_whole(iv[0], math.floor) if iv else None for iv in ivs],
            [_whole(iv[1], math.ceil) if iv else None for iv in ivs],
        ]
    # an infinite end: no bound on that side (the end a disowned interval no longer has)
    return [
        [iv[0] if iv and math.isfinite(iv[0]) else None for iv in ivs],
        [iv[1] if iv and math.isfinite(iv[1]) else None for iv in ivs],
    ]


def _whole(x: float, rounding: Callable[[float], int]) -> int | None:
    """An interval end as a bigint (NULL when it is not finite: no bound on that side)."""
    return rounding(x) if math.isfinite(x) else None


def _outer_sql(
    engine: EngineContext,
    prepared: PrivateQuery,
    a: Analysis,
    rel: Release,
    with_rid: bool,
    icols: list[tuple[str, str]],
) -> str:
    """The post-processing SQL, memoized for a stable analysis (the prepared statement's own, or
    one with stored ``auto`` bounds applied: :func:`~dpsql.execute.private_sql.memoized`)."""

    def make() -> str:
        q, _ = outer_query(a, rel.key_types, with_rid=with_rid, interval_columns=icols)
        return outer_sql(q, copy=False)  # q is make's own

    key = ("outer", prepared.text, tuple(rel.key_types), with_rid, tuple(icols))
    return memoized(engine.caches.sql, prepared, a, key, make)


def _projected(
    engine: EngineContext, prepared: PrivateQuery, a: Analysis, rel: Release
) -> Rows | None:
    """The post-processing query's rows computed here when it only lists released values
    (:mod:`dpsql.execute.projection`: exactly PostgreSQL's), else None."""
    key = ("projection", prepared.text, tuple(rel.key_types))
    (p,) = memoized(engine.caches.sql, prepared, a, key, lambda: (projection(a, rel.key_types),))
    if p is None:
        return None
    data = project(p, rel.groups, rel.stats)
    return None if data is None else Rows(p.columns, data, f"SELECT {len(data)}")


def _mechanism(plan: Plan | SetsPlan | None, a: Analysis, si: int) -> str | None:
    """The mechanism that released statistic ``si`` (selection ones by their own name)."""
    if plan is None:
        return None
    mp = plan.measure_plan(a.statistics[si].measures[0])
    return mp.mechanism.name if mp.measure.selected else plan.mechanism

"""Running a statement of several DP leaves (:mod:`dpsql.sql.tree`): one charge, then
post-processing in PostgreSQL over the leaves' noisy rows.

Steps 1 and 2 are :mod:`dpsql.execute.tree_prepare`'s.

1. Each leaf is prepared as a private statement of its own (the flat private path: analysis,
   bounded SQL, key types, declared keys).
2. The statement's (epsilon, delta) is split over the leaves (:func:`dpsql.sql.tree.split_budget`)
   and each leaf is planned at its share by the engine's planner.
3. Each leaf is looked up in the free-repeat store under its own key; the leaves not stored are
   charged together, once (the sum of their costs), before any of them reads data.
4. Each charged leaf runs its bounded SQL and is released with noise (the flat path's
   functions); the spend is confirmed and every leaf's answer stored in one ledger transaction
   before any row leaves.
5. The post-processing statement runs upstream with each leaf replaced by its released rows: the
   leaf's own post-processing SELECT over typed arrays of its noisy values (passed as
   parameters, never formatted into the SQL: :mod:`dpsql.execute.tree_post`). PostgreSQL
   applies its own types and rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.budget.records import Stored, say_spent
from dpsql.dp.accounting import sequential
from dpsql.errors import DpsqlError, InternalError, UpstreamError
from dpsql.execute import fetch_stored, privacy_params
from dpsql.execute.auto_bounds import choose_reserved
from dpsql.execute.auto_bounds_text import notice
from dpsql.execute.backend import CancelToken
from dpsql.execute.finish import say_stored
from dpsql.execute.in_flight import one_release
from dpsql.execute.noise import Release
from dpsql.execute.notices import interval_notices
from dpsql.execute.prepared import PrivateQuery, TreeQuery
from dpsql.execute.private import (
    auto_cache_key,
    cache_key,
    check_having_constants,
    check_join_fanout,
    check_leaf_keys,
    delta_for_rho,
    flat_key,
    measure,
    payload,
    release_measured,
    settle_failed,
    slot,
)
from dpsql.execute.timing import timing_of
from dpsql.execute.tree_budget import LeafBudget, LeafPlan, leaf_budget, resolved_plan
from dpsql.execute.tree_intervals import (
    Attached,
    attach,
    leaf_shape,
    post_sql_iv,
    reported,
    upstream_fallback,
)
from dpsql.execute.tree_levels import counted_reads, key_rows, leaf_levels, static_reads
from dpsql.execute.tree_post import leaf_query, leaf_row_bound, run_post
from dpsql.execute.tree_prepare import bound_split, leaf_plans
from dpsql.execute.tree_rounding import column_resolutions, round_rows
from dpsql.result import IntervalFallback, Result
from dpsql.session import SessionContext
from dpsql.sql.auto_bounds import AutoBounds
from dpsql.sql.bind import literal
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.interval_sql import Held
from dpsql.sql.postprocess import outer_sql
from dpsql.sql.tree import Split
from dpsql.sql.tree_intervals import IvPlan, plan_intervals

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def _declared(engine: EngineContext, plan: LeafPlan) -> Any:
    if isinstance(plan, SetsPlan):
        return [engine.declared_keys(sp.plan.analysis) for sp in plan.sets]
    return engine.declared_keys(plan.analysis)


def run_tree(
    engine: EngineContext,
    prepared: TreeQuery,
    session: SessionContext,
    params: Sequence[object],
    cancel: CancelToken | None,
) -> Result:
    """Charge once, release every leaf, post-process in PostgreSQL (module docstring).

    An identical statement in flight in another session (a dashboard's tiles) is waited for
    (:func:`dpsql.execute.in_flight.one_release`, the flat path's slot): its leaves' bounds
    and answers are then stored, and this one's are free repeats (newcomer21 #28: three
    sessions at once were charged three times for one answer)."""
    if engine.ledger is None:
        return _run_tree(engine, prepared, session, params, cancel)
    key = slot(engine, session, _tree_key(engine, prepared, session, params))
    with one_release(key, cancel, timing_of(engine)):
        return _run_tree(engine, prepared, session, params, cancel)


def _tree_key(
    engine: EngineContext, prepared: TreeQuery, session: SessionContext, params: Sequence[object]
) -> str:
    """What makes two tree statements the same release: the canonical statement, parameters,
    the session's privacy settings and the analyst's view (only a slot's name: two statements
    sharing it just run one after the other)."""
    from dpsql.sql.canonical import cache_key as canonical_key
    from dpsql.sql.canonical import canonical

    memo = ("tree-canonical", id(prepared.tree))
    hit = engine.caches.sql.get(memo)
    if hit is None or hit[0] is not prepared.tree:
        hit = (prepared.tree, canonical(prepared.tree))  # holds the tree: its id can't be reused
        engine.caches.sql.remember(memo, hit)
    return canonical_key(
        hit[1], params, session.epsilon or 0, session.delta or 0, f"tree:{session.mechanism}",
        extra=engine.repeat_digest(prepared.scope),
    )  # fmt: skip


def _run_tree(
    engine: EngineContext,
    prepared: TreeQuery,
    session: SessionContext,
    params: Sequence[object],
    cancel: CancelToken | None,
) -> Result:
    from dpsql.execute import shadows

    sp, probes = bound_split(engine, prepared, params)
    shares = leaf_plans(engine, probes, session)  # what is reserved for each leaf
    key_tables = tuple(
        g.keys_from.rsplit(".", 1)[0]
        for leaf in probes
        if leaf.analysis is not None
        for g in leaf.analysis.group_keys
        if g.keys_from
    )
    shadows.check(engine, prepared.text, prepared.tree, key_tables, engine.scope(session.analyst))
    confidence = privacy_params.confidence(engine.policy, session)  # before any budget is reserved
    budgets = [
        leaf_budget(engine, leaf, p, session) for leaf, p in zip(probes, shares, strict=True)
    ]
    run = _Run(engine, sp, list(probes), budgets, session, prepared.scope, prepared.text)
    ivplan, levels, reads, fallbacks = _iv_plan(engine, sp, run, confidence, session.show_intervals)
    ledger = engine.ledger
    for i in range(len(probes)):
        link = sp.link(i)
        if link is None or run.releases[link.source] is not None:
            run.resolve(i)  # its SQL is known now: a stored answer is free
    todo = [i for i, r in enumerate(run.releases) if r is None]
    if todo:
        check_having_constants(engine, prepared)  # PostgreSQL's words for 1/0, before the charge
    for i in todo:
        check_join_fanout(engine, shares[i].analysis)  # public tables only, before the charge
        check_leaf_keys(engine, probes[i], shares[i].analysis)  # types and keys, no row read
    reservation, held = _reserve(engine, prepared, session, [budgets[i] for i in todo])
    done = 0
    try:
        chosen = {}
        for i in todo:  # every leaf's bounds, before any answer is measured
            if budgets[i].choosing:
                p = budgets[i].pend
                assert p is not None
                mine, held = held[: len(p.missing)], held[len(p.missing) :]
                chosen[i] = choose_reserved(
                    engine, probes[i], shares[i].analysis, p, shares[i].epsilon, mine, cancel
                )
        for i in todo:  # in order: a series limit's source leaf is released before it
            if run.keys[i] is None and sp.link(i) is not None:
                run.resolve(i, lookup=False)
            run.plan(i, chosen.get(i))
            got = measure(engine, run.leaves[i], run.plans[i], cancel)
            done += 1
            run.releases[i] = release_measured(
                engine,
                run.plans[i],
                got,
                engine.group_types(run.leaves[i], run.plans[i].analysis),
                _declared(engine, run.plans[i]),
                levels[i],  # 1 - alpha/k when its values enter an output k at a time
            )
    except BaseException as error:
        for r in held:  # bound choices never made: nothing read for them
            if ledger is not None:
                ledger.refund(r)
        if ledger is not None and reservation is not None:
            if done:  # a leaf read the private rows: spent, whatever failed after
                ledger.commit(reservation)
                say_spent(error)
            else:
                settle_failed(ledger, reservation, error)
        raise
    if ledger is not None and reservation is not None:
        stored_first = ledger.commit_answers(
            reservation,
            [(str(run.keys[i]), payload(run.releases[i])) for i in todo],  # type: ignore[arg-type]
        )
        for i, earlier in zip(todo, stored_first, strict=True):
            if earlier is not None:  # a concurrent identical leaf stored its answer first
                run.releases[i] = Release.from_json(json.loads(earlier))
    final = [r for r in run.releases if r is not None]
    stored = ledger is not None and engine.policy.repeats != "off"
    notices = leaf_notices(sp, run, set(todo), stored, session, engine)
    try:
        if ivplan is not None:
            got, failed = _post_iv(engine, sp, ivplan, run.plans, final, confidence, reads, cancel)
            columns, rows, intervals = got.columns, got.rows, got.intervals
            notices = (*notices, *(f"interval columns: {n}" for n in got.notes))
            fallbacks += (failed,) if failed is not None else ()
        else:
            rows_out = run_post(engine, sp, run.plans, final, cancel)
            columns, rows, intervals = rows_out.columns, rows_out.rows, None
    except DpsqlError as e:  # after the leaves' answers were charged and stored
        if engine.ledger is not None:
            say_stored(e, cached=not todo)
            fetch_stored.hint(e, _offers(engine, sp, run, prepared.scope))
        raise
    reported(fallbacks, prepared.fingerprint)
    outputs = _noisy_outputs(engine, sp, run, ivplan)
    rows = round_rows([c.name for c in columns], rows, column_resolutions(outputs, final))
    return Result(
        columns,
        rows,
        f"SELECT {len(rows)}",
        epsilon_spent=float(sum((shares[i].epsilon for i in todo), Fraction(0))),
        delta_spent=float(sum((shares[i].delta for i in todo), Fraction(0))),
        cached=not todo,
        notices=notices,
        intervals=intervals,
        interval_fallbacks=fallbacks,
    )


def _offers(engine: EngineContext, sp: Split, run: _Run, scope: str) -> list[tuple[str, str]]:
    """Each leaf's statement that returns its stored released rows free, by label
    (:mod:`dpsql.execute.fetch_stored`)."""
    out = []
    for i, leaf in enumerate(sp.leaves):
        key = run.keys[i]
        if not key or sp.link(i) is not None or i >= len(run.plans):
            continue  # a series limit's leaf reads keys this statement chose: not offered
        a = run.plans[i].analysis
        eps = run.budgets[i].share.epsilon
        text = leaf.sql("postgres")
        got = fetch_stored.offer(
            engine, run.session, scope, text, a, key, eps, partial(flat_key, engine)
        )
        if got is not None:
            label = sp.labels[i] if i < len(sp.labels) else f"leaf {i}"
            out.append((label, got))
    return out


def _noisy_outputs(
    engine: EngineContext, sp: Split, run: _Run, plan: IvPlan | None
) -> list[tuple[str, Held | None]]:
    """The statement's noisy output columns and the leaves each reads (None: not known), from
    the interval columns' plan (made here without ``dpsql.show_intervals``: the rewrite alone,
    no SQL)."""
    if plan is None:
        n = len(run.plans)
        labels = [sp.labels[i] if i < len(sp.labels) else f"leaf {i}" for i in range(n)]
        shapes = [
            leaf_shape(p.analysis, labels[i], leaf_row_bound(engine, p.analysis))
            for i, p in enumerate(run.plans)
        ]
        plan = plan_intervals(sp.post, shapes)
    return [(o.name, o.info if isinstance(o.info, Held) else None) for o in plan.outputs]


def _iv_plan(
    engine: EngineContext, sp: Split, run: _Run, confidence: float, show: bool
) -> tuple[IvPlan | None, list[float], dict[int, int | None], tuple[IntervalFallback, ...]]:
    """With ``dpsql.show_intervals``: the interval columns' plan, each leaf's interval level,
    the leaf intervals an output row reads at most, by output
    (:mod:`dpsql.execute.tree_intervals`), and the fallbacks so far; else None and the
    session's confidence."""
    n = len(run.plans)
    if not show:
        return None, [confidence] * n, {}, ()
    labels = [sp.labels[i] if i < len(sp.labels) else f"leaf {i}" for i in range(n)]
    bounds = [leaf_row_bound(engine, p.analysis) for p in run.plans]
    shapes = [leaf_shape(p.analysis, labels[i], bounds[i]) for i, p in enumerate(run.plans)]
    plan = plan_intervals(sp.post, shapes)
    static = static_reads(plan, bounds)
    counted, failed = (
        _counted(engine, plan, run, bounds) if _reads_many(plan, bounds) else ({}, None)
    )
    reads = {h: counted.get(h) or k for h, k in static.items()}
    fallbacks = tuple(f for f in (plan.fallback, failed) if f is not None)
    return plan, leaf_levels(plan, bounds, confidence, counted), reads, fallbacks


def _reads_many(plan: IvPlan, bounds: Sequence[int | None]) -> bool:
    """Whether an output aggregates over a leaf of several known rows (else the static count
    is exact: one value per leaf a row reads)."""
    return any(
        every and (bounds[leaf] or 0) > 1
        for o in plan.outputs
        if isinstance(o.info, Held)
        for leaf, every in o.info.events
    )


def _counted(
    engine: EngineContext, plan: IvPlan, run: _Run, bounds: Sequence[int | None]
) -> tuple[dict[int, int], IntervalFallback | None]:
    """The leaf intervals each output's rows read, counted by the rewritten post-processing
    over the leaves' public rows (:func:`~dpsql.execute.tree_levels.key_rows`), before any
    release; only for outputs whose leaves' rows are all known (static count not None). If
    PostgreSQL refuses that query: nothing counted (the static count holds) and why."""
    analyses = [p.analysis for p in run.plans]
    rels = [
        key_rows(a, engine.group_types(leaf, a), _declared(engine, p))
        for leaf, a, p in zip(run.leaves, analyses, run.plans, strict=True)
    ]
    plain = [leaf_query(a, rel, 0) for a, rel in zip(analyses, rels, strict=True)]
    text, params = post_sql_iv(plan, plain, analyses, rels, [Decimal(1)] * len(rels))
    try:
        got = engine.backend.run(text, params, private=False)
    except UpstreamError as e:  # the statement's own error, if any, is reported when it runs
        return {}, upstream_fallback(e, "counting the leaf values an output row reads")
    static = static_reads(plan, bounds)
    counted = counted_reads(plan, got.columns, got.rows)
    return {h: k for h, k in counted.items() if static.get(h) is not None}, None


def _post_iv(
    engine: EngineContext,
    sp: Split,
    plan: IvPlan,
    plans: Sequence[LeafPlan],
    releases: Sequence[Release],
    confidence: float,
    reads: dict[int, int | None],
    cancel: CancelToken | None = None,
) -> tuple[Attached, IntervalFallback | None]:
    """The post-processing with the interval columns; if PostgreSQL refuses the rewritten
    query, the statement's own (its error, if any, is the user's) with NULL intervals, and
    why (:func:`~dpsql.execute.tree_intervals.upstream_fallback`)."""
    analyses = [p.analysis for p in plans]
    plain = [leaf_query(a, rel, 0) for a, rel in zip(analyses, releases, strict=True)]
    text, params = post_sql_iv(plan, plain, analyses, releases)
    labels = list(sp.labels) or [f"leaf {i}" for i in range(len(plans))]
    try:
        got = engine.backend.run(text, params, private=False, cancel=cancel)
    except UpstreamError as e:
        got = run_post(engine, sp, plans, releases, cancel)
        failed = upstream_fallback(e, "the interval columns' query")
        out = attach(
            plan, got.columns, got.rows, releases, labels, confidence, failed.reason, reads
        )
        return out, failed
    return attach(plan, got.columns, got.rows, releases, labels, confidence, reads=reads), None


def _reserve(
    engine: EngineContext, prepared: TreeQuery, session: SessionContext, todo: Sequence[LeafBudget]
) -> tuple[Any, list[Any]]:
    """Reserve the leaves' bound choices and answers in one ledger transaction (nothing read
    yet): the answers' reservation (None without a ledger or leaves to run), and one
    reservation per bound choice, in leaf order."""
    ledger = engine.ledger
    if ledger is None or not todo:
        return None, []
    answers = [b.answer for b in todo]
    rho_deltas = [d for d in (delta_for_rho(p) for p in answers) if d is not None]
    part = (
        sequential(p.cost for p in answers),
        "+".join(sorted({p.mechanism for p in answers})),
        sum(rho_deltas, Fraction(0)) if rho_deltas else None,
    )
    bounds = [(c, "auto_bound", None) for b in todo for c in b.bound_costs()]
    if not bounds:
        res = ledger.reserve(
            session.analyst,
            part[0],
            prepared.fingerprint,
            delta_for_rho=part[2],
            mechanism=part[1],
            statement=prepared.text,
        )
        return res, []
    got = ledger.reserve_together(
        session.analyst, [*bounds, part], prepared.fingerprint, statement=prepared.text
    )
    return got[-1], list(got[:-1])


def leaf_notices(
    sp: Split,
    run: _Run,
    measured: set[int],
    stored: bool,
    session: SessionContext,
    engine: EngineContext,
) -> tuple[str, ...]:
    """Each leaf's notices in its own name (its ``auto`` bounds when chosen now, its accuracy
    summary), and what they cover: the leaves' released values, not the statement's output
    that PostgreSQL computes from them."""
    conf = privacy_params.confidence(engine.policy, session)
    out: list[str] = []
    for i, rel in enumerate(run.releases):
        name = sp.labels[i] if i < len(sp.labels) else f"leaf {i}"
        b = run.budgets[i]
        lines: list[str] = []
        used = run.bounds[i]
        if b.auto and i in measured and used is not None:
            unit = run.plans[i].analysis.private.privacy_unit
            whose = "this part's" if len(run.releases) > 1 else "this statement's"
            text = notice(used, b.share.epsilon, stored, unit, whose)
            lines += [text] if text else []
        if rel is not None:
            lines += list(rel.notes)
        repeat = run.repeats[i]
        if repeat is not None and i not in measured:
            lines.append(repeat.notice())
        plan = run.plans[i]
        level = rel.confidence if rel is not None and rel.confidence is not None else conf
        notes = rel.notes if rel is not None else ()
        lines += list(interval_notices(plan.analysis, plan, level, notes))
        out += [f"{name}: {line}" for line in lines]
    if out and session.show_intervals:
        out.append(
            "these intervals are of each aggregate's released values per group, at the level "
            "each states; the statement's own intervals are its <column>_low/_high columns "
            "(below: what each holds, or why it is NULL)"
        )
    elif out:
        out.append(
            "these intervals are of each aggregate's released values per group (as that "
            "aggregate alone would return them); the statement's output is computed from them "
            "in PostgreSQL and carries no interval of its own: a SUM of k released values "
            "lies within the SUM of their ends with probability at least 1 - k x "
            f"{1 - conf:.2g} (union bound); SET dpsql.show_intervals = on returns the "
            "statement's own intervals as columns where one can be computed"
        )
    return tuple(out)


class _Run:
    """The leaves of one execution: prepared, planned, their free-repeat keys and releases.

    A series-limit leaf (``Split.link``) is prepared for real only once its source leaf is
    released (:meth:`resolve`); until then its probe stands for it."""

    def __init__(
        self,
        engine: EngineContext,
        sp: Split,
        leaves: list[PrivateQuery],
        budgets: list[LeafBudget],
        session: SessionContext,
        scope: str,
        text: str = "",
    ) -> None:
        self.engine, self.sp, self.session, self.scope = engine, sp, session, scope
        self.text = text  # the statement the analyst ran (its repeats' history rows)
        self.leaves, self.budgets = leaves, budgets
        self.plans: list[LeafPlan] = [b.answer for b in budgets]
        self.releases: list[Release | None] = [None] * len(leaves)
        self.keys: list[str | None] = [None] * len(leaves)
        self.bounds: list[AutoBounds | None] = [None] * len(leaves)  # the auto bounds used
        self.repeats: list[Stored | None] = [None] * len(leaves)  # a free repeat's release

    def resolve(self, i: int, lookup: bool = True) -> None:
        """Leaf i's real SQL (a series limit's from its source's released keys), its
        free-repeat key, and its stored answer if any (before the charge: the leaves whose
        source is known then; ``lookup`` False after the charge)."""
        engine, link = self.engine, self.sp.link(i)
        if link is not None:
            values = self._released_keys(link.source, link.column)
            leaf = engine.prepare_in_scope(link.instantiate(values).sql("postgres"), self.scope)
            if not isinstance(leaf, PrivateQuery):
                raise InternalError("a series limit's leaf is not one private block")
            self.leaves[i] = leaf
        ledger = engine.ledger
        if ledger is None:
            self.keys[i] = ""
            return
        b = self.budgets[i]
        if b.auto:  # as a flat statement's: its own epsilon, whatever the bounds cost
            key = auto_cache_key(engine, self.leaves[i], b.share, (), self.session.mechanism)
        else:
            key = cache_key(engine, self.leaves[i], self._share_plan(i), ())
        self.keys[i] = key
        if lookup:
            stored = ledger.lookup_stored(self.session.analyst, key, self.text or None)
            if stored is not None:
                self.releases[i] = Release.from_json(json.loads(stored.payload))
                self.repeats[i] = stored
                self.plans[i] = self._share_plan(i)

    def _share_plan(self, i: int) -> LeafPlan:
        """The leaf's real plan without ``auto`` bounds at its share (its free-repeat key)."""
        b = self.budgets[i]
        a = self.leaves[i].analysis
        if a is b.share.analysis:
            return b.share
        return self.engine.plan_analysis(a, b.share.epsilon, b.share.delta, self.session.mechanism)

    def plan(self, i: int, bounds: AutoBounds | None) -> None:
        """Leaf i's plan for running, within what was reserved for its answer."""
        plan, used = resolved_plan(
            self.engine, self.leaves[i], self.budgets[i], bounds, self.session
        )
        if not _within(plan.cost, self.budgets[i].answer.cost):
            raise InternalError("a leaf's plan costs more than was reserved for its answer")
        self.plans[i], self.bounds[i] = plan, used

    def _released_keys(self, source: int, column: str) -> list[exp.Expr]:
        """The distinct non-null values of ``column`` in leaf ``source``'s released rows (after
        its own HAVING/ORDER BY/LIMIT), as literals: public, post-processed data."""
        rel = self.releases[source]
        assert rel is not None
        a = self.plans[source].analysis
        q, arrays = leaf_query(a, rel, 0)
        outer = (
            exp.select(exp.column(column, "_dp_src", quoted=True))
            .distinct()
            .from_(q.subquery("_dp_src"))
            .where(
                exp.Not(
                    this=exp.Is(
                        this=exp.column(column, "_dp_src", quoted=True), expression=exp.Null()
                    )
                )
            )
        )
        params = {f"_dpsql_arr{k}": arr for k, arr in enumerate(arrays)}
        rows = self.engine.backend.run(outer_sql(outer), params, private=False).rows
        return [literal(r[0]) for r in sorted(rows, key=lambda r: str(r[0]))]


def _within(cost: Any, reserved: Any) -> bool:
    return bool(
        cost.epsilon <= reserved.epsilon
        and cost.delta <= reserved.delta
        and cost.rho <= reserved.rho
    )


__all__ = ["run_tree"]

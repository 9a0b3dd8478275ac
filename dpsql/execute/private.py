"""The private path: plan, charge, run the bounded SQL, add noise, post-process.

The spend is reserved before the private query runs and confirmed before any noisy row leaves;
a failure before any result is computed is refunded; anything after counts as spent. A statement
that chooses ``auto`` bounds reserves its whole cost (the choices and the answer) in one ledger
transaction before it reads any data: one statement, one charge (:func:`run_private`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any

from dpsql.budget.records import before_the_data
from dpsql.dp.accounting import Cost
from dpsql.errors import DpsqlError
from dpsql.execute import planning
from dpsql.execute.backend import CancelToken, type_name
from dpsql.execute.finish import finish, released_words
from dpsql.execute.grouping_sets import release_sets, run_sets
from dpsql.execute.noise import Release, release
from dpsql.execute.precheck import check_keys, precheck
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.private_sql import salted
from dpsql.execute.repeat_keys import (
    applied_bounds,
    auto_cache_key,
    bounds_key,
    cache_key,
    payload,
)
from dpsql.execute.statement_run import StatementRun, settle
from dpsql.result import Result
from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan

if TYPE_CHECKING:
    from dpsql.budget.records import Reservation
    from dpsql.execute import auto_bounds as auto_bounds_module
    from dpsql.execute.context import EngineContext


def delta_for_rho(plan: Plan | SetsPlan) -> Fraction | None:
    """The part of the query's delta at which its Gaussian rho was calibrated."""
    if isinstance(plan, SetsPlan):
        return plan.delta_for_rho
    if plan.mechanism != "gaussian":
        return None
    return plan.delta - (plan.selection.delta if plan.selection is not None else 0)


def run_private(stmt: StatementRun[PrivateQuery]) -> Result:
    from dpsql.execute import auto_bounds

    engine, prepared, session = stmt.engine, stmt.prepared, stmt.session
    plan = planning.plan(engine, prepared, session, stmt.params, probe=True)
    a = plan.analysis
    pend = auto_bounds.pending(engine, prepared, session, a)
    if not pend.needed:
        return _run_planned(stmt, plan, None)
    key = auto_cache_key(engine, prepared, plan, stmt.params, session.mechanism)
    if engine.ledger is None:
        return _run_auto(stmt, plan, pend, key)
    # the whole statement (its bound choices, answer and commit) holds the in-flight slot: an
    # identical statement run at once waits, then finds the choices and the answer stored (a
    # free repeat) instead of choosing and answering again (newcomer21 #28: 4 sessions, 4
    # charges for one answer)
    with stmt.one_release(key):
        if pend.missing:  # read again: the statement waited for may have stored them
            pend = auto_bounds.pending(engine, prepared, session, a)
            pend = auto_bounds.with_fallbacks(engine, prepared, session, pend, plan.epsilon)
        return _run_auto(stmt, plan, pend, key)


def _run_auto(
    stmt: StatementRun[PrivateQuery],
    plan: Plan | SetsPlan,
    pend: auto_bounds_module.Pending,
    key: str,
) -> Result:
    """A statement with ``auto`` bounds, run holding its in-flight slot (when charged)."""
    from dpsql.execute import auto_bounds, statement_sql
    from dpsql.sql.apply_bounds import apply_bounds

    engine, prepared, session = stmt.engine, stmt.prepared, stmt.session
    a = plan.analysis
    statement_eps = plan.epsilon
    plan_with = partial(planning.plan, engine, prepared, session, stmt.params)
    answer_with = partial(_run_planned, stmt, in_slot=True)
    again = False  # measured again: the bounds stored since differ from the stored answer's
    if engine.ledger is not None and not pend.missing:
        plan = plan_with(analysis=with_stored_bounds(engine, prepared, a, pend))
        bounded = bounds_key(engine, session, key, pend.known)
        again, key = bounded != key, bounded
    elif engine.ledger is not None and engine.ledger.has_answer(session.analyst, key):
        pass  # answered from the store below: nothing measured
    else:
        # one statement, one charge: the answer's cost (the statement's epsilon less the slice;
        # it does not depend on the bounds chosen) is reserved with the bound choices, before
        # any data is read (auto_bounds.measure); the checks that need no budget come first
        slice_eps = auto_bounds.slice_epsilon(statement_eps, pend)  # the bound choices' share
        rest = plan_with(analysis=a, spent=slice_eps)
        precheck(engine, prepared, session, a)
        # dpsql's SQL for the answer, with the default bounds, parsed before any charge
        defaults = apply_bounds(a, auto_bounds.with_defaults(pend))
        statement_sql.preflight(engine, prepared, plan_with(analysis=defaults, spent=slice_eps))
        answer = (rest.cost, rest.mechanism, delta_for_rho(rest))
        bounds, held = auto_bounds.measure(
            engine, prepared, session, a, pend, statement_eps, stmt.cancel, answer
        )
        resolved = apply_bounds(a, bounds)
        try:
            plan = plan_with(analysis=resolved, spent=bounds.epsilon_spent)
        except BaseException:
            if held is not None and engine.ledger is not None:
                engine.ledger.refund(held)  # nothing of the answer was measured
            raise
        reserved = (held, rest.cost) if held is not None else None
        return answer_with(plan, (bounds, key), reserved)
    got = answer_with(plan, (pend.known, key))
    if again and not got.cached:
        got = dataclasses.replace(got, notices=(*got.notices, MEASURED_AGAIN))
    return got


MEASURED_AGAIN = (
    "measured again: the contribution bounds this statement reuses were stored since its last "
    "answer and differ from that answer's, so this is a new answer with them, charged as one; "
    "the same statement asked again is a free repeat of it (the earlier answer stays in "
    "dpsql.history)"
)


def with_stored_bounds(
    engine: EngineContext, prepared: PrivateQuery, a: Analysis, pend: auto_bounds_module.Pending
) -> Analysis:
    """``a`` with the stored bounds ``pend.known`` applied; for the prepared statement's own
    analysis, memoized per (statement, bounds) and marked stable, so its bounded SQL is
    memoized too (:func:`dpsql.execute.private_sql.private_sql`)."""
    from dpsql.execute.private_sql import mark_stable, memoized
    from dpsql.sql.apply_bounds import apply_bounds

    if not prepared.is_own(a):
        return apply_bounds(a, pend.known)
    # keyed by the analysis itself, not the text alone: the same text prepared under another
    # analyst's view (a denied keys_from table: partition selection instead of the keys) has
    # another analysis, which must not be swapped for this one
    memo = engine.caches.sql
    key = ("resolved", prepared.text, pend.known)
    resolved = memoized(memo, prepared, a, key, lambda: apply_bounds(a, pend.known))
    mark_stable(memo, resolved)  # (again: the mark may have left the memo before the entry)
    return resolved


def _within(cost: Cost, held: Cost) -> bool:
    return cost.epsilon <= held.epsilon and cost.delta <= held.delta and cost.rho <= held.rho


def _run_planned(
    stmt: StatementRun[PrivateQuery],
    plan: Plan | SetsPlan,
    auto: tuple[AutoBounds, str] | None,
    reserved: tuple[Reservation, Cost] | None = None,
    *,
    in_slot: bool = False,
) -> Result:
    """Run a planned statement; ``reserved``: its answer's reservation, made before the bounds
    were chosen (with the cost it holds): used instead of reserving, refunded when the answer
    is never measured, and the plan must not cost more than it holds. ``in_slot``: the caller
    holds the statement's in-flight slot (:func:`run_private`)."""
    engine, prepared = stmt.engine, stmt.prepared
    a = plan.analysis
    ledger = engine.ledger
    try:
        confidence = precheck(engine, prepared, stmt.session, a)
        if reserved is not None and not _within(plan.cost, reserved[1]):
            from dpsql.errors import InternalError

            raise InternalError(
                f"the planned cost {plan.cost} exceeds the {reserved[1]} reserved for it",
                hint="the statement was not answered; please report this",
            )
        key_types = engine.group_types(prepared, a)
        if isinstance(plan, SetsPlan):
            declared: Any = [engine.declared_keys(sp.plan.analysis) for sp in plan.sets]
            for sp, public in zip(plan.sets, declared, strict=True):
                check_keys(engine, sp.plan.analysis, [key_types[i] for i in sp.keys], public)
        else:  # (its keys were checked by precheck's check_leaf_keys, as here)
            declared = engine.declared_keys(a)
    except BaseException:
        if reserved is not None and ledger is not None:
            ledger.refund(reserved[0])
        raise
    key = None
    if ledger is not None:
        key = auto[1] if auto is not None else cache_key(engine, prepared, plan, stmt.params)
    if ledger is None or key is None or in_slot:
        return _release(stmt, plan, auto, reserved, key, confidence, key_types, declared)
    with stmt.one_release(key):
        return _release(stmt, plan, auto, reserved, key, confidence, key_types, declared)


def _release(
    stmt: StatementRun[PrivateQuery],
    plan: Plan | SetsPlan,
    auto: tuple[AutoBounds, str] | None,
    reserved: tuple[Reservation, Cost] | None,
    key: str | None,
    confidence: float,
    key_types: Sequence[str],
    declared: Any,
) -> Result:
    """The repeat store's answer for ``key``, or reserve, measure, release and commit."""
    engine, prepared, session = stmt.engine, stmt.prepared, stmt.session
    a = plan.analysis
    ledger = engine.ledger
    if ledger is not None and key is not None and reserved is None:
        stored = ledger.lookup_stored(session.analyst, key, prepared.text)
        if stored is not None:
            stored = dataclasses.replace(stored, auto=auto is not None)  # what its epsilon was
            rel = Release.from_json(json.loads(stored.payload))
            with _fetch_offered(stmt, a, key):
                return finish(
                    engine, prepared, a, rel, session, plan=plan, cached=True, repeat=stored
                )
    reservation = (
        reserved[0]
        if reserved is not None
        else stmt.reserve(plan.cost, plan.mechanism, delta_for_rho(plan))
        if ledger
        else None
    )
    try:
        got = measure(engine, prepared, plan, stmt.cancel)
    except BaseException as error:
        # A failure that may depend on the private rows (a data error, a timeout) stays charged:
        # otherwise failing queries would be free probes.
        settle(ledger, reservation, error, read=False)
        raise
    try:
        rel = release_measured(engine, plan, got, key_types, declared, confidence)
    except BaseException as error:
        settle(ledger, reservation, error, read=True)  # the rows were read: spent
        raise
    if auto is not None:  # stored with the bounds it was measured with (bounds_key)
        rel = dataclasses.replace(rel, bounds=applied_bounds(auto[0]))
    rel = released_words(engine, a, plan, rel, session)  # what its repeats say of it
    told = rel.words  # (finish says the same words: not made twice)
    if ledger is not None and reservation is not None:
        earlier = ledger.commit(reservation, key, payload(rel))
        if earlier is not None:  # a concurrent identical query stored its answer first
            rel, told = Release.from_json(json.loads(earlier)), None
    with _fetch_offered(stmt, a, key if reservation is not None else None):
        auto_bounds = auto[0] if auto else None
        return finish(engine, prepared, a, rel, session, plan=plan, auto=auto_bounds, told=told)


@contextmanager
def _fetch_offered(
    stmt: StatementRun[PrivateQuery], a: Analysis, key: str | None
) -> Iterator[None]:
    """On an error of the post-processing over a stored release (``key``): its hint names the
    statement returning the released rows themselves, free (:mod:`dpsql.execute.fetch_stored`)."""
    try:
        yield
    except DpsqlError as e:
        if key is not None and stmt.ledger is not None:
            from dpsql.execute import fetch_stored

            text = fetch_stored.bare_sql(a)
            if text is not None and text != stmt.prepared.text:
                eps, _ = stmt.engine.privacy_params(stmt.session, a)
                got = stmt.offer(text, a, key, eps)
                fetch_stored.hint(e, [("", got)] if got else [])
        raise


Measured = Any  # the upstream rows of a plan: Rows, or one Rows per grouping set


def measure(
    engine: EngineContext, prepared: PrivateQuery, plan: Plan | SetsPlan, cancel: CancelToken | None
) -> Measured:
    """Run a planned private statement's bounded SQL: one row per group, never a table row."""
    from dpsql.execute import own_sql, statement_sql
    from dpsql.execute.unique_units import keyed, recheck_sql, still_proven

    # nothing below runs on the private rows until the query is sent: a refusal here (the
    # catalog's proof gone since the plan: 55000) is refunded, not charged
    with before_the_data():
        # the catalog state the key checks (precheck) were made under: read by the plan, in
        # the round trip of the proofs
        token = engine.catalog_token(plan.analysis) if keyed(plan.analysis) else ""
        texts, a = statement_sql.statement_texts(engine, prepared, plan)  # (EXPLAIN VERBOSE's too)
    if isinstance(plan, SetsPlan):
        sets = run_sets(engine, texts, cancel, prepared.fingerprint)
        still_proven(engine.backend, plan.analysis, token)
        return sets
    # the catalog's proofs the SQL took (one row per unit, values within their bounds), read
    # just before the query, and the catalog state of its key checks, are read again right
    # after it, in its round trip, before anything is released (nothing of ``got`` leaves on a
    # refusal)
    after = recheck_sql(a, token)
    got = own_sql.run(  # fresh salt; a Parse failure of it is dpsql's own (own_sql)
        engine.backend, salted(texts[0]), prepared.fingerprint, cancel=cancel, then=after
    )
    still_proven(engine.backend, a, token, got.then)
    return got


def release_measured(
    engine: EngineContext,
    plan: Plan | SetsPlan,
    got: Measured,
    key_types: Sequence[str],
    declared: Any,
    confidence: float,
) -> Release:
    """The noisy release of a measured plan (the only step that adds noise)."""
    a = plan.analysis
    cands = {
        m.key: engine.resolve_keys_from(m.candidates_from)
        for m in a.measures
        if m.kind in ("mode", "count_keys") and m.candidates_from is not None
    }
    if isinstance(plan, SetsPlan):
        return release_sets(engine, plan, got, key_types, declared, confidence, cands)
    return release(plan, got.rows, key_types, declared, confidence, engine.noise, candidates=cands)


__all__ = ["run_private", "type_name"]

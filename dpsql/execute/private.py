"""The private path: plan, charge, run the bounded SQL, add noise, post-process.

The spend is reserved before the private query runs and confirmed before any noisy row leaves;
a failure before any result is computed is refunded; anything after counts as spent. A statement
that chooses ``auto`` bounds reserves its whole cost (the choices and the answer) in one ledger
transaction before it reads any data: one statement, one charge (:func:`run_private`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.budget.records import before_the_data, say_spent
from dpsql.dp.accounting import Cost
from dpsql.errors import DpsqlError, UnsupportedSql
from dpsql.execute import key_texts, planning, privacy_params
from dpsql.execute.backend import CancelToken, type_name
from dpsql.execute.finish import finish
from dpsql.execute.group_keys import TEXT_TYPES, nondeterministic_text
from dpsql.execute.grouping_sets import release_sets, run_sets, set_texts
from dpsql.execute.in_flight import one_release
from dpsql.execute.noise import Release, release
from dpsql.execute.prepared import PrivateQuery, TreeQuery
from dpsql.execute.private_sql import salted
from dpsql.execute.timing import timing_of
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bounds import AutoBounds
from dpsql.sql.bind import param_numbers
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan
from dpsql.sql.zone_identity import zone_matters
from dpsql.upstream.zone import UTC_NAME, ZONE

if TYPE_CHECKING:
    from dpsql.budget.api import BudgetLedger
    from dpsql.budget.records import Reservation
    from dpsql.execute import auto_bounds as auto_bounds_module
    from dpsql.execute.context import EngineContext


def repeat_key(
    engine: EngineContext,
    prepared: PrivateQuery,
    params: Sequence[object],
    epsilon: Fraction,
    delta: Fraction,
    mechanism: str,
) -> str:
    """Same canonical query, parameters, epsilon, delta, mechanism, policy (as the analyst's
    view changes answers) and time zone where it matters (:mod:`dpsql.sql.zone_identity`) =>
    same answer. The canonical form of the statement's tree is
    memoized (a function of the tree alone; the memo holds the tree, so its id can't be reused)."""
    from dpsql.sql.canonical import cache_key as key
    from dpsql.sql.canonical import canonical

    tree = prepared.tree
    assert tree is not None
    hit = engine.caches.sql.get(("canonical", id(tree)))
    if hit is None or hit[0] is not tree:
        part = released_part(tree)
        hit = (tree, canonical(part), frozenset(param_numbers(part)))
        engine.caches.sql.remember(("canonical", id(tree)), hit)
    extra = engine.repeat_digest(prepared.scope)
    zone = ZONE.get()
    if zone != UTC_NAME and zone_matters(hit[0], engine.policy):  # another zone, another answer
        extra += f":TimeZone={zone}"
    return key(hit[1], released_params(params, hit[2]), epsilon, delta, mechanism, extra=extra)


def released_params(params: Sequence[object], used: frozenset[int]) -> list[object]:
    """``params`` as the release sees them: a value only the page reads (``LIMIT $2 OFFSET
    $3``, stripped by :func:`released_part`) is left out, so pages sent with bound parameters
    share one release as literal pages do; a parameter of the private part (``WHERE amount >
    $1``) stays, a different value a different release. Positions are kept (``$n``)."""
    return [p if i + 1 in used else None for i, p in enumerate(params)]


def released_part(tree: exp.Expr) -> exp.Expr:
    """What a statement's release depends on: ``tree`` without the LIMIT and OFFSET of its
    SELECT, nor an ORDER BY that reads no aggregate (keys, output names, ordinals). They only
    shape the post-processing query over the released groups (dpsql.sql.analyze_select puts
    them on the outer query alone), so pages of one grouped answer (``LIMIT 5 OFFSET 0``,
    ``OFFSET 5``, no LIMIT) share one release: one charge, the same numbers on every page. An
    ORDER BY with an aggregate stays: it can add a statistic to the release; so does one that
    reads anything but the SELECT's own outputs (an ordinal, an output name, a selected
    expression): ``ORDER BY s`` over a derived table's ``SUM(amount) AS s`` that the SELECT does
    not list adds that sum, and reusing the release of the statement without it failed."""
    from dpsql.sql import functions as fn

    if not isinstance(tree, exp.Select):
        return tree
    order = tree.args.get("order")
    strip = [k for k in ("limit", "offset") if tree.args.get(k) is not None]
    if (
        order is not None
        and not any(fn.is_aggregate(n) for n in order.walk())
        and all(_an_output(tree, o.this) for o in order.expressions)
    ):
        strip.append("order")
    if not strip:
        return tree
    out = tree.copy()
    for k in strip:
        out.set(k, None)
    return out


def _an_output(tree: exp.Select, e: exp.Expr) -> bool:
    """``e`` (an ORDER BY term of ``tree``) is one of its outputs: an ordinal, an output's name
    (unqualified), or an expression ``tree`` selects."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Literal):
        return e.is_int
    if (
        isinstance(e, exp.Column)
        and not e.table
        and e.name in {s.alias_or_name for s in tree.expressions}
    ):
        return True
    return any(e == s.unalias() for s in tree.expressions)


def cache_key(
    engine: EngineContext, prepared: PrivateQuery, plan: Plan | SetsPlan, params: Sequence[object]
) -> str:
    """The repeat key of a statement at its plan's epsilon, delta and mechanism."""
    return repeat_key(engine, prepared, params, plan.epsilon, plan.delta, plan.mechanism)


def check_join_fanout(engine: EngineContext, a: Analysis) -> None:
    """Refuse (54001) a join one unit's rows could blow up (:mod:`dpsql.sql.join_fanout`); each
    public table's fan-out is read from it (public data) at most every ``shadows.REFRESH_S``."""
    import time

    from dpsql.execute.shadows import REFRESH_S
    from dpsql.sql.join_fanout import check_fanout, fanout_sql

    def fanout(j: Any) -> int:
        key = ("fanout", j.table, j.key)
        hit = engine.caches.sql.get(key)
        if hit is None or time.monotonic() - hit[0] > REFRESH_S:
            rows = engine.backend.run(fanout_sql(j), private=False).rows
            hit = (time.monotonic(), int(rows[0][0] or 0) if rows else 0)
            engine.caches.sql.remember(key, hit)
        return int(hit[1])

    check_fanout(a, fanout)


def delta_for_rho(plan: Plan | SetsPlan) -> Fraction | None:
    """The part of the query's delta at which its Gaussian rho was calibrated."""
    if isinstance(plan, SetsPlan):
        return plan.delta_for_rho
    if plan.mechanism != "gaussian":
        return None
    return plan.delta - (plan.selection.delta if plan.selection is not None else 0)


def payload(rel: Release) -> bytes:
    """The release as the ledger stores it for free repeats (compact JSON, read back by
    :meth:`Release.from_json`): noisy values only, never a private row."""
    return json.dumps(rel.as_json(), separators=(",", ":")).encode()


def auto_cache_key(
    engine: EngineContext,
    prepared: PrivateQuery,
    plan: Plan | SetsPlan,
    params: Sequence[object],
    mech: str,
) -> str:
    """The repeat key of a statement with ``auto`` bounds: its own epsilon (not what is left
    after choosing bounds, which differs between the first run and later ones) and the
    requested mechanism."""
    return repeat_key(engine, prepared, params, plan.epsilon, plan.delta, f"auto-bounds:{mech}")


def flat_key(engine: EngineContext, prepared: PrivateQuery, session: SessionContext) -> str:
    """The free-repeat key :func:`run_private` computes for ``prepared`` (no parameters) in
    ``session``."""
    from dpsql.execute import auto_bounds

    plan = planning.plan(engine, prepared, session, ())
    if auto_bounds.pending(engine, prepared, session, plan.analysis).needed:
        return auto_cache_key(engine, prepared, plan, (), session.mechanism)
    return cache_key(engine, prepared, plan, ())


def run_private(
    engine: EngineContext,
    prepared: PrivateQuery,
    session: SessionContext,
    params: Sequence[object],
    cancel: CancelToken | None,
) -> Result:
    from dpsql.execute import auto_bounds

    plan = planning.plan(engine, prepared, session, params, probe=True)
    a = plan.analysis
    pend = auto_bounds.pending(engine, prepared, session, a)
    if not pend.needed:
        return _run_planned(engine, prepared, session, params, cancel, plan, None)
    key = auto_cache_key(engine, prepared, plan, params, session.mechanism)
    if engine.ledger is None:
        return _run_auto(engine, prepared, session, params, cancel, plan, pend, key)
    # the whole statement (its bound choices, answer and commit) holds the in-flight slot: an
    # identical statement run at once waits, then finds the choices and the answer stored (a
    # free repeat) instead of choosing and answering again (newcomer21 #28: 4 sessions, 4
    # charges for one answer)
    with one_release(slot(engine, session, key), cancel, timing_of(engine)):
        if pend.missing:  # read again: the statement waited for may have stored them
            pend = auto_bounds.pending(engine, prepared, session, a)
            pend = auto_bounds.with_fallbacks(engine, prepared, session, pend, plan.epsilon)
        return _run_auto(engine, prepared, session, params, cancel, plan, pend, key)


def slot(engine: EngineContext, session: SessionContext, key: str) -> str:
    """The in-flight slot of a repeat key: an identical statement whose release this one may
    read (the same analyst's, or any analyst's with ``repeats: global``) waits for it. Another
    analyst's is never read, so waiting for it would only tell this one that it runs (and when
    it ends)."""
    return key if engine.policy.repeats == "global" else f"{session.analyst}\x1f{key}"


def _run_auto(
    engine: EngineContext,
    prepared: PrivateQuery,
    session: SessionContext,
    params: Sequence[object],
    cancel: CancelToken | None,
    plan: Plan | SetsPlan,
    pend: auto_bounds_module.Pending,
    key: str,
) -> Result:
    """A statement with ``auto`` bounds, run holding its in-flight slot (when charged)."""
    from dpsql.execute import auto_bounds
    from dpsql.sql.apply_bounds import apply_bounds

    a = plan.analysis
    statement_eps = plan.epsilon
    run = partial(_run_planned, engine, prepared, session, params, cancel, in_slot=True)
    if engine.ledger is not None and not pend.missing:
        plan = planning.plan(
            engine,
            prepared,
            session,
            params,
            analysis=with_stored_bounds(engine, prepared, a, pend),
        )
    elif engine.ledger is not None and engine.ledger.has_answer(session.analyst, key):
        pass  # answered from the store below: nothing measured
    else:
        # one statement, one charge: the answer's cost (the statement's epsilon less the slice;
        # it does not depend on the bounds chosen) is reserved with the bound choices, before
        # any data is read (auto_bounds.measure); the checks that need no budget come first
        rest = planning.plan(
            engine,
            prepared,
            session,
            params,
            analysis=a,
            spent=auto_bounds.slice_epsilon(statement_eps, pend),
        )
        precheck(engine, prepared, session, a)
        answer = (rest.cost, rest.mechanism, delta_for_rho(rest))
        bounds, held = auto_bounds.measure(
            engine, prepared, session, a, pend, statement_eps, cancel, answer
        )
        resolved = apply_bounds(a, bounds)
        try:
            plan = planning.plan(
                engine, prepared, session, params, analysis=resolved, spent=bounds.epsilon_spent
            )
        except BaseException:
            if held is not None and engine.ledger is not None:
                engine.ledger.refund(held)  # nothing of the answer was measured
            raise
        reserved = (held, rest.cost) if held is not None else None
        return run(plan, (bounds, key), reserved)
    return run(plan, (pend.known, key))


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


def precheck(
    engine: EngineContext, prepared: PrivateQuery, session: SessionContext, a: Analysis
) -> float:
    """What a private statement checks before any budget is reserved (no private row read):
    key tables the analyst may read, the confidence, a join's fan-out (public tables), and its
    keys' types and public values (:func:`check_leaf_keys`; before ``auto`` bounds are chosen
    too). Returns the confidence."""
    from dpsql.execute import shadows

    key_tables = tuple(g.keys_from.rsplit(".", 1)[0] for g in a.group_keys if g.keys_from)
    shadows.check(engine, prepared.text, prepared.tree, key_tables, engine.scope(session.analyst))
    conf = privacy_params.confidence(engine.policy, session)  # before any budget is reserved
    check_join_fanout(engine, a)  # reads public tables only
    check_leaf_keys(engine, prepared, a)  # types and the catalog only
    check_having_constants(engine, prepared)
    return conf


def check_having_constants(engine: EngineContext, prepared: PrivateQuery | TreeQuery) -> None:
    """A HAVING's constants checked by PostgreSQL before any budget is reserved
    (:mod:`dpsql.execute.constant_probe`): ``HAVING COUNT(*) > 'abc'`` is PostgreSQL's 22P02
    from the constant alone, not an error after the answer was charged. So are the constants
    the planner folds anywhere in the statement (``COUNT(1/0)``, ``SUM(amount % 0)``,
    ``COUNT(1e30::int)``: 22012, 22003), which made_total leaves as written: they would fail
    the charged query. Once per statement."""
    from dpsql.execute.constant_probe import folded_constants

    if prepared.param_count:
        return
    key = ("having", prepared.scope, prepared.text)  # checked (or nothing to check): once
    if engine.caches.key_types.get(key) is not None:
        return
    having = prepared.tree.find(exp.Having)
    if (having is None or having.find(exp.Literal) is None) and not folded_constants(prepared.tree):
        engine.caches.key_types.remember(key, ())
        return
    from dpsql.execute.constant_probe import constant_error

    own = constant_error(engine, prepared.tree)
    if own is not None:
        raise own
    engine.caches.key_types.remember(key, ())


def check_leaf_keys(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> None:
    """:func:`_check_keys` for a leaf of a statement of several (dpsql.execute.tree), before its
    charge (a leaf with grouping sets: the collation check; release() checks its sets' keys)."""
    key_types = engine.group_types(prepared, a)
    if a.grouping_sets:
        _check_keys(engine, a, key_types, [])
        return
    _check_keys(engine, a, key_types, engine.declared_keys(a))


def _check_keys(
    engine: EngineContext,
    a: Analysis,
    key_types: Sequence[str],
    declared: list[tuple[str | None, ...]] | None,
) -> None:
    """The release's key checks (:mod:`dpsql.execute.key_texts`) before any budget is reserved:
    no two public keys one value; no key selected from the data without a canonical text; no
    text key over a table with a nondeterministic collation (``'a' = 'A'``: a group would print
    as whichever of its texts PostgreSQL kept, and a public key's filter would let the others
    in)."""
    names = [key_texts.key_name(g.expr) for g in a.group_keys]
    n = len(names)
    uses = [
        f"GROUP BY {name}"
        for name, t in zip(names, key_types[:n], strict=True)
        if t in TEXT_TYPES or t == "other"  # (citext, a domain over it: released as text)
    ]
    uses += [  # public candidates compared as text, counted per text
        f"{'mode()' if m.kind == 'mode' else 'COUNT(DISTINCT)'} of {key_texts.key_name(m.arg)}"
        for m in a.measures
        if m.kind in ("mode", "count_keys") and m.arg is not None
    ]
    if uses and nondeterministic_text(engine, a):
        raise UnsupportedSql(
            f"{uses[0]}: texts are not released from a table with a column of a "
            "nondeterministic (case- or accent-insensitive) collation (equal texts print "
            "differently, and which one is printed depends on the rows)",
            hint="give its text columns a deterministic collation "
            '(ALTER TABLE ... ALTER COLUMN ... TYPE text COLLATE "default")',
        )
    if declared is not None:
        key_texts.check_declared(declared, key_types[:n], names)
    else:
        key_texts.check_selectable(key_types[:n], names)


def _within(cost: Cost, held: Cost) -> bool:
    return cost.epsilon <= held.epsilon and cost.delta <= held.delta and cost.rho <= held.rho


def _run_planned(
    engine: EngineContext,
    prepared: PrivateQuery,
    session: SessionContext,
    params: Sequence[object],
    cancel: CancelToken | None,
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
    a = plan.analysis
    ledger = engine.ledger
    try:
        confidence = precheck(engine, prepared, session, a)
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
                _check_keys(engine, sp.plan.analysis, [key_types[i] for i in sp.keys], public)
        else:  # (its keys were checked by precheck's check_leaf_keys, as here)
            declared = engine.declared_keys(a)
    except BaseException:
        if reserved is not None and ledger is not None:
            ledger.refund(reserved[0])
        raise
    key = None
    if ledger is not None:
        key = auto[1] if auto is not None else cache_key(engine, prepared, plan, params)
    if ledger is None or key is None or in_slot:
        return _release(engine, prepared, session, cancel, plan, auto, reserved, key, a,
                        confidence, key_types, declared)  # fmt: skip
    with one_release(slot(engine, session, key), cancel, timing_of(engine)):
        return _release(engine, prepared, session, cancel, plan, auto, reserved, key, a,
                        confidence, key_types, declared)  # fmt: skip


def _release(
    engine: EngineContext,
    prepared: PrivateQuery,
    session: SessionContext,
    cancel: CancelToken | None,
    plan: Plan | SetsPlan,
    auto: tuple[AutoBounds, str] | None,
    reserved: tuple[Reservation, Cost] | None,
    key: str | None,
    a: Analysis,
    confidence: float,
    key_types: Sequence[str],
    declared: Any,
) -> Result:
    """The repeat store's answer for ``key``, or reserve, measure, release and commit."""
    ledger = engine.ledger
    if ledger is not None and key is not None and reserved is None:
        stored = ledger.lookup_stored(session.analyst, key, prepared.text)
        if stored is not None:
            rel = Release.from_json(json.loads(stored.payload))
            with _fetch_offered(engine, prepared, session, a, key):
                return finish(
                    engine, prepared, a, rel, session, plan=plan, cached=True, repeat=stored
                )
    reservation = (
        reserved[0]
        if reserved is not None
        else ledger.reserve(
            session.analyst,
            plan.cost,
            prepared.fingerprint,
            delta_for_rho=delta_for_rho(plan),
            mechanism=plan.mechanism,
            statement=prepared.text,
        )
        if ledger
        else None
    )
    try:
        got = measure(engine, prepared, plan, cancel)
    except BaseException as error:
        # A failure that may depend on the private rows (a data error, a timeout) stays charged:
        # otherwise failing queries would be free probes.
        if ledger is not None and reservation is not None:
            settle_failed(ledger, reservation, error)
        raise
    try:
        rel = release_measured(engine, plan, got, key_types, declared, confidence)
    except BaseException as error:
        # the rows were read: spent, whatever failed after (left open, the reservation would
        # look like a crash to `dpsql budget reconcile`, whose --refund would make it free)
        if ledger is not None and reservation is not None:
            ledger.commit(reservation)
            say_spent(error)
        raise
    if ledger is not None and reservation is not None:
        earlier = ledger.commit(reservation, key, payload(rel))
        if earlier is not None:  # a concurrent identical query stored its answer first
            rel = Release.from_json(json.loads(earlier))
    with _fetch_offered(engine, prepared, session, a, key if reservation is not None else None):
        return finish(engine, prepared, a, rel, session, plan=plan, auto=auto[0] if auto else None)


@contextmanager
def _fetch_offered(
    engine: EngineContext,
    prepared: PrivateQuery,
    session: SessionContext,
    a: Analysis,
    key: str | None,
) -> Iterator[None]:
    """On an error of the post-processing over a stored release (``key``): its hint names the
    statement returning the released rows themselves, free (:mod:`dpsql.execute.fetch_stored`)."""
    try:
        yield
    except DpsqlError as e:
        if key is not None and engine.ledger is not None:
            from dpsql.execute import fetch_stored

            text = fetch_stored.bare_sql(a)
            if text is not None and text != prepared.text:
                eps, _ = engine.privacy_params(session, a)
                got = fetch_stored.offer(
                    engine, session, prepared.scope, text, a, key, eps, partial(flat_key, engine)
                )
                fetch_stored.hint(e, [("", got)] if got else [])
        raise


Measured = Any  # the upstream rows of a plan: Rows, or one Rows per grouping set


def measure(
    engine: EngineContext, prepared: PrivateQuery, plan: Plan | SetsPlan, cancel: CancelToken | None
) -> Measured:
    """Run a planned private statement's bounded SQL: one row per group, never a table row."""
    from dpsql.execute.unique_units import keyed, recheck_sql, still_proven

    # nothing below runs on the private rows until the query is sent: a refusal here (the
    # catalog's proof gone since the plan: 55000) is refunded, not charged
    with before_the_data():
        # the catalog state the key checks (precheck) were made under: read by the plan, in
        # the round trip of the proofs
        token = engine.catalog_token(plan.analysis) if keyed(plan.analysis) else ""
        if isinstance(plan, SetsPlan):
            texts = set_texts(engine, prepared, plan)
        else:
            text, a = engine.checked_sql(prepared, plan.analysis)
    if isinstance(plan, SetsPlan):
        sets = run_sets(engine, texts, cancel)
        still_proven(engine.backend, plan.analysis, "while the statement ran", token)
        return sets
    # the catalog's proofs the SQL took (one row per unit, values within their bounds), read
    # just before the query, and the catalog state of its key checks, are read again right
    # after it, in its round trip, before anything is released (nothing of ``got`` leaves on a
    # refusal)
    after = recheck_sql(a, token)
    got = engine.backend.run(salted(text), private=True, cancel=cancel, then=after)  # fresh salt
    still_proven(engine.backend, a, "while the statement ran", token, got.then)
    return got


def settle_failed(ledger: BudgetLedger, reservation: Reservation, error: BaseException) -> None:
    """A reservation whose measurement failed: refunded when the failure can't depend on the
    private rows (:func:`dpsql.budget.ledger.refundable`), else confirmed as spent."""
    ledger.refund(reservation, error)  # or confirmed as spent (history: committed), logged


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


__all__ = ["payload", "run_private", "type_name"]

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
from fractions import Fraction
from typing import Any

from dpsql.dp.accounting import sequential
from dpsql.errors import DpsqlError
from dpsql.execute import fetch_stored, privacy_params
from dpsql.execute.auto_bounds import choose_reserved
from dpsql.execute.finish import say_stored
from dpsql.execute.noise import Release
from dpsql.execute.precheck import check_having_constants, check_join_fanout, check_leaf_keys
from dpsql.execute.prepared import TreeQuery
from dpsql.execute.private import delta_for_rho, measure, release_measured
from dpsql.execute.repeat_keys import payload
from dpsql.execute.statement_run import StatementRun, settle
from dpsql.execute.tree_budget import LeafBudget, leaf_budget
from dpsql.execute.tree_intervals import (
    reported,
)
from dpsql.execute.tree_leaves import LeafRun, declared_of
from dpsql.execute.tree_notices import leaf_notices
from dpsql.execute.tree_output_intervals import iv_plan, noisy_outputs, post_iv
from dpsql.execute.tree_picked import tree_picked
from dpsql.execute.tree_post import run_post
from dpsql.execute.tree_prepare import bound_split, leaf_plans, with_catalog_proofs
from dpsql.execute.tree_rounding import column_resolutions, round_rows
from dpsql.execute.withheld_words import tree_withheld
from dpsql.result import Result
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.tree import Split


def run_tree(stmt: StatementRun[TreeQuery]) -> Result:
    """Charge once, release every leaf, post-process in PostgreSQL (module docstring).

    An identical statement in flight in another session (a dashboard's tiles) is waited for
    (:func:`dpsql.execute.in_flight.one_release`, the flat path's slot): its leaves' bounds
    and answers are then stored, and this one's are free repeats (newcomer21 #28: three
    sessions at once were charged three times for one answer)."""
    if stmt.ledger is None:
        return _run_tree(stmt)
    with stmt.one_release(_tree_key(stmt)):
        return _run_tree(stmt)


def _tree_key(stmt: StatementRun[TreeQuery]) -> str:
    """What makes two tree statements the same release: the canonical statement, parameters,
    the session's privacy settings and the analyst's view (only a slot's name: two statements
    sharing it just run one after the other)."""
    from dpsql.sql.canonical import cache_key as canonical_key
    from dpsql.sql.canonical import canonical

    engine, prepared, session = stmt.engine, stmt.prepared, stmt.session
    memo = ("tree-canonical", id(prepared.tree))
    hit = engine.caches.sql.get(memo)
    if hit is None or hit[0] is not prepared.tree:
        hit = (prepared.tree, canonical(prepared.tree))  # holds the tree: its id can't be reused
        engine.caches.sql.remember(memo, hit)
    return canonical_key(
        hit[1], stmt.params, session.epsilon or 0, session.delta or 0, f"tree:{session.mechanism}",
        extra=engine.repeat_digest(prepared.scope),
    )  # fmt: skip


def _run_tree(stmt: StatementRun[TreeQuery]) -> Result:
    from dpsql.execute import shadows

    engine, prepared, session, cancel = stmt.engine, stmt.prepared, stmt.session, stmt.cancel
    sp, probes = bound_split(engine, prepared, stmt.params)
    probes = with_catalog_proofs(engine, probes)  # one row per unit, as a flat statement reads it
    shares = leaf_plans(engine, probes, session)  # what is reserved for each leaf
    key_tables = tuple(
        g.keys_from.rsplit(".", 1)[0]
        for leaf in probes
        if leaf.analysis is not None
        for g in leaf.analysis.group_keys
        if g.keys_from
    )
    scope = engine.scope(session.analyst)
    shadows.check(engine, prepared.text, prepared.tree, key_tables, scope, private=True)
    confidence = privacy_params.confidence(engine.policy, session)  # before any budget is reserved
    budgets = [
        leaf_budget(engine, leaf, p, session) for leaf, p in zip(probes, shares, strict=True)
    ]
    run = LeafRun(engine, sp, list(probes), budgets, session, prepared.scope, prepared.text)
    ivplan, levels, reads, fallbacks = iv_plan(engine, sp, run, confidence, session.show_intervals)
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
    reservation, held = _reserve(stmt, [budgets[i] for i in todo])
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
            run.releases[i] = run.with_bounds(i, release_measured(
                engine,
                run.plans[i],
                got,
                engine.group_types(run.leaves[i], run.plans[i].analysis),
                declared_of(engine, run.plans[i]),
                levels[i],  # 1 - alpha/k when its values enter an output k at a time
            ))  # fmt: skip
    except BaseException as error:
        for r in held:  # bound choices never made: nothing read for them
            if ledger is not None:
                ledger.refund(r)
        settle(ledger, reservation, error, read=done > 0)  # a leaf read the private rows: spent
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
            got, failed = post_iv(engine, sp, ivplan, run.plans, final, confidence, reads, cancel)
            columns, rows, intervals = got.columns, got.rows, got.intervals
            notices = (*notices, *(f"interval columns: {n}" for n in got.notes))
            fallbacks += (failed,) if failed is not None else ()
        else:
            rows_out = run_post(engine, sp, run.plans, final, cancel)
            columns, rows, intervals = rows_out.columns, rows_out.rows, None
    except DpsqlError as e:  # after the leaves' answers were charged and stored
        if engine.ledger is not None:
            say_stored(e, cached=not todo)
            fetch_stored.hint(e, _offers(stmt, sp, run))
        raise
    reported(fallbacks, prepared.fingerprint)
    notices = (*notices, *tree_picked(engine, sp, run.plans, final, len(rows), confidence))
    notices = (*notices, *tree_withheld(prepared.tree, sp.post, sp.labels, final, rows))
    outputs = noisy_outputs(engine, sp, run, ivplan)
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


def _offers(stmt: StatementRun[TreeQuery], sp: Split, run: LeafRun) -> list[tuple[str, str]]:
    """Each leaf's statement that returns its stored released rows free, by label
    (:mod:`dpsql.execute.fetch_stored`)."""
    out = []
    for i, leaf in enumerate(sp.leaves):
        key = run.keys[i]
        if not key or sp.link(i) is not None or i >= len(run.plans):
            continue  # a series limit's leaf reads keys this statement chose: not offered
        a = run.plans[i].analysis
        eps = run.budgets[i].share.epsilon
        got = stmt.offer(leaf.sql(POSTGRES), a, key, eps)
        if got is not None:
            label = sp.labels[i] if i < len(sp.labels) else f"leaf {i}"
            out.append((label, got))
    return out


def _reserve(stmt: StatementRun[TreeQuery], todo: Sequence[LeafBudget]) -> tuple[Any, list[Any]]:
    """Reserve the leaves' bound choices and answers in one ledger transaction (nothing read
    yet): the answers' reservation (None without a ledger or leaves to run), and one
    reservation per bound choice, in leaf order."""
    ledger = stmt.ledger
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
        return stmt.reserve(*part), []
    prepared = stmt.prepared
    got = ledger.reserve_together(
        stmt.session.analyst, [*bounds, part], prepared.fingerprint, statement=prepared.text
    )
    return got[-1], list(got[:-1])


__all__ = ["run_tree"]

"""A private statement's DP plan under the session's (epsilon, delta, mechanism).

The engine's :meth:`~dpsql.engine.Engine.plan` is :func:`plan`; the private path
(:mod:`dpsql.execute.private`) and EXPLAIN (:mod:`dpsql.explain.run`) call it with the engine
as an :class:`~dpsql.execute.context.EngineContext`. One analyzed block is planned by the
engine's planner (:meth:`~dpsql.execute.context.EngineContext.plan_analysis`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING

from dpsql.execute import group_keys, private_sql
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.unique_units import catalog_state, catalog_state_probed, tables
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def plan(
    engine: EngineContext,
    prepared: PrivateQuery,
    session: SessionContext,
    params: Sequence[object] = (),
    *,
    analysis: Analysis | None = None,
    spent: Fraction = Fraction(0),
    probe: bool = False,
) -> Plan | SetsPlan:
    """The DP plan of a private statement under the session's (epsilon, delta, mechanism).

    ``analysis``: the statement's analysis with its ``auto`` contribution bounds chosen
    (:mod:`dpsql.execute.auto_bounds`), derived from an earlier plan's; ``spent``: the
    epsilon choosing them took out of the statement's, which the measurement then does not
    get. Without ``analysis`` the catalog is read: when it proves one row per unit
    (:mod:`dpsql.execute.unique_units`) the plan spends nothing on rows dropped by bounding
    (none are: :func:`dpsql.sql.bias.bias_targets`), and the engine's
    :meth:`~dpsql.execute.context.EngineContext.private_sql` checks the proof again before the
    private query runs. ``probe``: the statement is about to run (not EXPLAIN): the zero-row
    probe it needs the first time (:func:`~dpsql.execute.group_keys.first_probe`) goes in the
    catalog read's round trip.
    """
    a = analysis if analysis is not None else engine.analysis(prepared, params)
    eps, delta = engine.privacy_params(session, a)  # refused before anything is read
    if analysis is None:
        # one round trip: the proof of one row per unit, and the catalog token of the
        # tables that keys what is memoized from the catalog (catalog_token)
        first = group_keys.first_probe(engine, prepared, a) if probe else None
        if first is None:
            state = catalog_state(engine.backend, a)
        else:
            state, got = catalog_state_probed(engine.backend, a, first.sql)
            if got is not None:
                first.store(engine, state.token, got)
        engine.catalog_tokens()[tables(a)] = state.token
        if state.unique or state.proven:
            a = (
                prepared.catalog_analysis(state.unique_id, state.proven, state.proof_id)
                if a is prepared.analysis
                else replace(
                    a,
                    unique_unit=state.unique,
                    unique_proof_id=state.unique_id,
                    proven_bounds=state.proven,
                    proof_id=state.proof_id,
                )
            )
    eps, mech = eps - spent, session.mechanism
    # a pure function of its inputs: memoized per stable analysis (whose identity is its
    # bounds and the catalog's proof) and the session's epsilon, delta and mechanism
    return private_sql.memoized(
        engine.caches.sql,
        prepared,
        a,
        ("plan", eps, delta, mech),
        lambda: engine.plan_analysis(a, eps, delta, mech),
    )

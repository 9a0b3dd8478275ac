"""Preparing and planning a statement of several DP leaves (:mod:`dpsql.sql.tree`), before
anything runs: :func:`prepare_tree` splits it and prepares each leaf as a private statement of its
own (steps 1 and 2 of :mod:`dpsql.execute.tree`, which runs it); :func:`bound_split` does it
again with the parameters bound, :func:`leaf_plans` plans each leaf at its share of the
statement's (epsilon, delta). Nothing here reads data or spends budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import DpsqlError, InternalError, InvalidParameter, PrivacyViolation
from dpsql.execute.classify import classify
from dpsql.execute.prepared import PrivateQuery, TreeQuery, fingerprint
from dpsql.execute.privacy_params import to_fraction
from dpsql.execute.tree_budget import LeafPlan
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.analyze import analyze
from dpsql.sql.bind import bind, param_count
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.parse import ParsedQuery, ParsedStatement
from dpsql.sql.per_unit import with_units
from dpsql.sql.per_unit_source import UNIT_PREFIX, UnitSource
from dpsql.sql.public import check_public
from dpsql.sql.tree import Split, fill, split, split_budget
from dpsql.sql.wording import spelled_sql

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def prepare_tree(
    engine: EngineContext, st: ParsedStatement, tree: exp.Expr, scope: str, error: DpsqlError
) -> TreeQuery:
    """Prepare a private statement that is not one flat block as a tree of DP leaves.

    Raises:
        DpsqlError: ``error`` (the flat analysis's refusal) when there is nothing to split; a
            leaf's refusal; post-processing that reads private rows or catalog tables.
    """
    sp, leaves = _split(engine, tree, scope, error)
    return TreeQuery(
        text=st.text,
        statement=st,
        fingerprint=fingerprint(tree, st.text),
        scope=scope,
        tree=tree,
        param_count=param_count(tree),
        split=sp,
        leaves=leaves,
    )


def _split(
    engine: EngineContext, tree: exp.Expr, scope: str, error: DpsqlError
) -> tuple[Split, tuple[PrivateQuery, ...]]:
    view = engine.view(scope or None)
    sp = split(tree, view, analyze)
    if sp is None:
        raise error
    prepared = [
        _prepare_unit_leaf(engine, leaf, sp.units, scope)
        if _reads_units(leaf)
        else engine.prepare_in_scope(spelled_sql(leaf), scope)
        for leaf in sp.leaves
    ]
    leaves = tuple(p for p in prepared if isinstance(p, PrivateQuery))
    if len(leaves) != len(prepared):
        raise error  # never expected: a leaf is one flat private block by construction
    probe = fill(sp.post, [exp.select(exp.Literal.number(1))] * len(leaves))
    kind = classify(probe, view)
    if kind == "private":  # never expected: dpsql.sql.tree refuses it with the analyzer's words
        raise PrivacyViolation(
            "part of this statement would return raw rows of a private table",
            hint="aggregate the private table (COUNT, SUM, AVG ...) in every part of the statement",
        )
    if kind != "public":
        raise PrivacyViolation(
            "a query may not combine private tables with catalog or dpsql tables",
            hint="query the catalog and the private tables in separate statements",
        )
    check_public(probe)
    return sp, leaves


def _reads_units(leaf: exp.Select) -> bool:
    return any(t.name.startswith(UNIT_PREFIX) for t in leaf.find_all(exp.Table))


def _prepare_unit_leaf(
    engine: EngineContext, leaf: exp.Select, units: Sequence[UnitSource], scope: str
) -> PrivateQuery:
    """A leaf over per-unit derived tables (dpsql.sql.per_unit), analyzed with their synthetic
    tables declared (one row per unit: no contribution bounding needed)."""
    view = with_units(engine.view(scope or None), tuple(units))
    used = {f"{t.db or 'public'}.{t.name}" for t in leaf.find_all(exp.Table)}
    capped = tuple(c for u in units if u.name in used for c in u.capped)
    a = dataclasses.replace(
        analyze(leaf, view), unique_unit=True, one_row_per_unit=True, capped_columns=capped
    )
    text = leaf.sql(POSTGRES)
    return PrivateQuery(
        text=text,
        statement=ParsedQuery(text, "SELECT", leaf),
        fingerprint=fingerprint(leaf, text),
        scope=scope,
        tree=leaf,
        analysis=a,
        param_count=0,
        units=tuple((u.name, u.select) for u in units if u.name in used),
    )


def bound_split(
    engine: EngineContext, prepared: TreeQuery, params: Sequence[object]
) -> tuple[Split, tuple[PrivateQuery, ...]]:
    """The split and leaves with ``params`` bound (the prepared ones without parameters)."""
    if not params:
        return prepared.split, prepared.leaves
    return _split(engine, bind(prepared.tree, params), prepared.scope, InternalError("no split"))


def with_catalog_proofs(
    engine: EngineContext, leaves: Sequence[PrivateQuery]
) -> tuple[PrivateQuery, ...]:
    """Each leaf with the catalog's proofs in force, as a flat statement's plan takes them
    (:func:`dpsql.execute.planning.plan`): one row per unit (a PRIMARY KEY or NOT NULL UNIQUE
    unit column: R = G = 1 free, nothing dropped by bounding) and the columns a CHECK constraint
    proves within their bounds, read once per execution (one catalog round trip per leaf, which
    also gives the catalog token its key checks use). The leaf's run checks them again just
    before and after its private query (:meth:`~dpsql.execute.context.EngineContext.checked_sql`,
    :func:`~dpsql.execute.unique_units.still_proven`), as a flat statement's does. A leaf over
    per-unit derived tables has one row per unit by construction (nothing to read). Before, a
    tree's leaves never read the catalog: a UNION of two COUNTs over a table keyed by its unit
    spent epsilon on ``auto`` bounds, fell back to R = 1 for "too few" units and said rows were
    left out of a table that has one row per unit (newcomer22 #1)."""
    from dpsql.execute.unique_units import catalog_state, tables

    out = []
    for leaf in leaves:
        a = leaf.analysis
        if leaf.units or a.one_row_per_unit:
            out.append(leaf)
            continue
        state = catalog_state(engine.backend, a)
        engine.catalog_tokens()[tables(a)] = state.token
        if not (state.unique or state.proven):
            out.append(leaf)
            continue
        proven = leaf.catalog_analysis(state.unique_id, state.proven, state.proof_id)
        out.append(dataclasses.replace(leaf, analysis=proven))
    return tuple(out)


def leaf_plans(
    engine: EngineContext, leaves: Sequence[PrivateQuery], session: SessionContext
) -> list[LeafPlan]:
    """Each leaf's plan at its share of the statement's (epsilon, delta) (validated)."""
    typed: list[Analysis] = [leaf.analysis for leaf in leaves]
    lead = next((a for a in typed if a.needs_selection), typed[0])
    eps, delta = engine.privacy_params(session, lead)
    shares = split_budget([a.needs_selection for a in typed], eps, delta, session.mechanism)
    floor = to_fraction(engine.policy.epsilon_range(session.analyst)[0])
    if len(shares) > 1 and shares[0][0] < floor:
        raise InvalidParameter(
            f"epsilon {float(eps):g} split over this statement's {len(shares)} aggregates over "
            f"private tables gives each {float(shares[0][0]):g}, below the policy's per-query "
            f"minimum {float(floor):g}",
            detail="each aggregate runs on the private rows: a nearly free one would still be "
            "a measurement of the data through its run time (docs/timing.md)",
            hint=f"SET dpsql.epsilon to at least {float(floor * len(shares)):g}",
        )
    return [
        engine.plan_analysis(a, e, d, session.mechanism)
        for a, (e, d) in zip(typed, shares, strict=True)
    ]


__all__ = ["bound_split", "leaf_plans", "prepare_tree", "with_catalog_proofs"]

"""What each DP leaf of a tree statement costs, ``auto`` contribution bounds included.

A leaf gets its share (epsilon_i, delta_i) of the statement (:func:`dpsql.sql.tree.split_budget`)
and is then run exactly as a flat private statement at that epsilon
(:func:`dpsql.execute.private.run_private`): its ``auto`` bounds stored in the ledger are reused
free, the missing ones are chosen from the data at ``AUTO_SHARE`` of epsilon_i (one charged
release each, :mod:`dpsql.execute.auto_bounds`), and its answer is measured at what is left.
The statement reserves every leaf's bound choices and every leaf's answer in one ledger
transaction before any leaf reads data (one statement, one charge), and EXPLAIN shows the same
parts (:func:`parts`).

A series-limit leaf (``Split.link``) chooses its bounds on its probe (the leaf with ``key IS NOT
NULL`` in place of the released keys: a superset of its rows, known before any data is read);
any bound is sound, the plan reads the same numbers the rewrite bounds with.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from dpsql.dp.accounting import Cost
from dpsql.execute import auto_bounds, auto_bounds_text
from dpsql.execute.auto_bounds import Pending
from dpsql.execute.prepared import PrivateQuery
from dpsql.session import SessionContext
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext

LeafPlan = Plan | SetsPlan


@dataclass(frozen=True)
class LeafBudget:
    """One leaf's budget: its share, its ``auto`` bounds, the slice choosing the missing ones
    costs, and the plan of its answer at the rest (the stored and declared bounds applied;
    before the missing ones are chosen, the defaults stand for them: the cost is the same)."""

    share: LeafPlan  # the leaf at its share, bounds unresolved: the free-repeat key's epsilon
    pend: Pending | None  # None: the leaf's tables have no ``auto`` bound
    slice: Fraction  # epsilon spent choosing the missing bounds (0: none, or too small)
    answer: LeafPlan  # planned at share.epsilon - slice
    small: AutoBounds | None = None  # the missing bounds kept at the defaults (too small)

    @property
    def auto(self) -> bool:
        return self.pend is not None

    @property
    def choosing(self) -> bool:
        """Whether running the leaf chooses bounds from the data (charged releases)."""
        return self.pend is not None and bool(self.pend.missing) and self.slice > 0

    def bound_costs(self) -> list[Cost]:
        """The cost of each bound this leaf chooses (one release each)."""
        if not self.choosing or self.pend is None:
            return []
        return [m.cost for m in auto_bounds.mechanisms(self.pend, self.share.epsilon)]

    def known(self) -> AutoBounds:
        """The bounds known without reading data (stored, declared, or the too-small note)."""
        if self.small is not None:
            return self.small
        return self.pend.known if self.pend is not None else AutoBounds()


def leaf_budget(
    engine: EngineContext, leaf: PrivateQuery, share: LeafPlan, session: SessionContext
) -> LeafBudget:
    """A leaf's budget at its ``share`` (reads the ledger's stored bounds, spends nothing)."""
    a = share.analysis
    pend = auto_bounds.pending(engine, leaf, session, a)
    if pend.missing:  # a choice that fell back at this epsilon is reused (a retry: free)
        pend = auto_bounds.with_fallbacks(engine, leaf, session, pend, share.epsilon)
    if not pend.needed:
        return LeafBudget(share, None, Fraction(0), share)
    small = auto_bounds.too_small(pend, share.epsilon) if pend.missing else None
    cut = Fraction(0) if small is not None else auto_bounds.slice_epsilon(share.epsilon, pend)
    known = small if small is not None else pend.known
    answer = engine.plan_analysis(
        apply_bounds(a, known), share.epsilon - cut, share.delta, session.mechanism
    )
    return LeafBudget(share, pend, cut, answer, small)


def resolved_plan(
    engine: EngineContext,
    leaf: PrivateQuery,
    budget: LeafBudget,
    bounds: AutoBounds | None,
    session: SessionContext,
) -> tuple[LeafPlan, AutoBounds | None]:
    """The plan leaf ``leaf`` runs with, and the ``auto`` bounds it uses (None: none): its
    analysis with ``bounds`` (those chosen for it, or the known ones) at the epsilon left after
    the choice. A series-limit leaf's own stored and declared bounds come first (those chosen
    on its probe fill in the rest)."""
    a = leaf.analysis
    assert a is not None
    if not budget.auto:
        plan = engine.plan_analysis(a, budget.share.epsilon, budget.share.delta, session.mechanism)
        return plan, None
    use = bounds if bounds is not None else budget.known()
    if a is not budget.share.analysis:  # a series limit's leaf, prepared on the released keys
        own = auto_bounds.pending(engine, leaf, session, a).known.chosen
        kinds = {(c.kind, c.column) for c in own}
        rest = tuple(c for c in use.chosen if (c.kind, c.column) not in kinds)
        use = AutoBounds((*own, *rest), use.epsilon_spent, use.fallback)
    plan = engine.plan_analysis(
        apply_bounds(a, use), budget.answer.epsilon, budget.share.delta, session.mechanism
    )
    return plan, use


def explain_text(budget: LeafBudget) -> str | None:
    """EXPLAIN's line on the leaf's ``auto`` bounds (None without any)."""
    if budget.pend is None:
        return None
    unit = budget.share.analysis.private.privacy_unit
    if budget.small is not None:
        return auto_bounds_text.in_terms(budget.small.fallback, unit)
    return auto_bounds_text.explain_text(budget.pend, budget.share.epsilon, unit)


__all__ = ["LeafBudget", "explain_text", "leaf_budget", "resolved_plan"]

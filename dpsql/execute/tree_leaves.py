"""The leaves of one execution of a statement of several DP leaves (:mod:`dpsql.execute.tree`):
each prepared, planned within what was reserved for it, its free-repeat key, its stored or new
release, and the ``auto`` bounds it used (:class:`LeafRun`). A series-limit leaf is prepared
for real once its source leaf is released.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.budget.records import Stored
from dpsql.errors import InternalError
from dpsql.execute.noise import Release
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.repeat_keys import applied_bounds, auto_cache_key, bounds_key, cache_key
from dpsql.execute.tree_budget import LeafBudget, LeafPlan, resolved_plan
from dpsql.execute.tree_post import leaf_query
from dpsql.execute.tree_prepare import with_catalog_proofs
from dpsql.session import SessionContext
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.bind import literal
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.postprocess import outer_sql
from dpsql.sql.tree import Split

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def declared_of(engine: EngineContext, plan: LeafPlan) -> Any:
    if isinstance(plan, SetsPlan):
        return [engine.declared_keys(sp.plan.analysis) for sp in plan.sets]
    return engine.declared_keys(plan.analysis)


class LeafRun:
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
        # measured again: the bounds stored since differ from its stored answer's (resolve)
        self.again: list[bool] = [False] * len(leaves)

    def resolve(self, i: int, lookup: bool = True) -> None:
        """Leaf i's real SQL (a series limit's from its source's released keys), its
        free-repeat key, and its stored answer if any (before the charge: the leaves whose
        source is known then; ``lookup`` False after the charge)."""
        engine, link = self.engine, self.sp.link(i)
        if link is not None:
            values = self._released_keys(link.source, link.column)
            leaf = engine.prepare_in_scope(link.instantiate(values).sql(POSTGRES), self.scope)
            if not isinstance(leaf, PrivateQuery):
                raise InternalError("a series limit's leaf is not one private block")
            (self.leaves[i],) = with_catalog_proofs(engine, [leaf])  # as its probe's
        ledger = engine.ledger
        if ledger is None:
            self.keys[i] = ""
            return
        b = self.budgets[i]
        if b.auto:  # as a flat statement's: its own epsilon, whatever the bounds cost
            key = auto_cache_key(engine, self.leaves[i], b.share, (), self.session.mechanism)
            if b.pend is not None and not b.pend.missing:
                # and, with every bound known, of an answer measured with them: one stored
                # under other bounds (the R = 1 fallback before the table's stored R) is
                # measured again under this key, as a flat statement's (bounds_key)
                bounded = bounds_key(engine, self.session, key, b.pend.known)
                self.again[i], key = bounded != key, bounded
        else:
            key = cache_key(engine, self.leaves[i], self._share_plan(i), ())
        self.keys[i] = key
        if lookup:
            stored = ledger.lookup_stored(self.session.analyst, key, self.text or None)
            if stored is not None:
                self.releases[i] = Release.from_json(json.loads(stored.payload))
                self.repeats[i] = stored
                self.plans[i] = self._share_plan(i)

    def with_bounds(self, i: int, rel: Release) -> Release:
        """Leaf i's release as stored: with the ``auto`` bounds it was measured with (a repeat
        under other bounds stored since is measured again: :meth:`resolve`)."""
        used = self.bounds[i]
        return rel if used is None else replace(rel, bounds=applied_bounds(used))

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

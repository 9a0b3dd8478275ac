"""What the stages of ``dpsql/execute/`` and ``dpsql/explain/`` may ask of the engine.

:class:`dpsql.engine.Engine` calls the stages (``run_private``, ``run_tree``, ``run_explain``, ...)
with itself; they see it through :class:`EngineContext`, so no stage imports :mod:`dpsql.engine`
(the engine imports the stages, never the reverse: no import circle). The members are the
engine's state (policy, backend, caches, ledger) and the steps a stage repeats for a part of its
statement (a tree's leaf, an EXPLAIN's inner statement): scope, prepare, analyze, plan, run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from dpsql.budget.api import BudgetLedger
from dpsql.clock import Clock
from dpsql.dp.noise_source import NoiseSource
from dpsql.execute.backend import Backend, CancelToken
from dpsql.execute.caches import EngineCaches
from dpsql.execute.prepared import DeferredQuery, Prepared, PrivateQuery
from dpsql.policy.model import Policy
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan


@dataclass(frozen=True)
class Execution:
    """One run of a prepared statement: ``prepared`` with ``params`` bound, for ``session``,
    stopped (QueryCanceled) when ``cancel`` is set. What the wire server hands a worker thread,
    what :meth:`dpsql.engine.Engine.execute` builds from its arguments."""

    prepared: Prepared
    session: SessionContext
    params: tuple[object, ...] = ()
    cancel: CancelToken | None = None


class Executes(Protocol):
    """What runs a prepared statement: the engine as a stage, the wire server
    (:class:`dpsql.wire.engine_api.EngineAPI`) and the timing padding
    (:func:`dpsql.execute.timing.execute_padded`) call it."""

    def run(self, execution: Execution) -> Result:
        """Run ``execution`` (a private statement is charged, then answered)."""
        ...


class EngineContext(Executes, Protocol):
    """The engine as a stage sees it (implemented by :class:`dpsql.engine.Engine`)."""

    policy: Policy
    backend: Backend
    caches: EngineCaches
    ledger: BudgetLedger | None
    noise: NoiseSource  # every random choice of a release (the product's: dp.noise_source.CSPRNG)
    clock: Clock  # what an analysis and a repeat key read as the time (the product's: the system's)

    def view(self, analyst: str | None) -> Policy: ...

    def scope(self, analyst: str | None) -> str: ...

    def check_scope(self, prepared: Prepared, session: SessionContext) -> None: ...

    def repeat_digest(self, scope: str) -> str: ...

    def prepare_in_scope(self, text: str, scope: str = "") -> Prepared: ...

    def column_order(self, table: str) -> tuple[str, ...]: ...

    def bound_limit(self, prepared: DeferredQuery, params: Sequence[object]) -> Prepared: ...

    def runnable_sql(
        self, prepared: Prepared, session: SessionContext, params: Sequence[object] = ()
    ) -> str: ...

    def privacy_params(self, session: SessionContext, a: Analysis) -> tuple[Fraction, Fraction]: ...

    def analysis(self, prepared: PrivateQuery, params: Sequence[object]) -> Analysis: ...

    def plan_analysis(
        self, a: Analysis, epsilon: Fraction, delta: Fraction, mechanism: str
    ) -> Plan | SetsPlan: ...

    def private_sql(self, prepared: PrivateQuery, a: Analysis) -> str: ...

    def checked_sql(self, prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]: ...

    def typed_sql(self, prepared: PrivateQuery, a: Analysis) -> str: ...

    def catalog_token(self, a: Analysis) -> str: ...

    def catalog_tokens(self) -> dict[tuple[str, ...], str]: ...

    def group_types(self, prepared: PrivateQuery, a: Analysis) -> tuple[str, ...]: ...

    def declared_keys(self, a: Analysis) -> list[tuple[str | None, ...]] | None: ...

    def resolve_keys_from(self, ref: str) -> tuple[str, ...]: ...

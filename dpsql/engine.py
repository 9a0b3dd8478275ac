"""The DP query engine: prepare (parse, classify, analyze), describe, execute.

One statement is one trip through the pipeline::

    parse -> classify -> analyze -> rewrite -> plan -> charge -> execute -> noise -> post-process

The engine is synchronous and thread-safe; the wire server calls it from worker threads. Its
parts live in ``dpsql/execute/``: :mod:`~dpsql.execute.prepare` (text to a prepared statement, :mod:`~dpsql.execute.prepared`),
:mod:`~dpsql.execute.privacy_params` (a query's epsilon and delta),
:mod:`~dpsql.execute.public_sql` (public / catalog SQL, its fast paths, its Describe),
:mod:`~dpsql.execute.private_sql` and :mod:`~dpsql.execute.group_keys` (the private query's SQL
and keys), :mod:`~dpsql.execute.private` (the private path) and :mod:`~dpsql.explain.run`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from fractions import Fraction

from dpsql.budget import overcharge, route
from dpsql.budget.api import BudgetLedger
from dpsql.clock import SYSTEM_CLOCK, Clock, day, reading
from dpsql.dp.noise_source import CSPRNG, NoiseSource
from dpsql.errors import UnsupportedSql
from dpsql.execute import group_keys, no_rows, planning, prepare, public_sql
from dpsql.execute import privacy_params as privacy_params_module
from dpsql.execute import private_sql as private_sql_module
from dpsql.execute.backend import Backend, CancelToken
from dpsql.execute.caches import EngineCaches
from dpsql.execute.classify import classify
from dpsql.execute.context import Execution
from dpsql.execute.finish import finish
from dpsql.execute.noise import Release, release
from dpsql.execute.prepared import (
    CatalogQuery,
    DeferredQuery,
    EmptyQuery,
    ExplainQuery,
    LedgerQuery,
    Prepared,
    PrivateQuery,
    PublicQuery,
    SessionCommand,
    TreeQuery,
    fingerprint,
)
from dpsql.execute.privacy_params import MAX_DELTA, to_fraction
from dpsql.execute.private import run_private
from dpsql.execute.statement_run import StatementRun
from dpsql.execute.tree import run_tree
from dpsql.execute.tree_post import describe_tree
from dpsql.execute.unique_units import catalog_state, recheck, tables
from dpsql.explain.run import describe_explain, prepare_explain, run_explain
from dpsql.policy.model import Policy
from dpsql.result import Result, ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.analyze import analyze
from dpsql.sql.bi_shapes import (
    returns_no_rows,
)
from dpsql.sql.bind import bind, check_params
from dpsql.sql.group_domain import empty_domain_notice, unfiltered_keys_notice
from dpsql.sql.grouping_sets import SetsPlan, make_sets_plan
from dpsql.sql.parse import ParsedExplain, parse_statement, split_statements
from dpsql.sql.plan import Plan, make_plan
from dpsql.sql.postprocess import outer_query, outer_sql
from dpsql.sql.prescan import kept_text
from dpsql.upstream.zone import UTC_NAME, ZONE, session_zone, statement_zone

Planner = Callable[[Analysis, Fraction, Fraction, str], Plan]
"""Plans a private measurement: (analysis, epsilon, delta, mechanism) -> plan."""


class Engine:
    """Answers SQL under a policy against an upstream PostgreSQL."""

    def __init__(
        self,
        policy: Policy,
        upstream_dsn: str,
        ledger: BudgetLedger | None = None,
        *,
        pool_size: int = 16,
        cache_size: int = 2048,
        statement_timeout_ms: int | None = None,
        planner: Planner = make_plan,
        noise: NoiseSource = CSPRNG,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """An engine answering under ``policy`` on ``upstream_dsn``.

        Args:
            planner: plans a private measurement (and each grouping set's): always
                :func:`~dpsql.sql.plan.make_plan`, except in a privacy audit that checks a
                deliberately broken engine fails (tests/dp_audit).
            noise: where every release draws its randomness: always
                :data:`~dpsql.dp.noise_source.CSPRNG` (exact samplers on the operating system's
                CSPRNG), except in tests that compare with an exact answer (a zero-noise source,
                tests/helpers.py). Neither ``dpsql serve``, the CLI nor the policy sets it.
            clock: dpsql's clock, what an analysis reads as the time (:mod:`dpsql.clock`):
                the system's, except in tests that move it.
        """
        self.policy = policy
        self.planner = planner
        self.noise = noise
        self.clock = clock
        self.ledger = ledger
        self.backend = Backend(
            upstream_dsn,
            statement_timeout_ms=statement_timeout_ms or policy.defaults.statement_timeout_ms,
            max_size=pool_size,
        )
        self._cache: OrderedDict[tuple[str, ...], Prepared] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.caches = EngineCaches.sized(cache_size)  # what dpsql/execute/ reads and fills
        self._views: dict[str, Policy] = {}
        self._digests: dict[str, str] = {}  # repeat_digest per scope
        self._column_orders: dict[str, tuple[str, ...]] = {}  # table -> attnum order
        # per worker thread: the catalog tokens read during the statement it runs now
        self._catalog = threading.local()
        self.policy_digest = hashlib.sha256(policy.model_dump_json().encode()).hexdigest()[:16]

    def close(self) -> None:
        self.backend.close()

    split = staticmethod(split_statements)

    # -- per-analyst permissions ---------------------------------------------------------------
    def view(self, analyst: str | None) -> Policy:
        """The policy as ``analyst`` sees it: tables it may not use are absent (like missing ones)."""
        if analyst is None:
            return self.policy
        hit = self._views.get(analyst)
        if hit is None:
            hit = self._views[analyst] = self.policy.for_analyst(analyst)
        return hit

    def repeat_digest(self, scope: str) -> str:
        """The policy digest for the repeat cache under ``scope``'s view: the analyst's view
        changes answers only where it drops a ``keys_from`` (a denied key table), so such a
        view gets its own digest and never reads a stored answer that listed those keys.
        A function of the engine's policy and ``scope`` alone: computed once per scope."""
        hit = self._digests.get(scope)
        if hit is None:
            hit = self._digests[scope] = self._repeat_digest(scope)
        return hit

    def _repeat_digest(self, scope: str) -> str:
        view = self.view(scope or None)
        dropped = sorted(
            f"{t}.{c}"
            for t, pt in view.tables.items()
            for c, col in pt.columns.items()
            if col.keys_from is None and self.policy.tables[t].columns[c].keys_from is not None
        )
        return self.policy_digest + (":no-keys-from:" + ",".join(dropped) if dropped else "")

    def scope(self, analyst: str | None) -> str:
        """The scope a statement of ``analyst`` is prepared under: "" when the analyst sees the
        whole policy, else the analyst's name (:attr:`Prepared.scope`)."""
        return "" if analyst is None or self.view(analyst) is self.policy else analyst

    def check_scope(self, prepared: Prepared, session: SessionContext) -> None:
        """Refuse, as for a missing table, a statement prepared under another analyst's view."""
        scope = self.scope(session.analyst)
        if prepared.scope != scope and prepared.tree is not None:
            classify(prepared.tree, self.view(session.analyst))

    # -- prepare -------------------------------------------------------------------------------
    def prepare(self, text: str, analyst: str | None = None) -> Prepared:
        """Parse and classify ``text`` as ``analyst`` sees the policy (None: the whole policy).

        A table the analyst may not use is refused exactly as a missing one (42P01), here at
        prepare time as PostgreSQL refuses it at Parse.
        """
        scope = self.scope(analyst)
        zone = ZONE.get()
        key = (scope, text) if zone == UTC_NAME else (scope, text, zone)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and (
                hit.clock_day is None or hit.clock_day == day(self.clock.now())
            ):
                self._cache.move_to_end(key)
                return hit
        p = self.prepare_in_scope(text, scope)
        if not kept_text(text):  # a tree of up to 50k tokens: not kept once answered
            return p
        with self._lock:
            self._cache[key] = p
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return p

    def prepare_in_scope(self, text: str, scope: str = "") -> Prepared:
        """Parse and classify ``text`` under ``scope``'s view (see :meth:`scope`), not cached;
        analyzed in the time zone of the statement this thread runs
        (:data:`dpsql.upstream.zone.ZONE`), reading the engine's clock (the day it read, if any,
        recorded: :meth:`current`)."""
        with reading(self.clock) as r:
            match parse_statement(text):
                case ParsedExplain():
                    p: Prepared = prepare_explain(self, text, scope)
                case st:
                    p = prepare.prepare_parsed(self, st, text, scope)
        if r.at is not None:
            p = replace(p, clock_day=day(r.at))
        zone = ZONE.get()
        return p if zone == UTC_NAME else replace(p, zone=zone)

    def current(self, prepared: Prepared, analyst: str | None) -> Prepared:
        """``prepared``, or the same text analyzed again if its analysis read dpsql's clock on
        another UTC day than today's (a date-range verdict: :mod:`dpsql.sql.date_range_empty`):
        a statement held over midnight (cached, a wire session's named statement or portal)
        never answers from a verdict of a day that is over."""
        if prepared.clock_day is None or prepared.clock_day == day(self.clock.now()):
            return prepared
        return self.prepare(prepared.text, analyst)

    def bound_limit(self, prepared: DeferredQuery, params: Sequence[object]) -> Prepared:
        """A ``LIMIT $n`` statement with ``params`` written inline, prepared as such
        (:func:`dpsql.execute.prepare.bound_limit`)."""
        return prepare.bound_limit(self, prepared, params)

    # -- describe / execute ----------------------------------------------------------------------
    def describe(
        self, prepared: Prepared, session: SessionContext, param_types: Sequence[int] = ()
    ) -> tuple[ResultColumn, ...]:
        """The result columns, without reading private data or spending budget.

        ``param_types``: the parameter types the statement was prepared with (a Parse's OIDs,
        0 where unspecified), as PostgreSQL uses them to type the result columns.
        """
        self.check_scope(prepared, session)
        self._catalog.tokens = {}  # read again for this statement
        prepared = prepare.typed_like(prepared, self.current(prepared, session.analyst))
        match prepared:
            case DeferredQuery():  # LIMIT 0's columns; SUM(q / $1)'s with 1 of $1's type
                shape = prepare.described_shape(self, prepared, param_types)
                return self.describe(shape, session, param_types if shape.param_count else ())
            case TreeQuery():
                return describe_tree(self, prepared, session)
            case PrivateQuery():
                a = self.analysis(prepared, [None] * prepared.param_count)
                rel = Release(self.group_types(prepared, a), [], [], [])
                return finish(self, prepared, a, rel, session, describe_only=True).columns
            case PublicQuery() | CatalogQuery():
                return public_sql.describe_public(self, prepared, session, param_types)
            case LedgerQuery():
                return route.describe(prepared.tree or prepared.text)
            case ExplainQuery():
                return describe_explain(prepared)
            case EmptyQuery() | SessionCommand():
                return ()

    def _require_ledger(self) -> BudgetLedger:
        if self.ledger is None:
            raise UnsupportedSql(
                "this dpsql runs without a budget ledger",
                hint="start dpsql with a ledger (--ledger DSN, or the upstream database)",
            )
        return self.ledger

    def execute(
        self,
        prepared: Prepared,
        session: SessionContext,
        params: Sequence[object] = (),
        cancel: CancelToken | None = None,
    ) -> Result:
        """:meth:`run` of ``prepared`` with ``params`` for ``session`` (``dpsql query``, scripts)."""
        return self.run(Execution(prepared, session, tuple(params), cancel))

    def run(self, execution: Execution) -> Result:
        """Run ``execution`` in its session's time zone (``SET TIME ZONE``): every upstream
        statement runs in it, and a private statement analyzed in another zone is analyzed
        again in it (its generated ``date_trunc`` keys are the zone's)."""
        prepared, analyst = execution.prepared, execution.session.analyst
        zone = session_zone(execution.session.settings)
        utc = zone == UTC_NAME and prepared.zone == UTC_NAME  # (no zone to set)
        with nullcontext() if utc else statement_zone(zone):
            fresh = prepared
            if prepared.zone != zone and isinstance(prepared, _ZONED):
                fresh = self.prepare(prepared.text, analyst)
            fresh = prepare.typed_like(prepared, self.current(fresh, analyst))
            return self._execute(replace(execution, prepared=fresh))

    def _execute(self, ex: Execution) -> Result:
        prepared, session, params, cancel = ex.prepared, ex.session, ex.params, ex.cancel
        check_params(prepared.tree, prepared.param_count, len(params))
        self.check_scope(prepared, session)
        self._catalog.tokens = {}  # read again for this statement
        match prepared:
            case DeferredQuery():  # LIMIT $1: as the statement with its values inline
                return self._execute(
                    Execution(self.bound_limit(prepared, params), session, (), cancel)
                )
            case TreeQuery() | PrivateQuery() if returns_no_rows(prepared.tree, params):
                # LIMIT 0: no rows whatever the data: the columns only, nothing read or charged
                return Result(self.describe(prepared, session), [], "SELECT 0")
            case PrivateQuery() if (empty := self._no_keys_left(prepared, params)) is not None:
                # the WHERE clause leaves a GROUP BY key no public value: no rows whatever
                # the data (as PostgreSQL answers), said in a notice; nothing read or charged;
                # without GROUP BY, the one row of aggregates over no rows (execute.no_rows)
                a = self.analysis(prepared, params)
                if not a.group_keys:
                    return no_rows.answer(self, prepared, a, session, empty)
                return Result(self.describe(prepared, session), [], "SELECT 0", (empty,))
            case TreeQuery() | PrivateQuery():
                with overcharge.watching() as got:
                    if isinstance(prepared, TreeQuery):
                        res = run_tree(StatementRun(self, prepared, session, params, cancel))
                    else:
                        res = run_private(StatementRun(self, prepared, session, params, cancel))
                more = overcharge.notices(got, res.epsilon_spent) if got else ()
                if isinstance(prepared, PrivateQuery) and not prepared.analysis.measures:
                    a = self.analysis(prepared, params)  # keys listed from their domain
                    note = unfiltered_keys_notice(a.group_keys, a.where)
                    # nothing is measured: no contribution bound applies to the answer
                    kept = tuple(n for n in res.notices if not n.startswith("contribution bounds:"))
                    res = replace(res, notices=kept + ((note,) if note is not None else ()))
                return replace(res, notices=res.notices + more) if more else res
            case PublicQuery() | CatalogQuery():
                text = public_sql.signalling_sql(self, prepared, session, params, cancel)
                if text is None:
                    text = self.runnable_sql(prepared, session, params)
                rows = self.backend.run(text, private=False, cancel=cancel)
                return Result(rows.columns, rows.rows, rows.status)
            case ExplainQuery():  # the plan only: no private data read, no budget spent
                return run_explain(self, prepared, session, params, cancel)
            case EmptyQuery():
                return Result((), [], "")
            case LedgerQuery():  # dpsql.budget / dpsql.history: the analyst's own ledger rows
                return route.answer(
                    self._require_ledger(), session.analyst, prepared.tree or prepared.text
                )
            case SessionCommand():
                raise UnsupportedSql(
                    f"{prepared.first_word} is handled by the dpsql session, not the engine",
                    hint="connect through `dpsql serve`",
                )

    def _no_keys_left(self, prepared: PrivateQuery, params: Sequence[object]) -> str | None:
        """The notice of a statement whose WHERE clause leaves some GROUP BY key (declared keys,
        ``keys_from`` values, a date range's buckets) without a value, None otherwise (also
        with grouping sets: their total rows remain)."""
        a = self.analysis(prepared, params)
        if a.grouping_sets:
            return None
        if not a.group_keys:  # no GROUP BY: a WHERE clause no row can pass (no_row_left)
            note = a.no_keys
        else:
            note = empty_domain_notice(a.group_keys, a.no_keys)
        if note is not None and group_keys.nondeterministic_text(self, a):
            # 'Flu' = 'flu' and 'F%' matches 'flu' there: keys compared as code points say
            # nothing; the release refuses its text keys instead (before any charge)
            return None
        return note

    # the SQL of a public or catalog statement, for a caller that runs it on its own connection
    runnable_sql = public_sql.runnable_sql
    cached_sql = public_sql.cached_sql
    parameterized_sql = public_sql.parameterized_sql

    # -- helpers used by the private path ----------------------------------------------------------
    def analysis(self, prepared: PrivateQuery, params: Sequence[object]) -> Analysis:
        """A private statement's analysis with ``params`` bound (the prepared one without)."""
        if not params:
            return prepared.analysis
        with reading(self.clock):
            a = analyze(bind(prepared.tree, params), self.view(prepared.scope or None))
        return group_keys.inline_key_tables(self, a, prepared.text, prepared.tree, prepared.scope)

    def column_order(self, table: str) -> tuple[str, ...]:
        """A table's column names in PostgreSQL's order (attnum), read once per table."""
        hit = self._column_orders.get(table)
        if hit is None:
            rows = self.backend.run(
                "SELECT a.attname::text FROM pg_catalog.pg_attribute AS a "
                "WHERE a.attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text)) "
                "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                tuple(table.split(".", 1)),
                private=False,
            ).rows
            hit = self._column_orders[table] = tuple(str(r[0]) for r in rows)
        return hit

    def check_epsilon(self, analyst_name: str, eps: Fraction) -> None:
        """Refuse (22023) a per-query epsilon outside ``analyst_name``'s policy range.

        Used when a query runs and when ``SET dpsql.epsilon`` is applied (wire session).
        """
        privacy_params_module.check_epsilon(self.policy, analyst_name, eps)

    def privacy_params(self, session: SessionContext, a: Analysis) -> tuple[Fraction, Fraction]:
        """The query's (epsilon, delta) from the session, the analyst and the policy, validated."""
        return privacy_params_module.privacy_params(self.policy, session, a)

    plan = planning.plan  # the DP plan of a private statement (dpsql.execute.planning)

    def plan_analysis(
        self, a: Analysis, epsilon: Fraction, delta: Fraction, mechanism: str
    ) -> Plan | SetsPlan:
        """The DP plan of one analyzed private block at (epsilon, delta) (a tree's leaf too)."""
        if a.grouping_sets:
            return make_sets_plan(a, epsilon, delta, mechanism, self.planner)
        return self.planner(a, epsilon, delta, mechanism)

    def private_sql(self, prepared: PrivateQuery, a: Analysis) -> str:
        """The bounded SQL of a private query (memoized for statements without parameters);
        unbounded when its plan found that the catalog proves one row per unit
        (``a.unique_unit``, :meth:`plan`): the catalog is read again here, just before the
        private query runs, and a proof gone since (a dropped key) refuses the statement, whose
        plan spent nothing on the rows bounding would now drop. Keys of an integer type (the
        memoized type probe) are filtered as integers (:attr:`Analysis.integer_keys`), quantile
        arguments of an integer type clamped and bucketed in integers
        (:attr:`Analysis.integer_values`), keys of a type in
        :data:`~dpsql.sql.rewrite.keyed_hash.HASHED_TYPES` hashed as values when a unit's groups
        are ranked (:attr:`Analysis.hashed_keys`), and the unit too when its type is one of them
        (:attr:`Analysis.unit_type`)."""
        return self.checked_sql(prepared, a)[0]

    def checked_sql(self, prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        """:meth:`private_sql`, and the analysis it was written from: ``a`` with the catalog's
        proofs read again (:func:`~dpsql.execute.unique_units.recheck`: a column whose CHECK
        constraint is gone since the plan is clamped again), which the caller checks once more
        after the query ran (:func:`~dpsql.execute.unique_units.still_proven`)."""
        a = recheck(self.backend, a, "while the statement was being planned")
        return self.typed_sql(prepared, a), a

    def typed_sql(self, prepared: PrivateQuery, a: Analysis) -> str:
        """:meth:`checked_sql`'s text without reading the catalog's proofs again: the bounded
        SQL of ``a`` with the types of its keys, values and unit (zero-row probes, memoized)."""
        types = self.group_types(prepared, a)
        ints = private_sql_module.integer_keys(a, types)
        value_types = group_keys.value_types(self, prepared, a)
        values = private_sql_module.integer_values(value_types)
        hashed = private_sql_module.hashed_keys(a, types)
        text = private_sql_module.private_sql(
            self.caches.sql,
            prepared,
            a,
            integer_keys=ints,
            integer_values=values,
            hashed_keys=hashed,
            hashed_key_types=private_sql_module.hashed_key_types(a, types),
            unit_type=group_keys.unit_type(self, prepared, a),
            row_value_types=private_sql_module.row_value_types(value_types),
        )
        return text

    def catalog_tokens(self) -> dict[tuple[str, ...], str]:
        """The catalog tokens (:meth:`catalog_token`) read during the statement this thread
        runs now, by the tables they are of."""
        tokens: dict[tuple[str, ...], str] | None = getattr(self._catalog, "tokens", None)
        if tokens is None:
            tokens = self._catalog.tokens = {}
        return tokens

    def catalog_token(self, a: Analysis) -> str:
        """The catalog state of ``a``'s tables (:data:`~dpsql.execute.unique_units.
        CATALOG_TOKEN_SQL`) as read during the statement this thread runs now: by its plan, in
        the round trip of the one-row-per-unit proof, else here (a tree's leaves, describe)."""
        tokens = self.catalog_tokens()
        key = tables(a)
        hit = tokens.get(key)
        if hit is None:
            hit = tokens[key] = catalog_state(self.backend, a).token
        return hit

    # a private statement's group keys (dpsql.execute.group_keys)
    group_types = group_keys.group_types
    declared_keys = group_keys.declared_keys
    resolve_keys_from = group_keys.resolve_keys_from


# the statements whose analysis depends on the time zone (generated date_trunc keys)
_ZONED = (PrivateQuery, TreeQuery, ExplainQuery, DeferredQuery)


__all__ = [
    "MAX_DELTA",
    "CancelToken",
    "Engine",
    "Prepared",
    "fingerprint",
    "outer_query",
    "outer_sql",
    "release",
    "to_fraction",
]

"""The EXPLAIN path: the DP plan of a private query, PostgreSQL's plan of a public one.

``EXPLAIN <private query>`` answers dpsql's own plan (:func:`dpsql.explain.report.report`): what is
measured, the mechanisms, the cost and its split, the sensitivities from the policy's bounds, the
noise, the contribution bounds, partition selection, the expected accuracy, whether it would be a
free repeat and the budget it would be charged to. Nothing is read from the private tables (no
upstream EXPLAIN either: its row estimates come from pg_statistic) and nothing is charged.
``EXPLAIN ANALYZE`` of a private query is refused: it would run the query on the raw rows.

``EXPLAIN <public query>`` runs PostgreSQL's EXPLAIN of the validated statement, with the options
rendered from :mod:`dpsql.sql.explain_options`. For catalog queries, whose row estimates and
``Rows Removed by Filter`` would count the relations dpsql hides, COSTS is forced off and ANALYZE
is refused.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpsql.dp.accounting import ZERO, Cost, sequential
from dpsql.errors import (
    DpsqlError,
    PrivacyViolation,
    SqlSyntaxError,
    UnsupportedSql,
)
from dpsql.execute import auto_bounds, auto_bounds_text, planning, privacy_params, statement_sql
from dpsql.execute.backend import CancelToken
from dpsql.execute.noise import Release
from dpsql.execute.notices import interval_notices, null_everywhere
from dpsql.execute.prepared import (
    CatalogQuery,
    DeferredQuery,
    ExplainQuery,
    LedgerQuery,
    Prepared,
    PrivateQuery,
    PrivateStatement,
    PublicQuery,
    TreeQuery,
    fingerprint,
)
from dpsql.execute.private import delta_for_rho
from dpsql.execute.repeat_keys import auto_cache_key, bounds_key, cache_key
from dpsql.explain.document import plan_document, plan_lines, plan_xml, would_spend
from dpsql.explain.report import report
from dpsql.explain.tree import explain_tree
from dpsql.result import Result, ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.bi_shapes import returns_no_rows
from dpsql.sql.explain_options import ExplainOptions, parse_explain
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.parse import ParsedExplain
from dpsql.sql.plan import Plan

if TYPE_CHECKING:
    from dpsql.budget.api import BudgetLedger
    from dpsql.execute.context import EngineContext

TEXT_OID, JSON_OID, XML_OID = 25, 114, 142
_FORMAT_OIDS = {"JSON": JSON_OID, "XML": XML_OID}


def prepare_explain(engine: EngineContext, text: str, scope: str) -> ExplainQuery:
    """Prepare ``EXPLAIN ...``: the explained statement is prepared (and refused) as itself.

    Raises:
        DpsqlError: the explained statement's own refusal (its SQLSTATE and message; positions
            counted in the EXPLAIN's text), a bad option, or EXPLAIN ANALYZE of a private or
            catalog query (42501).
    """
    ex = parse_explain(text)
    try:
        inner = engine.prepare_in_scope(ex.statement, scope)
    except DpsqlError as e:
        if e.position is not None:
            e.position += ex.offset
        raise
    opts = ex.options
    if isinstance(inner, LedgerQuery):
        raise UnsupportedSql(
            "EXPLAIN of dpsql's budget views is not supported",
            hint="query them directly: SELECT * FROM dpsql.budget costs no privacy budget",
        )
    if not isinstance(inner, (PrivateQuery, TreeQuery, DeferredQuery, PublicQuery, CatalogQuery)):
        raise SqlSyntaxError(
            f'syntax error at or near "{inner.first_word or ex.statement[:20]}"',
            position=ex.offset + 1,
            hint="EXPLAIN takes a query: EXPLAIN SELECT count(*) FROM t",
        )
    if opts.analyze and isinstance(inner, PrivateStatement):
        raise PrivacyViolation(
            "EXPLAIN ANALYZE of a query on a private table is not allowed: it would run the "
            "query on the raw rows and report their counts and timings",
            hint="use EXPLAIN without ANALYZE: it shows the DP plan (mechanisms, privacy cost, "
            "expected accuracy) without reading any data",
        )
    if opts.analyze and isinstance(inner, CatalogQuery):
        raise PrivacyViolation(
            "EXPLAIN ANALYZE of a catalog query is not allowed: its row counts include the "
            "objects dpsql hides",
            hint="use EXPLAIN (COSTS OFF), or run the query itself",
        )
    return ExplainQuery(
        text=text,
        statement=ParsedExplain(text),
        fingerprint=fingerprint(None, "EXPLAIN " + inner.fingerprint),
        scope=inner.scope,
        inner=inner,
        explain=opts,
    )


def describe_explain(prepared: ExplainQuery) -> tuple[ResultColumn, ...]:
    """One column, "QUERY PLAN": json for FORMAT JSON, xml for XML, else text (as PostgreSQL)."""
    fmt = prepared.explain.format
    oid = _FORMAT_OIDS.get(fmt, TEXT_OID)
    return (ResultColumn("QUERY PLAN", oid),)


def run_explain(
    engine: EngineContext,
    prepared: ExplainQuery,
    session: SessionContext,
    params: Sequence[object],
    cancel: CancelToken | None,
) -> Result:
    """Answer a prepared EXPLAIN with ``params`` bound into the explained statement."""
    inner: Prepared = prepared.inner
    opts = prepared.explain
    if isinstance(inner, DeferredQuery):  # LIMIT $1: explained as with its values inline
        inner, params = engine.bound_limit(inner, params), ()
    if isinstance(inner, (PrivateQuery, TreeQuery)) and returns_no_rows(inner.tree, params):
        return _explain_no_rows(opts)  # as it runs: no rows, nothing read or charged
    if isinstance(inner, (PrivateQuery, TreeQuery)):
        return _explain_private(engine, inner, opts, session, params)
    if isinstance(inner, CatalogQuery):
        opts = opts.with_option("COSTS", False)
    sql = engine.runnable_sql(inner, session, params)  # validated exactly as when it runs
    # The option list is rendered from the parsed whitelist; the statement is validated SQL.
    text = f"EXPLAIN ({opts.render()}) {sql}" if opts.given else f"EXPLAIN {sql}"
    rows = engine.backend.run(text, private=False, cancel=cancel)
    return Result(describe_explain(prepared), rows.rows, rows.status or "EXPLAIN")


def _explain_private(
    engine: EngineContext,
    inner: PrivateQuery | TreeQuery,
    opts: ExplainOptions,
    session: SessionContext,
    params: Sequence[object],
) -> Result:
    """dpsql's plan of a private query, validated as its execution would be, without running."""
    if isinstance(inner, TreeQuery):  # several DP leaves: dpsql.explain.tree
        conf = privacy_params.confidence(engine.policy, session)
        return explain_tree(engine, inner, opts, session, params, conf)
    plan = planning.plan(engine, inner, session, params)  # epsilon/delta refused as at execution
    auto_text = None
    key = cache_key(engine, inner, plan, params)
    bounds: list[Cost] = []  # the bound choices running it would charge (one release each)
    pend = auto_bounds.pending(engine, inner, session, plan.analysis)
    if pend.missing:  # a choice that fell back at this epsilon is reused, as run_private does
        pend = auto_bounds.with_fallbacks(engine, inner, session, pend, plan.epsilon)
    if pend.needed:  # planned as run_private runs it
        key = auto_cache_key(engine, inner, plan, params, session.mechanism)
        if not pend.missing:  # measured again where the stored answer's bounds differ
            key = bounds_key(engine, session, key, pend.known)
        small = auto_bounds.too_small(pend, plan.epsilon) if pend.missing else None
        spent = Fraction(0)
        if small is None:
            auto_text = auto_bounds_text.explain_text(
                pend, plan.epsilon, plan.analysis.private.privacy_unit
            )
            spent = auto_bounds.slice_epsilon(plan.epsilon, pend)
            bounds = [m.cost for m in auto_bounds.mechanisms(pend, plan.epsilon)]
        else:
            auto_text = small.fallback
        shown = small if small is not None else auto_bounds.with_defaults(pend)
        resolved = apply_bounds(plan.analysis, shown)
        plan = planning.plan(engine, inner, session, params, analysis=resolved, spent=spent)
    conf = privacy_params.confidence(engine.policy, session)
    rep = report(inner.text, plan, conf)
    if opts.verbose:  # the SQL that runs, from the function the statement reads (statement_sql)
        texts, _ = statement_sql.statement_texts(engine, inner, plan, recheck=False)
        rep = dataclasses.replace(rep, rewritten=statement_sql.shown(texts))
    budget = budget_status(engine, session, plan, key, bounds)
    doc = plan_document(rep, plan, conf, budget, costs=opts.costs, verbose=opts.verbose)
    _statement_cost(doc, plan.cost, bounds, budget.get("Free Repeat") is True)
    if budget.get("Free Repeat") is True and engine.ledger is not None and session.analyst:
        _stored_errors(doc, engine.ledger.peek(session.analyst, key), plan, conf)
    if auto_text:
        doc["Plan"]["Auto Contribution Bounds"] = auto_text
    if pend.missing and bounds:  # the errors shown are those of the default bounds
        for o in doc["Outputs"]:
            if str(o["Error Interval"]).startswith(("±", "about")):
                o["Error Interval"] = f"{o['Error Interval']} {auto_bounds.UNTIL_CHOSEN}"
    return _render(doc, opts, plan_lines)


def _stored_errors(
    doc: dict[str, Any], raw: bytes | None, plan: Plan | SetsPlan, conf: float
) -> None:
    """A free repeat's outputs described as the answer's notices will describe them: the stored
    release's own accuracy lines (newcomer22 #15: EXPLAIN gave ±38.5 for a stored answer whose
    notice said 'noise ±98.5', released with part of its epsilon spent choosing bounds, and
    with what the bounds left out in its interval). The stored answer is the analyst's to
    read free: describing it reveals nothing running the statement would not."""
    if raw is None:
        return
    rel = Release.from_json(json.loads(raw))
    # as a free repeat's notices are built (finish): the words its release was told
    nulls = null_everywhere(plan.analysis, rel.stats)
    notes = (*rel.notes, *interval_notices(plan.analysis, plan, conf, rel.notes, rel.words, nulls))
    for o in doc["Outputs"]:
        head = f"{o['From']}: "
        line = next((n for n in notes if n.startswith(head)), None)
        if line is not None:
            o["Error Interval"] = f"the stored answer's, as its notice says: {line[len(head) :]}"


def _statement_cost(doc: dict[str, Any], answer: Cost, bounds: Sequence[Cost], free: bool) -> None:
    """The plan's "Privacy Cost" as what running the statement would charge: its answer and the
    ``auto`` bound choices it would make, reserved together; nothing for a free repeat."""
    root = doc["Plan"]
    total = ZERO if free else sequential([answer, *bounds])
    root["Privacy Cost Epsilon"] = float(total.epsilon)
    root["Privacy Cost Delta"] = float(total.delta)
    root["Privacy Cost Rho"] = float(total.rho)
    if free:
        root["Privacy Cost Detail"] = "a free repeat: the stored answer, nothing is charged"
    elif bounds:
        each = sum((c.epsilon for c in bounds), Fraction(0))
        root["Auto Bound Epsilon"] = float(each)
        root["Privacy Cost Detail"] = (
            f"epsilon {float(answer.epsilon):.6g} for the answer and {float(each):.6g} for "
            f"choosing {len(bounds)} contribution bound{'s' if len(bounds) > 1 else ''}, "
            "reserved together"
        )


NO_ROWS = "LIMIT 0: no rows whatever the data"


def _explain_no_rows(opts: ExplainOptions) -> Result:
    """The plan of a private statement whose own LIMIT is 0: nothing read, nothing charged."""
    doc: dict[str, Any] = {
        "Plan": {
            "Node Type": "DP Nothing",
            "Reason": NO_ROWS,
            "Privacy Cost Epsilon": 0,
            "Privacy Cost Delta": 0,
            "Plans": [],
        }
    }
    return _render(
        doc,
        opts,
        lambda _: [
            f"DP Nothing  ({NO_ROWS})",
            "  Privacy cost: epsilon=0, delta=0 (no data is read, nothing is charged)",
        ],
    )


def _render(
    doc: dict[str, Any], opts: ExplainOptions, lines: Callable[[dict[str, Any]], list[str]]
) -> Result:
    """An EXPLAIN document in the statement's FORMAT (``lines``: its FORMAT TEXT)."""
    col = (ResultColumn("QUERY PLAN", _FORMAT_OIDS.get(opts.format, TEXT_OID)),)
    if opts.format == "JSON":
        return Result(col, [([doc],)], "EXPLAIN")
    if opts.format == "XML":
        return Result(col, [(plan_xml(doc),)], "EXPLAIN")
    if opts.format == "YAML":
        import yaml

        return Result(
            col, [(yaml.safe_dump([doc], sort_keys=False, allow_unicode=True).rstrip(),)], "EXPLAIN"
        )
    return Result(col, [(line,) for line in lines(doc)], "EXPLAIN")


def budget_status(
    engine: EngineContext,
    session: SessionContext,
    plan: Plan | SetsPlan,
    key: str,
    bounds: Sequence[Cost] = (),
) -> dict[str, Any]:
    """What running the query would charge and to which budgets (read from the ledger only):
    nothing when ``key`` (its repeat key) holds a stored answer, else its answer's cost and the
    ``bounds`` choices it would make (their costs), reserved together."""
    ledger = engine.ledger
    if ledger is None or session.analyst is None:
        return {"Ledger": False, "Note": "no budget ledger: nothing would be charged"}
    free = _stored(ledger, session.analyst, key)
    out: dict[str, Any] = {"Ledger": True, "Free Repeat": free}
    parts = [] if free else [(plan.cost, delta_for_rho(plan)), *((c, None) for c in bounds)]
    if bounds and not free:
        out["Auto Bound Releases"] = len(bounds)
        out["Auto Bound Epsilon"] = float(sum((c.epsilon for c in bounds), Fraction(0)))
    out.update(would_spend(ledger, session.analyst, parts))
    return out


def _stored(ledger: BudgetLedger, analyst: str, key: str) -> bool:
    """Whether the ledger holds an answer for ``key`` that the analyst's repeat would get.

    A read only: unlike ``Ledger.lookup`` it records no repeat in the history.
    """
    return ledger.has_answer(analyst, key)

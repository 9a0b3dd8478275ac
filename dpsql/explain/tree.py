"""EXPLAIN of a statement of several DP leaves (:mod:`dpsql.sql.tree`): the tree, each leaf's
DP plan (mechanisms, epsilon, bounds, keys) at its share of the budget, the post-processing SQL
and the one charge the statement would make. Reads no private data and charges nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpsql.dp.accounting import sequential
from dpsql.execute import auto_bounds, statement_sql
from dpsql.execute.private import delta_for_rho
from dpsql.execute.repeat_keys import auto_cache_key, cache_key
from dpsql.execute.tree_budget import LeafBudget, LeafPlan, explain_text, leaf_budget
from dpsql.execute.tree_prepare import bound_split, leaf_plans, with_catalog_proofs
from dpsql.explain.document import (
    budget_lines,
    plan_document,
    plan_lines,
    plan_xml,
    would_spend,
)
from dpsql.explain.report import report
from dpsql.result import Result, ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.explain_options import ExplainOptions
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.wording import plain_sql

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext
    from dpsql.execute.prepared import TreeQuery

TEXT_OID, JSON_OID, XML_OID = 25, 114, 142


def explain_tree(
    engine: EngineContext,
    inner: TreeQuery,
    opts: ExplainOptions,
    session: SessionContext,
    params: Sequence[object],
    conf: float,
) -> Result:
    """dpsql's plan of a tree statement, validated as its execution would be, without running."""
    sp, leaves = bound_split(engine, inner, params)
    leaves = with_catalog_proofs(engine, leaves)
    shares = leaf_plans(engine, leaves, session)
    budgets = [
        leaf_budget(engine, leaf, p, session) for leaf, p in zip(leaves, shares, strict=True)
    ]
    plans = [_shown(engine, b, session) for b in budgets]
    ledger = engine.ledger
    nodes: list[dict[str, Any]] = []
    stored: list[bool] = []
    for i, (leaf, plan, b) in enumerate(zip(leaves, plans, budgets, strict=True)):
        key = (
            auto_cache_key(engine, leaf, b.share, (), session.mechanism)
            if b.auto
            else cache_key(engine, leaf, plan, ())
        )
        free = bool(
            ledger is not None
            and session.analyst is not None
            and ledger.has_answer(session.analyst, key)
        )
        stored.append(free)
        note = "stored answer, free" if free else "charged with the statement"
        rep = report(leaf.text, plan, conf)
        if opts.verbose:  # the SQL the leaf runs, from the function it reads (statement_sql)
            texts, _ = statement_sql.statement_texts(engine, leaf, plan, recheck=False)
            rep = dataclasses.replace(rep, rewritten=statement_sql.shown(texts))
        doc = plan_document(
            rep,
            plan,
            conf,
            {"Ledger": False, "Note": note},
            costs=opts.costs,
            verbose=opts.verbose,
        )
        node = doc["Plan"]
        link = sp.link(i)
        node.update({"Leaf": i, "Leaf SQL": leaf.text, "Free Repeat": free})
        if i < len(sp.labels):
            node["Leaf Name"] = sp.labels[i]
        auto = explain_text(b)
        if auto:
            node["Auto Contribution Bounds"] = auto
        if link is not None:  # a series limit: planned on its probe, run on the released keys
            node["Keys From Leaf"] = link.source
            node["Key Filter"] = (
                f"{plain_sql(link.expr)} IN (the {link.column} values leaf {link.source} releases)"
            )
        if b.choosing:  # its errors are the defaults' until the bounds are chosen
            for o in doc["Outputs"]:
                if str(o["Error Interval"]).startswith(("±", "about")):
                    o["Error Interval"] = f"{o['Error Interval']} {auto_bounds.UNTIL_CHOSEN}"
        node["Outputs"] = doc["Outputs"]
        if "Rewritten SQL" in doc:
            node["Rewritten SQL"] = doc["Rewritten SQL"]
        nodes.append(node)
    charged = [b for b, free in zip(budgets, stored, strict=True) if not free]
    root = {
        "Node Type": "DP Tree",
        "Leaves": len(leaves),
        "Epsilon": float(sum((p.epsilon for p in shares), Fraction(0))),
        "Delta": float(sum((p.delta for p in shares), Fraction(0))),
        "Budget Split": "epsilon in equal parts per leaf; delta in equal parts to the leaves "
        "with partition selection (to every leaf when none has it, or with Gaussian noise); a "
        "leaf that chooses auto contribution bounds spends 1/5 of its epsilon on them (one "
        "release per bound) and measures its answer with the rest",
        "Post-Processing": sp.post.sql(POSTGRES),
        "Confidence": conf,
        "Reads Data": False,
        "Plans": nodes,
    }
    doc = {"Plan": root, "Budget": _budget(engine, session, charged)}
    col = (
        ResultColumn("QUERY PLAN", {"JSON": JSON_OID, "XML": XML_OID}.get(opts.format, TEXT_OID)),
    )
    if opts.format == "JSON":
        return Result(col, [([doc],)], "EXPLAIN")
    if opts.format == "XML":
        return Result(col, [(plan_xml(doc),)], "EXPLAIN")
    if opts.format == "YAML":
        import yaml

        text = yaml.safe_dump([doc], sort_keys=False, allow_unicode=True).rstrip()
        return Result(col, [(text,)], "EXPLAIN")
    return Result(col, [(line,) for line in tree_lines(doc)], "EXPLAIN")


def _budget(
    engine: EngineContext, session: SessionContext, charged: Sequence[LeafBudget]
) -> dict[str, Any]:
    """What running would reserve, in one ledger transaction: every charged leaf's bound
    choices and answer (read from the ledger only)."""
    ledger = engine.ledger
    if ledger is None or session.analyst is None:
        return {"Ledger": False, "Note": "no budget ledger: nothing would be charged"}
    out: dict[str, Any] = {"Ledger": True, "Free Repeat": not charged}
    if not charged:
        return out
    answers = [b.answer for b in charged]
    bounds = [c for b in charged for c in b.bound_costs()]
    if bounds:
        out["Auto Bound Releases"] = len(bounds)
        out["Auto Bound Epsilon"] = float(sum((c.epsilon for c in bounds), Fraction(0)))
    # the releases as dpsql.execute.tree reserves them: the answers as one, each bound choice
    rho_deltas = [d for d in (delta_for_rho(p) for p in answers) if d is not None]
    answer = (sequential(p.cost for p in answers), sum(rho_deltas, Fraction(0)) or None)
    parts = [answer, *((c, None) for c in bounds)]
    out.update(would_spend(ledger, session.analyst, parts))
    return out


def _shown(engine: EngineContext, b: LeafBudget, session: SessionContext) -> LeafPlan:
    """The plan EXPLAIN shows of a leaf: its answer's, with the bounds it would choose at their
    defaults (1 row, 1 group, the declared range: :func:`auto_bounds.with_defaults`), as its
    ``auto`` line says, rather than the ceilings it runs without bounds at."""
    if not b.choosing or b.pend is None:
        return b.answer
    a = apply_bounds(b.share.analysis, auto_bounds.with_defaults(b.pend))
    return engine.plan_analysis(a, b.answer.epsilon, b.share.delta, session.mechanism)


def tree_lines(doc: dict[str, Any]) -> list[str]:
    """The tree as text, one row per line (FORMAT TEXT)."""
    root = doc["Plan"]
    out = [
        f"DP Tree  (leaves={root['Leaves']} epsilon={root['Epsilon']:.6g} "
        f"delta={root['Delta']:.6g})",
        f"  Budget split: {root['Budget Split']}",
        "  Post-processing in PostgreSQL over the leaves' noisy rows (no privacy cost):",
        f"    {root['Post-Processing']}",
    ]
    out += [f"  {line}" for line in budget_lines(doc["Budget"])]
    if doc["Budget"].get("Auto Bound Releases"):
        b = doc["Budget"]
        out.append(
            f"  One charge includes {b['Auto Bound Releases']} auto contribution bound "
            f"choice(s), epsilon {b['Auto Bound Epsilon']:.6g} in all, reserved with the answers"
        )
    out.append("  Data read: none (EXPLAIN neither runs the query nor spends budget)")
    for node in root["Plans"]:
        name = f" ({node['Leaf Name']})" if node.get("Leaf Name") else ""
        out.append(f"  ->  Leaf {node['Leaf']}{name}: {node['Leaf SQL']}")
        if node.get("Auto Contribution Bounds"):
            out.append(f"        Auto contribution bounds: {node['Auto Contribution Bounds']}")
        if "Key Filter" in node:
            out.append(f"        Keys from leaf {node['Keys From Leaf']}: {node['Key Filter']}")
        leaf_doc = {"Plan": node, "Outputs": node["Outputs"], "Budget": {"Ledger": False}}
        if "Rewritten SQL" in node:
            leaf_doc["Rewritten SQL"] = node["Rewritten SQL"]
        lines = plan_lines(leaf_doc)
        note = "stored answer: free repeat" if node["Free Repeat"] else "charged with the statement"
        lines = [ln for ln in lines if not ln.lstrip().startswith(("Budget:", "Data read:"))]
        out += [f"        {ln}" for ln in [*lines, f"  Budget: {note}"]]
    return out

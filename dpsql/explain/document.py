"""dpsql's DP plan of a private query as a PostgreSQL-shaped EXPLAIN document (JSON, YAML, XML, text).

GUI clients draw EXPLAIN output as a tree and parse PostgreSQL's shape: pgAdmin reads
``EXPLAIN (FORMAT JSON)`` as ``[{"Plan": {...}}]`` and each node's "Node Type" (a string),
"Startup Cost", "Total Cost", "Plan Rows", "Plan Width" and "Plans"; DBeaver sends
``EXPLAIN (FORMAT XML)`` and reads ``<explain><Query><Plan>`` with ``Node-Type``, ``Startup-Cost``,
``Total-Cost``, ``Plan-Rows`` and nested ``<Plans><Plan>``. The DP plan is that shape:

* the root, ``DP Aggregate``: the release (mechanism, epsilon/delta, privacy cost, contribution
  bound, partition selection, grouping sets, the output columns);
* under it, one ``DP Bounded Scan`` per private table read (``DP Scan`` for a joined public table)
  and one ``DP Measure`` per noisy measure (sensitivity, noise, its share of the budget).

Plan nodes hold numbers, strings, Booleans and lists of strings only, as PostgreSQL's do; what is
per query (the outputs' error intervals, the budget, the bounded SQL) sits next to "Plan", as
PostgreSQL puts "Settings" or "Triggers".

Costs and row counts never come from data: "Startup Cost" and "Total Cost" are 0 (PostgreSQL's
costs come from the private tables' statistics), "Plan Rows" of the root is what the policy alone
says (1 without GROUP BY, the number of declared key combinations with public keys, 0 when only
partition selection on the data can tell) and 0 for the other nodes, "Plan Width" is 8 bytes per
number. With ``COSTS OFF`` the four keys are left out, as PostgreSQL does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any
from xml.sax.saxutils import escape

from dpsql.budget.api import BudgetLedger
from dpsql.budget.format import fmt_down, fmt_up
from dpsql.dp.accounting import ZERO, Cost, sequential
from dpsql.errors import BudgetExhausted
from dpsql.explain.report import ExplainReport
from dpsql.sql.analysis import Analysis
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan

XML_NAMESPACE = "http://www.postgresql.org/2009/explain"
WIDTH = 8  # bytes of one number (int8 / float8), the width PostgreSQL reports for them


def _num(x: Any) -> float | None:
    """A JSON number (NaN, e.g. the noise std of a selection mechanism, or inf: null)."""
    f = float(x)
    return f if math.isfinite(f) else None


def _costs(costs: bool, rows: int, width: int) -> dict[str, Any]:
    if not costs:
        return {}
    return {"Startup Cost": 0.0, "Total Cost": 0.0, "Plan Rows": rows, "Plan Width": width}


def _node(node_type: str, relationship: str | None, costs: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"Node Type": node_type}
    if relationship is not None:
        node["Parent Relationship"] = relationship
    return {**node, "Parallel Aware": False, "Async Capable": False, **costs}


def policy_rows(a: Analysis) -> int:
    """Output rows known from the policy alone: 1 without GROUP BY, the declared key combinations
    (summed over grouping sets) with public keys, 0 when partition selection decides.

    Never a count of data: a key list comes from the policy or the query text (key_domain).
    """
    if not a.grouped:
        return 1
    sets = a.grouping_sets or (tuple(range(len(a.group_keys))),)
    total = 0
    for keys in sets:
        n = 1
        for i in keys:
            size = a.group_keys[i].domain_size
            if size is None:  # partition selection, or keys listed by a public table
                return 0
            n *= size
        total += n
    return total


def _scans(a: Analysis, costs: bool) -> list[dict[str, Any]]:
    sources = a.sources or ((a.alias, a.table, a.private),)
    out = []
    for i, (alias, table, private) in enumerate(sources):
        schema, _, name = table.rpartition(".")
        node = _node(
            "DP Bounded Scan" if private is not None else "DP Scan",
            "Outer" if i == 0 else "Inner",
            _costs(costs, 0, 0),
        )
        node.update({"Relation Name": name, "Schema": schema or "public", "Alias": alias})
        node["Private"] = private is not None
        if private is not None:
            node["Privacy Unit"] = private.privacy_unit
            node["Max Rows Per Unit"] = private.max_rows_per_unit
            node["Max Groups Per Unit"] = private.max_groups_per_unit
        out.append(node)
    return out


def plan_document(
    rep: ExplainReport,
    plan: Plan | SetsPlan,
    conf: float,
    budget: dict[str, Any],
    *,
    costs: bool = True,
    verbose: bool = False,
) -> dict[str, Any]:
    """The plan as one query element of PostgreSQL's EXPLAIN output: ``{"Plan": {...}, ...}``."""
    a, c = plan.analysis, plan.cost
    names = [e.alias_or_name for e in a.outer.expressions]
    root = _node("DP Aggregate", None, _costs(costs, policy_rows(a), WIDTH * len(names)))
    root.update(
        {
            "Output": names,
            "Mechanism": plan.mechanism,
            "Epsilon": float(rep.epsilon),
            "Delta": float(rep.delta),
            "Privacy Cost Epsilon": float(c.epsilon),
            "Privacy Cost Delta": float(c.delta),
            "Privacy Cost Rho": float(c.rho),
            "Contribution Bound": rep.contribution,
            "Partition Selection": rep.selection,
            "Grouping Sets": list(rep.sets),
            "Confidence": conf,
            "Reads Data": False,
        }
    )
    measures = [
        {
            **_node("DP Measure", "Member", _costs(costs, 0, WIDTH)),
            "Measure": m.measure,
            "Mechanism": m.mechanism,
            "Sensitivity": m.sensitivity,
            "Noise Std": _num(m.noise_std),
            "Measure Budget": m.budget,
            "Grid": m.grid,
            "Half Width": _num(m.half_width),
        }
        for m in rep.measures
    ]
    root["Plans"] = _scans(a, costs) + measures
    doc: dict[str, Any] = {
        "Plan": root,
        "Outputs": [
            {
                "Column": o.column,
                "From": o.statistic,
                "Mechanism": o.mechanism,
                "Error Interval": o.half_width,
            }
            for o in rep.outputs
        ],
        "Budget": budget,
    }
    if verbose:
        doc["Rewritten SQL"] = rep.rewritten
    return doc


def plan_xml(doc: dict[str, Any]) -> str:
    """The document as PostgreSQL's FORMAT XML: ``<explain xmlns=...><Query><Plan>...``.

    Keys become elements with spaces turned into hyphens ("Node Type" -> ``Node-Type``), list
    items are ``<Item>`` (``<Plan>`` under ``<Plans>``), null values are left out.

    >>> print(plan_xml({"Plan": {"Node Type": "DP Aggregate", "Output": ["n"]}}))
    <explain xmlns="http://www.postgresql.org/2009/explain">
      <Query>
        <Plan>
          <Node-Type>DP Aggregate</Node-Type>
          <Output>
            <Item>n</Item>
          </Output>
        </Plan>
      </Query>
    </explain>
    """
    out = [f'<explain xmlns="{XML_NAMESPACE}">', "  <Query>"]
    _xml_fields(doc, 4, out)
    return "\n".join([*out, "  </Query>", "</explain>"])


def _xml_fields(d: dict[str, Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for key, value in d.items():
        if value is None:
            continue
        tag = key.replace(" ", "-")
        if isinstance(value, dict):
            out.append(f"{pad}<{tag}>")
            _xml_fields(value, indent + 2, out)
            out.append(f"{pad}</{tag}>")
        elif isinstance(value, list):
            item = "Plan" if key == "Plans" else "Item"
            out.append(f"{pad}<{tag}>")
            for v in value:
                if isinstance(v, dict):
                    out.append(f"{pad}  <{item}>")
                    _xml_fields(v, indent + 4, out)
                    out.append(f"{pad}  </{item}>")
                elif v is not None:
                    out.append(f"{pad}  <{item}>{_xml_scalar(v)}</{item}>")
            out.append(f"{pad}</{tag}>")
        else:
            out.append(f"{pad}<{tag}>{_xml_scalar(value)}</{tag}>")


def _xml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return escape(str(v))


def plan_lines(doc: dict[str, Any]) -> list[str]:
    """The plan as text, one row per line, like PostgreSQL's FORMAT TEXT."""
    root = doc["Plan"]
    pct = f"{root['Confidence'] * 100:g}%"
    out = [
        f"DP Aggregate  (mechanism={root['Mechanism']} epsilon={root['Epsilon']:.6g} "
        f"delta={root['Delta']:.6g})",
        f"  Privacy cost: epsilon={root['Privacy Cost Epsilon']:.6g}, "
        f"delta={root['Privacy Cost Delta']:.6g}, rho={root['Privacy Cost Rho']:.6g}"
        + (f" ({root['Privacy Cost Detail']})" if root.get("Privacy Cost Detail") else ""),
        f"  Contribution bound: {root['Contribution Bound']}",
        *(
            [f"  Auto bounds: {root['Auto Contribution Bounds']}"]
            if root.get("Auto Contribution Bounds")
            else []
        ),
        "  Partition selection: "
        + (root["Partition Selection"] or "none (no GROUP BY, or public keys)"),
    ]
    out += [f"  Grouping set {s}" for s in root["Grouping Sets"]]
    for m in root["Plans"]:
        if m["Node Type"] != "DP Measure":
            continue
        noise = "" if m["Noise Std"] is None else f", noise std={m['Noise Std']:.4g}"
        hw = m["Half Width"]
        err = "unbounded" if hw is None else f"±{hw:.4g}"
        out.append(
            f"  Measure {m['Measure']}: {m['Mechanism']}, sensitivity {m['Sensitivity']}{noise}, "
            f"{m['Measure Budget']}, grid={m['Grid']}, {pct} error {err}"
        )
    for o in doc["Outputs"]:
        out.append(
            f"  Output {o['Column']}: {o['From']} ({o['Mechanism']}), {pct} error: "
            f"{o['Error Interval']}"
        )
    out += [f"  {line}" for line in budget_lines(doc["Budget"])]
    out.append("  Data read: none (EXPLAIN neither runs the query nor spends budget)")
    for scan in root["Plans"]:
        if scan["Node Type"] != "DP Measure":
            out.append(f"  ->  {scan['Node Type']} on {scan['Schema']}.{scan['Relation Name']}")
    if "Rewritten SQL" in doc:
        out.append("  Rewritten SQL:")
        out += [f"    {line}" for line in str(doc["Rewritten SQL"]).splitlines()]
    return out


def budget_lines(b: dict[str, Any]) -> list[str]:
    """What running the query would charge, as text lines."""
    if not b.get("Ledger"):
        return [f"Budget: {b.get('Note', 'none')}"]
    repeat = b.get("Free Repeat")
    out = [
        "Free repeat: yes (this exact query was answered before: the stored answer is "
        "returned again at no cost)"
        if repeat
        else "Free repeat: no (a new release)"
    ]
    if "Refused" in b:
        return [*out, f"Budget: would be refused: {b['Refused']}"]
    for s in b.get("Charged To", []):  # a free repeat of every leaf charges nothing
        spend = 0.0 if repeat else s.get("Epsilon Needed", b["Would Spend Epsilon"])
        if spend is None:
            out.append(f"Charged to: {s['Budget']} {s['Name']!r}: refused (no delta for Gaussian)")
            continue
        over = spend > s["Epsilon Remaining"] or (
            not repeat and s.get("Delta Needed", 0) > s["Delta Remaining"]
        )
        fits = " (exceeds the remaining budget)" if over else ""
        out.append(
            f"Charged to: {s['Budget']} {s['Name']!r} (period: {s['Period']}): "
            f"epsilon={_up(spend)} of {_down(s['Epsilon Remaining'])} remaining (limit "
            f"{_down(s['Epsilon Limit'])}){fits}"
        )
    return out


def _up(x: float) -> str:
    """A need as the ledger words it (:func:`fmt_up`: 6 digits rounded up), from the JSON float."""
    return fmt_up(Fraction(repr(float(x))))


def _down(x: float) -> str:
    """What is left as ``SHOW dpsql.budget`` words it (:func:`fmt_down`)."""
    return fmt_down(Fraction(repr(float(x))))


def would_spend(
    ledger: BudgetLedger, analyst: str, parts: Sequence[tuple[Cost, Fraction | None]]
) -> dict[str, Any]:
    """What charging a statement's releases ``parts`` ((cost, delta its rho was calibrated at)
    each: its ``auto`` bound choices and its answer, reserved together; none for a free repeat)
    would spend and to which budgets (the ledger read only): ``Would Spend Epsilon`` (the
    epsilons ``dpsql.history`` would list, summed) and ``Charged To``, or ``Refused`` when a
    budget cannot hold it. "Epsilon Needed" is what the budget's privacy filter would count
    for all of them (docs/budget.md, units)."""
    costs = [c for c, _ in parts] or [ZERO]
    cost = sequential(costs)
    try:
        spend = float(sum((ledger.query_epsilon(analyst, c, d) for c, d in parts), Fraction(0)))
        needs = ledger.needs(analyst, *costs)
    except BudgetExhausted as e:
        return {"Refused": f"{e.message} (SQLSTATE {e.sqlstate})"}
    charged_to = [
        {
            "Budget": s.budget,
            "Name": s.name,
            "Period": s.period,
            "Epsilon Needed": None if need is None else float(need),
            "Epsilon Remaining": float(s.epsilon_remaining),
            "Epsilon Limit": float(s.epsilon_limit),
            "Delta Needed": float(cost.delta),
            "Delta Remaining": float(s.delta_remaining),
        }
        for s, need in needs
    ]
    return {"Would Spend Epsilon": spend, "Charged To": charged_to}

"""Reading a Citus EXPLAIN: where does per-unit work run, and what leaves the workers?

Per-unit work is what reads one unit's rows: the windows that rank rows and groups by keyed
hashes (partitioned by the unit), the aggregation into partials per (unit, group), the per-unit
caps of joined private tables, the auto bounds' per-unit numbers. With private tables
distributed by their unit it must run inside the workers' tasks over shards, and what a task
sends back must be aggregated past the unit (one row per group, cell or bucket and shard).

In Citus's EXPLAIN a task's plan is indented under ``->  Task`` (its ``Node:`` line says where it
runs); every other line is the coordinator's. A plan breaks the rule when

* a per-unit operator is on a coordinator line;
* a task that runs on the coordinator's own node, or that reads ``read_intermediate_result``
  (rows a subplan brought to the coordinator) and no shard, does per-unit work: the rows it
  works on were pulled through the coordinator. A task that scans a shard and reads an
  intermediate result too is checked as a task over shards: its per-unit work runs on the
  shard's rows, joined with rows the coordinator sent (a public table local to the coordinator,
  which Citus broadcasts; or a distributed subplan's rows, which this rule requires to be
  aggregated past the unit, as every task over shards sends);
* a task over shards sends rows that are not aggregated past the unit: its top node is not an
  aggregate (raw rows, e.g. a CTE Citus planned as a subplan), or an aggregate whose group key
  is the unit (one row per unit).
"""

from __future__ import annotations

import re

PER_UNIT = re.compile(r"WindowAgg|row_number|dense_rank|hashtextextended|_dp_unit|user_id|pid\b")
SHARD_SCAN = re.compile(r"Scan (using \S+ )?on \S+_\d+\b")
"""A scan of a shard (Citus names a shard ``<table>_<shard id>``)."""
AGGREGATE = re.compile(
    r"^(Finalize |Partial )?(Aggregate|HashAggregate|GroupAggregate|MixedAggregate)\b"
)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def coordinator_lines(plan: list[str]) -> list[str]:
    """The lines of a Citus EXPLAIN that are not inside a task's plan."""
    out: list[str] = []
    task: int | None = None
    for line in plan:
        if task is not None and _indent(line) > task:
            continue  # a task's plan (and its Node: line)
        task = None
        if line.strip().startswith("->  Task"):
            task = _indent(line)
            continue
        out.append(line)
    return out


def tasks(plan: list[str]) -> list[tuple[str, list[str]]]:
    """Each ``->  Task`` block: (its Node: line, its plan lines)."""
    out = []
    i = 0
    while i < len(plan):
        if plan[i].strip().startswith("->  Task"):
            depth = _indent(plan[i])
            j = i + 1
            while j < len(plan) and _indent(plan[j]) > depth:
                j += 1
            body = plan[i + 1 : j]
            node = next((b.strip() for b in body if b.strip().startswith("Node:")), "")
            out.append((node, [b for b in body if not b.strip().startswith("Node:")]))
            i = j
        else:
            i += 1
    return out


def problems(plan: list[str], coordinator: str) -> list[str]:
    """What in ``plan`` breaks the rule (module docstring); ``coordinator``: the coordinator's
    ``host=... port=...`` as Citus names nodes in ``Node:`` lines."""
    bad = [f"on the coordinator: {line.strip()}" for line in coordinator_lines(plan)]
    bad = [b for b in bad if PER_UNIT.search(b)]
    for node, body in tasks(plan):
        pulled = coordinator in node or (
            any("read_intermediate_result" in b for b in body)
            and not any(SHARD_SCAN.search(b) for b in body)
        )
        if pulled:
            bad += [f"on pulled rows: {b.strip()}" for b in body if PER_UNIT.search(b)]
            continue
        top = body[0].strip().removeprefix("->  ") if body else ""
        key = body[1].strip() if len(body) > 1 else ""
        if not AGGREGATE.match(top) or (key.startswith("Group Key") and PER_UNIT.search(key)):
            bad.append(f"a task over shards sends per-unit rows: {top} | {key}")
    return bad

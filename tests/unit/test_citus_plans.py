"""The Citus tier's plan rule (tests/citus/plans.py) on EXPLAIN outputs recorded from a local
cluster (tests/fixtures/citus/, coordinator on port 59532): the rule passes plans whose per-unit
work runs in the workers' tasks, and catches each way per-unit work reaches the coordinator. Runs
everywhere (no Citus needed), so CI checks the checker the opt-in tier relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.citus.plans import coordinator_lines, problems, tasks

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "citus"
COORDINATOR = "port=59532 "
ON_COORDINATOR = "on the coordinator"
PULLED = "on pulled rows"
SENDS = "a task over shards sends per-unit rows"

CASES = {
    # the auto bounds' histogram, one chain of subqueries: buckets counted on the workers
    "histogram_on_workers": set(),
    # COUNT(DISTINCT region) by category: rows ranked per unit by keyed hashes, in the tasks
    "ranked_rows_on_workers": set(),
    # the histogram's per-unit table as a MATERIALIZED CTE: one row per unit sent back
    "histogram_materialized": {SENDS},
    # a CTE read by two UNION ALL legs (the histogram before 3236267): every raw row pulled,
    # grouped by unit over the intermediate result
    "histogram_cte_read_twice": {SENDS, PULLED},
    # pums distributed by age: per-unit partials merged on the coordinator, ranked there
    "distributed_by_another_column": {SENDS, PULLED, ON_COORDINATOR},
    # MAX by region name from a public table local to the coordinator: Citus sends its rows to
    # the tasks (an intermediate result), which rank each unit's rows of their shard
    "local_public_table_join": set(),
    # MAX and a quantile by date (partition selection's unit count beside them): cells counted
    # on the workers, a unit as its first kept row
    "bucket_cells_with_unit_count": set(),
    # the same before the unit count added up over cells: grouping sets over the ranked rows,
    # every row pulled to the coordinator and ranked there
    "grouping_sets_over_rows": {SENDS, PULLED},
}


def plan(name: str) -> list[str]:
    return (PLANS / f"{name}.txt").read_text().splitlines()


@pytest.mark.parametrize("name", list(CASES))
def test_the_rule_finds_what_each_recorded_plan_does(name: str) -> None:
    found = problems(plan(name), COORDINATOR)
    assert {p.split(":")[0] for p in found} == CASES[name], found


def test_tasks_and_coordinator_lines_split_the_plan() -> None:
    p = plan("distributed_by_another_column")
    nodes = [node for node, _ in tasks(p)]
    assert nodes == [
        "Node: host=127.0.0.1 port=59533 dbname=citus",
        "Node: host=localhost port=59532 dbname=citus",
    ]
    coordinator = coordinator_lines(p)
    assert not any("WindowAgg" in line or "Seq Scan" in line for line in coordinator)
    assert any("Distributed Subplan" in line for line in coordinator)

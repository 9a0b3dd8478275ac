"""The rewrite on a Citus cluster: per-unit work runs on the workers, and the keyed-hash
selection passes the neighbouring-database audit there too.

Opt-in tier (marker ``citus``): runs when ``DPSQL_CITUS_DSN`` names a Citus coordinator whose
database may be overwritten with the demo tables, e.g.::

    ../shared/tools/citus-local.sh start
    DPSQL_CITUS_DSN=$(../shared/tools/citus-local.sh dsn) python -m pytest -q -m citus tests/citus

Per-unit work is what reads one unit's rows: the windows that rank rows and groups by keyed hashes
(partitioned by the unit), the aggregation into partials per (unit, group), the per-unit caps of
joined private tables. In Citus's EXPLAIN, a worker's plan is indented under ``->  Task``; every
other line is the coordinator's (including distributed subplans' final steps). None of the
per-unit work may appear there. The broken twin, a private table distributed by another column
than its unit, moves it to the coordinator and is caught by the same check.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import psycopg
import pytest

from dpsql.check import catalog_findings
from dpsql.demo import POLICY, load_demo
from dpsql.engine import Engine
from dpsql.execute.private_sql import salted
from dpsql.policy import load_policy
from tests.dp_audit.test_audit_neighbours import HEAVY, SHAPES, changed_units

pytestmark = pytest.mark.citus

SHAPES_CITUS = [
    *SHAPES,
    "SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON r.code = p.region GROUP BY r.name",
    "SELECT u.sex, SUM(p.quantity) FROM purchases p JOIN pums u ON p.user_id = u.pid "
    "GROUP BY u.sex",
    "SELECT MIN(amount), MAX(amount), mode() WITHIN GROUP (ORDER BY category) FROM purchases",
    "SELECT sex, AVG(income), STDDEV(age) FROM pums GROUP BY sex",
]
PER_UNIT = re.compile(r"WindowAgg|row_number|dense_rank|hashtextextended|_dp_unit|user_id|pid\b")


@pytest.fixture(scope="module")
def citus_dsn() -> str:
    dsn = os.environ.get("DPSQL_CITUS_DSN")
    if not dsn:
        pytest.skip("needs a Citus coordinator: DPSQL_CITUS_DSN (../shared/tools/citus-local.sh)")
    assert load_demo(dsn), "not a Citus coordinator (no citus extension)"
    return dsn


@pytest.fixture(scope="module")
def cengine(citus_dsn: str) -> Iterator[Engine]:
    e = Engine(load_policy(POLICY), citus_dsn, pool_size=2)
    yield e
    e.close()


def coordinator_lines(plan: list[str]) -> list[str]:
    """The lines of a Citus EXPLAIN that are not inside a worker's task plan."""
    out: list[str] = []
    task: int | None = None
    for line in plan:
        indent = len(line) - len(line.lstrip(" "))
        if task is not None and indent > task:
            continue  # a worker's plan (and its Node: line)
        task = None
        if line.strip().startswith("->  Task"):
            task = indent
            continue
        out.append(line)
    return out


def per_unit_on_coordinator(engine: Engine, dsn: str, sql: str) -> list[str]:
    p = engine.prepare(sql)
    assert p.analysis is not None
    text = salted(engine.private_sql(p, p.analysis))
    with psycopg.connect(dsn) as conn:
        plan = [str(r[0]) for r in conn.execute("EXPLAIN " + text).fetchall()]
    assert any("Custom Scan (Citus" in line for line in plan), "\n".join(plan)
    return [line for line in coordinator_lines(plan) if PER_UNIT.search(line)]


@pytest.mark.parametrize("sql", SHAPES_CITUS)
def test_per_unit_work_runs_on_the_workers(cengine: Engine, citus_dsn: str, sql: str) -> None:
    assert per_unit_on_coordinator(cengine, citus_dsn, sql) == []


def test_a_table_not_distributed_by_its_unit_is_caught(cengine: Engine, citus_dsn: str) -> None:
    """The twin: pums distributed by age. Its per-unit partials (GROUP BY pid) can't run on the
    workers; the EXPLAIN check sees them on the coordinator and `dpsql check` warns."""
    sql = "SELECT sex, AVG(income) FROM pums GROUP BY sex"
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute("SELECT undistribute_table('pums')")
        conn.execute("SELECT create_distributed_table('pums', 'age')")
        try:
            assert per_unit_on_coordinator(cengine, citus_dsn, sql) != []
            found = catalog_findings(load_policy(POLICY), citus_dsn)
            assert [f.table for f in found if f.warning] == ["public.pums"], found
        finally:
            conn.execute("SELECT undistribute_table('pums')")
            conn.execute(
                "SELECT create_distributed_table('pums', 'pid', colocate_with => 'purchases')"
            )
    assert [f for f in catalog_findings(load_policy(POLICY), citus_dsn) if f.warning] == []


@pytest.mark.parametrize("sql", SHAPES)
def test_keyed_hash_selection_is_each_units_own_on_citus(
    cengine: Engine, citus_dsn: str, sql: str
) -> None:
    """Removing one unit (a distributed DELETE, rolled back) leaves every other unit's kept rows
    exactly as they were, on the cluster (tests/dp_audit/test_audit_neighbours.py)."""
    p = cengine.prepare(sql)
    assert p.analysis is not None
    text = salted(cengine.private_sql(p, p.analysis))
    assert changed_units(citus_dsn, text, HEAVY[:3]) == set()


def test_a_data_dependent_salt_is_caught_on_citus(cengine: Engine, citus_dsn: str) -> None:
    sql = "SELECT category, COUNT(DISTINCT region) FROM purchases GROUP BY category"
    p = cengine.prepare(sql)
    assert p.analysis is not None
    text = salted(cengine.private_sql(p, p.analysis))
    salt = text.split("CONCAT_WS('|', '")[1][:16]
    broken = text.replace(f"'{salt}'", "CAST((SELECT COUNT(*) FROM purchases) AS TEXT)")
    assert len(changed_units(citus_dsn, broken, HEAVY[:1])) > 100

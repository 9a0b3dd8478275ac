"""Setting dpsql up in front of Citus: ``dpsql demo --upstream`` distributes the demo tables by
their units, ``dpsql check --upstream`` (and ``dpsql serve``'s start-up checks) warn about every
placement that keeps per-unit work off the workers (docs/deploy.md, "Citus"). The Citus tier:
``DPSQL_CITUS_DSN`` (tests/citus/test_citus.py).

The check's findings are compared for each placement of two private tables and a public one:
local, reference, single-shard, distributed by another column, distributed by the unit but not
co-located, a hash-distributed public table, and the placement dpsql wants (no warning): each
wrong placement is reported, the right one is not.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from dpsql.check import catalog_findings
from tests.citus.conftest import Demo, citus_dsn_or_skip, dpsql
from tests.policies import PolicyFile, PolicyMaker, private_table

pytestmark = pytest.mark.citus


@pytest.fixture(scope="module")
def citus_dsn() -> str:
    return citus_dsn_or_skip()


def test_demo_upstream_distributes_the_tables_by_their_units(citus_demo: Demo) -> None:
    """`dpsql demo --upstream DSN` on a coordinator (run once for the tier: tests/citus/
    conftest.py): purchases and pums hash-distributed by their privacy units and co-located,
    regions a reference table; the examples run; `dpsql check` then finds nothing to warn
    about."""
    r, placed = citus_demo.cli, citus_demo.placed
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Citus: distributed by their privacy units" in r.stdout, r.stdout
    assert placed["purchases"][:2] == ("h", "user_id") and placed["pums"][:2] == ("h", "pid")
    assert placed["purchases"][2] == placed["pums"][2]  # co-located
    assert placed["regions"][0] == "n" and placed["regions"][3] == "t"  # a reference table
    assert citus_demo.purchases == 122_000
    c = dpsql("check", "--policy", "dpsql/demo/policy.yaml", "--upstream", citus_demo.dsn)
    assert c.returncode == 0 and "the catalog agrees with the policy" in c.stdout, c.stdout


SCRATCH = """
DROP TABLE IF EXISTS dp_chk_a, dp_chk_b, dp_chk_pub;
CREATE TABLE dp_chk_a (uid integer NOT NULL, x integer);
CREATE TABLE dp_chk_b (uid integer NOT NULL, x integer);
CREATE TABLE dp_chk_pub (id integer NOT NULL, name text);
"""
COLS = {"x": {"type": "integer", "bounds": [0, 10]}}


@pytest.fixture(scope="module")
def scratch(citus_dsn: str, make_policy: PolicyMaker) -> Iterator[PolicyFile]:
    """Two private tables (unit ``uid``) and a public one, created anew for each placement."""
    yield make_policy(
        "citus_check",
        tables={
            "public.dp_chk_a": private_table("uid", COLS),
            "public.dp_chk_b": private_table("uid", COLS),
        },
        public_tables=["public.dp_chk_pub"],
    )
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS dp_chk_a, dp_chk_b, dp_chk_pub")


A = "SELECT create_distributed_table('dp_chk_a', 'uid')"
B = "SELECT create_distributed_table('dp_chk_b', 'uid', colocate_with => 'dp_chk_a')"
PUB = "SELECT create_reference_table('dp_chk_pub')"
PLACEMENTS = {
    "local": ([], ["a local table", "a local table", "a local public table"]),
    "reference": (
        [
            "SELECT create_reference_table('dp_chk_a')",
            B.replace(", colocate_with => 'dp_chk_a'", ""),
            PUB,
        ],
        ["a reference table"],
    ),
    "single shard": (
        [
            "SELECT create_distributed_table('dp_chk_a', NULL)",
            "SELECT create_distributed_table('dp_chk_b', 'uid')",
            PUB,
        ],
        ["a single-shard table"],
    ),
    "by another column": (
        [
            "SELECT create_distributed_table('dp_chk_a', 'x')",
            "SELECT create_distributed_table('dp_chk_b', 'uid')",
            PUB,
        ],
        ["distributed by x, not by its privacy unit uid"],
    ),
    "not co-located": (
        [A, "SELECT create_distributed_table('dp_chk_b', 'uid', colocate_with => 'none')", PUB],
        ["not co-located"],
    ),
    "public table local": ([A, B], ["a local public table"]),
    "public table single-shard": (
        [A, B, "SELECT create_distributed_table('dp_chk_pub', NULL)"],
        ["a single-shard public table"],
    ),
    "public table hash-distributed": (
        [A, B, "SELECT create_distributed_table('dp_chk_pub', 'id')"],
        ["a hash-distributed public table"],
    ),
    "by the unit, co-located, public reference": ([A, B, PUB], []),
}


@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_check_warns_about_each_placement(
    citus_dsn: str, scratch: PolicyFile, placement: str
) -> None:
    steps, expected = PLACEMENTS[placement]
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute(SCRATCH)
        for step in steps:
            conn.execute(step)
    found = catalog_findings(scratch.policy, citus_dsn)
    assert [f for f in found if not f.warning] == []
    warned = [f.problem for f in found if f.warning]
    assert len(warned) == len(expected), warned
    for w, e in zip(sorted(warned), sorted(expected), strict=True):
        assert e in w, warned


def test_check_cli_warns_in_yellow_and_exits_0(citus_dsn: str, scratch: PolicyFile) -> None:
    """Through `dpsql check`: a warning is printed (a deployment advice, not a mismatch), the
    exit status stays 0."""
    steps, _ = PLACEMENTS["not co-located"]
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute(SCRATCH)
        for step in steps:
            conn.execute(step)
    r = dpsql("check", "--policy", str(scratch.path), "--upstream", citus_dsn)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "not co-located" in r.stdout and "colocate_with" in r.stdout, r.stdout


def test_serve_logs_the_placement_warnings(citus_dsn: str, scratch: PolicyFile) -> None:
    """`dpsql serve`'s start-up checks carry the same warnings, as warnings (it still starts)."""
    from dpsql.server.startup_checks import startup_problems

    for placement, expected in (
        ("not co-located", 1),
        ("by the unit, co-located, public reference", 0),
    ):
        steps, _ = PLACEMENTS[placement]
        with psycopg.connect(citus_dsn, autocommit=True) as conn:
            conn.execute(SCRATCH)
            for step in steps:
                conn.execute(step)
        found = startup_problems(scratch.policy, citus_dsn, None)
        assert [p for p in found if p.fatal] == [], found
        placed = [p.text for p in found if "co-located" in p.text or "distributed" in p.text]
        assert len(placed) == expected, found

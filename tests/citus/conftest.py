"""The Citus tier's cluster: ``DPSQL_CITUS_DSN`` names a coordinator whose database the tier
overwrites, and ``dpsql demo --upstream`` loads the demo tables on it once for the whole tier
(both modules read them; test_citus_setup checks what the command did)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]


def citus_dsn_or_skip() -> str:
    """The coordinator's DSN. Without one the tier skips, except under CI, where `.ci/run`
    builds Citus, starts a cluster and runs the tier with ``-m citus`` (its main run leaves the
    tier out): there a missing DSN means the tier was run the wrong way, and fails."""
    dsn = os.environ.get("DPSQL_CITUS_DSN")
    if not dsn:
        why = "needs a Citus coordinator: DPSQL_CITUS_DSN (tools/citus-local.sh; .ci/citus test)"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    return dsn


def dpsql(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dpsql", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


@dataclass(frozen=True)
class Demo:
    """`dpsql demo --upstream DSN` as it ran, and the placement and row count it left (read
    right after it, before any test changes the tables)."""

    dsn: str
    cli: subprocess.CompletedProcess[str]
    placed: dict[str, tuple[str, str | None, int, str]]
    purchases: int | None


@pytest.fixture(scope="session")
def citus_demo() -> Demo:
    """The demo tables loaded once by `dpsql demo --upstream` (a second load, ~16 s on CI, gave
    the same tables: the data is generated with a fixed seed)."""
    dsn = citus_dsn_or_skip()
    r = dpsql("demo", "--upstream", dsn)
    with psycopg.connect(dsn) as conn:
        placed = {
            str(t): (str(m), c, g, str(rep))
            for t, m, c, g, rep in conn.execute(
                "SELECT logicalrelid::regclass::text, partmethod, "
                "CASE WHEN partmethod = 'h' THEN column_to_column_name(logicalrelid, partkey) END, "
                "colocationid, repmodel FROM pg_dist_partition "
                "WHERE logicalrelid::regclass::text IN ('purchases', 'pums', 'regions')"
            ).fetchall()
        }
        count = None
        if r.returncode == 0:
            row = conn.execute("SELECT count(*) FROM purchases").fetchone()
            count = None if row is None else int(row[0])
    return Demo(dsn, r, placed, count)

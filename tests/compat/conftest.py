"""Real clients against a real ``dpsql serve`` on a real PostgreSQL with the demo data.

``dpsql_server`` (session) loads the demo data (:mod:`dpsql.demo`) into a fresh database, adds a
table and a column that the demo policy does not list, starts ``python -m dpsql serve`` with the
demo policy on a free port and yields its connection details. Each client test runs a DP
aggregate, a refused raw query (checking its SQLSTATE) and introspection.

A client tool that is missing skips its test locally and FAILS under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.conftest import IN_CI
from tests.helpers import start_serve
from tests.policies import PolicyMaker

ROOT = Path(__file__).resolve().parents[2]
ANALYST, PASSWORD = "analyst", "analyst"  # the demo policy's analyst (demo only)

# Added next to the demo data: a table the policy does not list and an undeclared column of a
# private table. Neither may show up in any client's introspection.
HIDDEN_EXTRA = """
CREATE TABLE salaries (pid int, salary int);
INSERT INTO salaries SELECT g, 1000 * g FROM generate_series(1, 10) g;
ALTER TABLE pums ADD COLUMN secret_ssn text;
CREATE SCHEMA IF NOT EXISTS dpsql;
ANALYZE;
"""

HIDDEN = ("salaries", "secret_ssn")
VISIBLE_TABLES = {"pums", "purchases", "regions"}
PUMS_COLUMNS = ["age", "sex", "educ", "race", "income", "married", "pid"]
AGGREGATE = "SELECT count(*) FROM pums"
RAW = "SELECT * FROM pums"
REFUSED_SQLSTATE = "42501"

# EXPLAIN through every client: dpsql's DP plan of a private query (no data read, nothing charged),
# PostgreSQL's plan of a public one, EXPLAIN ANALYZE of a private query refused with 42501, and
# an EXPLAIN with a parameter through the extended protocol ($1 here; drivers write %s, ?, :a).
EXPLAIN_PRIVATE = "EXPLAIN " + AGGREGATE
EXPLAIN_PUBLIC = "EXPLAIN SELECT count(*) FROM regions"
EXPLAIN_PRIVATE_JSON = "EXPLAIN (FORMAT JSON) " + AGGREGATE
EXPLAIN_PUBLIC_JSON = "EXPLAIN (FORMAT JSON) SELECT count(*) FROM regions"
EXPLAIN_ANALYZE = "EXPLAIN ANALYZE " + AGGREGATE
EXPLAIN_PRIVATE_PARAM = "EXPLAIN SELECT count(*) FROM pums WHERE age >= $1"
EXPLAIN_PUBLIC_PARAM = "EXPLAIN SELECT name FROM regions WHERE code = $1"
DP_NODE = "DP Aggregate"  # the root node type of a DP plan (text first line, JSON "Node Type")


def require(tool: str) -> None:
    """Skip (locally) or fail (CI) when a client tool is absent.

    ``tool`` is a command on PATH, ``py:<module>``, or a file path.
    """
    if tool.startswith("py:"):
        present = importlib.util.find_spec(tool[3:]) is not None
    elif "/" in tool:
        present = Path(tool).exists()
    else:
        present = shutil.which(tool) is not None
    if not present:
        msg = f"client tool {tool} is not installed (bash .ci/install-system; pip install -e '.[test]')"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    dbname: str
    true_count: int  # the bounded count(*) of pums: one row per person
    user: str = ANALYST
    password: str = PASSWORD

    @property
    def dsn(self) -> str:
        return (
            f"host={self.host} port={self.port} dbname={self.dbname} user={self.user} "
            f"password={self.password} sslmode=disable"
        )

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.dbname}"


def _serve_available() -> bool:
    """True once the CLI has a ``serve`` command (the wire server has landed)."""
    res = subprocess.run(
        [sys.executable, "-m", "dpsql", "serve", "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
    )
    return res.returncode == 0


@pytest.fixture(scope="session")
def dpsql_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if not _serve_available():
        msg = "`dpsql serve` is not available (python -m dpsql serve --help failed)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    from dpsql.demo import load_demo

    make_db: Callable[[str], str] = request.getfixturevalue("make_db")
    upstream = make_db("compat")
    load_demo(upstream)
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute(HIDDEN_EXTRA)
        row = conn.execute("SELECT count(DISTINCT pid) FROM pums").fetchone()
        assert row is not None
    log = tempfile.TemporaryFile()  # not a pipe nobody reads: a full one would block the server
    # the demo policy with its former fixed bounds (one row per pid in pums: true_count)
    make_policy: PolicyMaker = request.getfixturevalue("make_policy")
    fixed = make_policy("compat", fixed_bounds=True).path
    proc, port = start_serve(
        ["--policy", str(fixed), "--upstream", upstream],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        dbname = psycopg.conninfo.conninfo_to_dict(upstream)["dbname"]
        yield Server("127.0.0.1", port, str(dbname), int(row[0]))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

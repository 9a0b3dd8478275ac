"""Real clients against a real ``dpsql serve`` on a real PostgreSQL.

``dpsql_server`` (session) loads a small dataset into a fresh database, writes a policy with one
analyst (a SCRAM verifier made with scramp), starts ``python -m dpsql serve`` on a free port and
yields its connection details. Each client test runs a DP aggregate, a refused raw query (checking
its SQLSTATE) and introspection.

A client tool that is missing skips its test locally and FAILS under ``CI=true``.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]
ANALYST, PASSWORD = "ann", "compat-secret-pw"

DATA = """
CREATE TABLE people (pid int PRIMARY KEY, age int NOT NULL, income int, sex int, secret text);
INSERT INTO people
  SELECT g, 18 + (g * 7) % 60, (g * 37) % 100000, g % 2, 'ssn-' || g FROM generate_series(1, 1000) g;
CREATE TABLE cities (name text PRIMARY KEY, country text);
INSERT INTO cities VALUES ('Lyon', 'FR'), ('Oslo', 'NO');
CREATE TABLE salaries (pid int, salary int);
CREATE SCHEMA IF NOT EXISTS dpsql;
ANALYZE;
"""

HIDDEN = ("salaries", "secret")
VISIBLE_TABLES = {"people", "cities"}
AGGREGATE = "SELECT count(*) FROM people"
RAW = "SELECT * FROM people"
REFUSED_SQLSTATE = "42501"


def require(tool: str) -> None:
    """Skip (locally) or fail (CI) when a client tool is absent."""
    present = (
        shutil.which(tool) is not None
        if "/" not in tool and not tool.startswith("py:")
        else (
            importlib.util.find_spec(tool[3:]) is not None
            if tool.startswith("py:")
            else Path(tool).exists()
        )
    )
    if not present:
        msg = f"client tool {tool} is not installed (bash .ci/install-system; pip install -e '.[test]')"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


def scram_verifier(password: str, iterations: int = 4096) -> str:
    from scramp import ScramMechanism

    salt, stored, server, iters = ScramMechanism("SCRAM-SHA-256").make_auth_info(
        password, iteration_count=iterations
    )

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    return f"SCRAM-SHA-256${iters}:{b64(salt)}${b64(stored)}:{b64(server)}"


def policy_yaml() -> str:
    return f"""version: 1
dataset: compat
tables:
  people:
    privacy_unit: pid
    columns:
      pid: {{type: integer, identifier: true}}
      age: {{type: integer, bounds: [0, 100]}}
      income: {{type: integer, bounds: [0, 100000]}}
      sex: {{type: integer, keys: [0, 1]}}
public_tables: [cities]
analysts:
  {ANALYST}:
    credential: "{scram_verifier(PASSWORD)}"
    budget: {{epsilon: 1000}}
"""


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    dbname: str
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"dpsql serve exited ({proc.returncode}):\n{out[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("dpsql serve did not listen within 30 s")


@pytest.fixture(scope="session")
def dpsql_server(
    make_db: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    if not _serve_available():
        msg = "`dpsql serve` is not available (python -m dpsql serve --help failed)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    upstream = make_db("compat")
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute(DATA)
    policy = tmp_path_factory.mktemp("compat") / "policy.yaml"
    policy.write_text(policy_yaml())
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpsql", "serve", "--policy", str(policy), "--upstream", upstream,
         "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait_listening(port, proc)
        dbname = psycopg.conninfo.conninfo_to_dict(upstream)["dbname"]
        yield Server("127.0.0.1", port, str(dbname))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

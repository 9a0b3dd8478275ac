"""``dpsql demo`` as a new user runs it (README's main job): its own PostgreSQL, examples, psql.

The example queries must not spend the budget of the analyst who then connects to
``dpsql demo --serve``: they run as the demo policy's ``examples`` analyst (no credential, so
nobody can log in as it). Each test starts the real command in its own process (an embedded
PostgreSQL cluster of its own, about 10-20 s).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from dpsql.demo import EXAMPLES, EXAMPLES_ANALYST, POLICY
from dpsql.errors import DpsqlError
from dpsql.policy import load_policy

ROOT = Path(__file__).resolve().parents[3]
STARTUP_S = 180  # initdb + loading 122k purchases + the examples, on a loaded 2-core machine


def _need_postgres() -> None:
    from dpsql.execute.embedded import find_bindir

    try:
        find_bindir()
    except (DpsqlError, OSError) as e:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no PostgreSQL binaries for the embedded cluster: {e}")


def _demo(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "dpsql", "demo", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the demo then stops its cluster), SIGKILL only if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@contextmanager
def demo_serving(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``dpsql demo --serve`` in a process; yields (the analyst's DSN, the demo's output file).

    The server binds a port the kernel picks and writes it to ``--port-file`` (no port chosen by
    the test and released for the demo to reuse: another process could take it meanwhile).
    """
    _need_postgres()
    out, port_file = tmp_path / "demo.out", tmp_path / "port"
    proc = _demo(["--serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file)], out)
    try:
        deadline = time.monotonic() + STARTUP_S
        while not port_file.exists():
            assert proc.poll() is None, (
                f"dpsql demo exited with {proc.returncode}:\n"
                + (out.read_text(errors="replace")[-3000:])
            )
            assert time.monotonic() < deadline, f"dpsql demo did not listen within {STARTUP_S} s"
            time.sleep(0.2)
        port = int(port_file.read_text())
        yield f"host=127.0.0.1 port={port} user=analyst password=analyst dbname=demo", out
    finally:
        _stop(proc)


def test_examples_analyst_is_in_the_demo_policy_and_cannot_log_in() -> None:
    policy = load_policy(POLICY)
    examples = policy.analysts[EXAMPLES_ANALYST]
    assert examples.credential is None  # SCRAM, cleartext and md5 all refuse a missing verifier
    assert examples.budget.epsilon >= len(EXAMPLES) * policy.defaults.epsilon
    assert policy.analysts["analyst"].credential is not None


def test_serve_starts_the_analyst_with_a_full_budget_and_empty_history(tmp_path: Path) -> None:
    with demo_serving(tmp_path) as (dsn, out):
        with psycopg.connect(dsn, autocommit=True, connect_timeout=20) as conn:
            history = conn.execute("SELECT * FROM dpsql.history").fetchall()
            budgets = {
                (b, n): (spent, releases)
                for b, n, spent, releases in conn.execute(
                    "SELECT budget, name, epsilon_spent, releases FROM dpsql.budget"
                ).fetchall()
            }
            shown = conn.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
        assert history == []
        assert budgets[("analyst", "analyst")] == (0, 0)
        # the examples did run (4 noisy answers, and the choices of their auto contribution
        # bounds: releases of their own), charged to the dataset's shared budget
        assert budgets[("dataset", "demo")][1] > len(EXAMPLES) - 1
        assert "epsilon 100 of 100 left" in shown
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(
                dsn.replace("user=analyst", f"user={EXAMPLES_ANALYST}"), connect_timeout=20
            )
        text = out.read_text(errors="replace")
        # the owner's connection it prints (for dpsql check --upstream) is one line that works
        owner = re.search(r"export DSN='(postgresql://dpsql_admin:[^']+)'", text)
        assert owner is not None, text
        with psycopg.connect(owner.group(1), connect_timeout=20) as conn:
            assert conn.execute("SELECT COUNT(*) FROM purchases").fetchone() == (122_000,)
    assert "ERROR 42501" in text  # the fifth example, SELECT *, is refused
    assert f"charged to analyst {EXAMPLES_ANALYST}, not to you" in text
    # the connect hint names the port the kernel picked for --listen 127.0.0.1:0, not port 0
    port = dsn.split("port=")[1].split()[0]
    assert f"serving on 127.0.0.1:{port}" in text and f"host=127.0.0.1 port={port} " in text


def test_demo_answers_the_queries_passed_and_exits(tmp_path: Path) -> None:
    """``dpsql demo "SQL..."`` (README): answers them as --analyst and exits 0; bad SQL exits 1."""
    _need_postgres()
    out = tmp_path / "demo.out"
    proc = _demo(["SELECT COUNT(*) AS n FROM purchases", "SELECT email FROM purchases"], out)
    try:
        rc = proc.wait(timeout=STARTUP_S)
    finally:
        _stop(proc)
    text = out.read_text(errors="replace")
    assert rc == 1, text  # the second query is refused (raw rows)
    assert "n (noisy)" in text and "spent epsilon=1" in text
    # the accuracy summary psql shows as a NOTICE is printed too (rich wraps long lines)
    assert "NOTICE: COUNT(*): 95% interval: noise ±" in " ".join(text.split()), text
    assert "ERROR 42501" in text
    assert "Example queries" not in text


def test_demo_loads_into_a_given_upstream(make_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``dpsql demo --upstream DSN`` loads the demo into that PostgreSQL (no cluster of its own)
    and answers there; on plain PostgreSQL nothing is distributed (tests/citus: on Citus)."""
    dsn = make_db("demo_upstream")
    out = tmp_path / "out.txt"
    proc = _demo(["--upstream", dsn, "SELECT COUNT(*) FROM purchases"], out)
    try:
        assert proc.wait(timeout=STARTUP_S) == 0, out.read_text()
    finally:
        _stop(proc)
    text = out.read_text()
    assert "demo tables loaded" in text and "Citus" not in text, text
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM purchases").fetchone() == (122000,)

"""A process that started a throwaway PostgreSQL (``start_cluster``) and is sent SIGTERM stops it
and removes its directory (it holds the superuser's password file): bench/golden_sql.py, any
tool that calls ``start_cluster`` without a SIGTERM handler of its own (the bench/ scripts), and
a pytest session's cluster (tests/conftest.py). Python's default SIGTERM ended the process before
its ``finally: cluster.stop()``: the server kept running and the directory stayed.

Each test starts the process with an empty TMPDIR, waits (a loop with a deadline) until its
cluster is up, sends SIGTERM, and checks that no server process of that data directory remains
and that the directory is gone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers import ROOT


def _tmpdir() -> Path:
    """An empty TMPDIR, which PostgreSQL's own OS user may traverse (as /tmp)."""
    tmp = Path(tempfile.mkdtemp(prefix="dpsql-test-tmp-"))
    tmp.chmod(0o755)
    return tmp


def _servers_of(datadir: Path) -> list[int]:
    """The pids of processes whose command line names ``datadir`` (the postmaster: -D DIR)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        if str(datadir).encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def _sigterm_once_up(cmd: list[str], env: dict[str, str]) -> None:
    tmp = _tmpdir()
    env = {k: v for k, v in env.items() if k not in ("DPSQL_BENCH_DSN", "DPSQL_TEST_DSN")}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (pid_files := list(tmp.glob("dpsql-pg-*/data/postmaster.pid"))):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.1)
        datadir = pid_files[0].parent
        deadline = time.monotonic() + 60
        while not _servers_of(datadir):  # pg_ctl writes the pid file as the server starts
            assert time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left, servers = list(tmp.glob("dpsql-pg-*")), _servers_of(datadir)
    # a test session's directory is renamed and removed by a detached process (Cluster.stop's
    # remove_later): its password file goes at once
    passwords = list(tmp.glob("*/dpsql_superuser_password"))
    for pid in servers:  # this test's own server: never left running, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
    assert not servers
    assert not left
    assert not passwords
    assert proc.returncode != 0  # interrupted, not finished


def test_golden_sql_stops_its_cluster_on_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "golden.txt"
    _sigterm_once_up(
        [sys.executable, "bench/golden_sql.py", "--out", str(out), "--limit", "2000"],
        dict(os.environ),
    )


def test_a_tool_without_a_handler_stops_its_cluster_on_sigterm() -> None:
    """As the bench/ scripts do, with no SIGTERM handler of their own; and interrupted before
    any ``try: ... finally: cluster.stop()`` (bench/engine.py and bench/trips.py load the demo
    data before theirs): the cluster is stopped as the interpreter exits."""
    script = (
        "import time\nfrom dpsql.execute.embedded import start_cluster\n"
        "cluster = start_cluster()\ntime.sleep(600)\n"
    )
    _sigterm_once_up([sys.executable, "-c", script], dict(os.environ))


def test_a_pytest_session_stops_its_cluster_on_sigterm(tmp_path: Path) -> None:
    """The test session's cluster (tests/conftest.py's pg_admin_dsn) as CI's timeout or a kill
    leaves it: SIGTERM ends the session as Ctrl-C does, its teardown stopping the cluster."""
    test = tmp_path / "test_waits.py"
    test.write_text("import time\n\ndef test_waits(pg_admin_dsn):\n    time.sleep(600)\n")
    _sigterm_once_up(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), str(test)],
        dict(os.environ),
    )  # fmt: skip

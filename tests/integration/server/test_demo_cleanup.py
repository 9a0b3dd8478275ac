"""`dpsql demo --serve` as a newcomer runs it (issue #20): it prints a psql command that works as
printed, and leaves no temporary directory behind (they held the superuser's password file)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dpsql.execute.embedded import free_port
from tests.conftest import IN_CI
from tests.helpers import ROOT


def _tmpdir() -> Path:
    """An empty TMPDIR for the demo, which PostgreSQL's own OS user may traverse (as /tmp)."""
    tmp = Path(tempfile.mkdtemp(prefix="dpsql-test-tmp-"))
    tmp.chmod(0o755)
    return tmp


def test_demo_prints_a_working_psql_command_and_cleans_up(tmp_path: Path) -> None:
    if shutil.which("psql") is None:
        if IN_CI:
            pytest.fail("psql is not installed")
        pytest.skip("psql is not installed")
    tmp = _tmpdir()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    out_file = tmp_path / "demo.out"
    with out_file.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dpsql", "demo", "--serve", "--listen", f"127.0.0.1:{port}",
             "SELECT 1"],  # fmt: skip
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            while not re.search(r'psql "[^"]+"', out_file.read_text()):
                assert proc.poll() is None, out_file.read_text()[-3000:]
                assert time.monotonic() < deadline, out_file.read_text()[-3000:]
                time.sleep(0.2)
            command = re.search(r'psql "[^"]+"', out_file.read_text())
            assert command is not None
            words = [*shlex.split(command.group(0)), "-Atc", "SELECT code FROM regions ORDER BY 1"]
            deadline = time.monotonic() + 60
            while (res := subprocess.run(words, capture_output=True, text=True)).returncode:
                assert time.monotonic() < deadline, res.stderr  # the server binds after printing
                time.sleep(0.2)
            assert "N" in res.stdout.split()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    left = list(tmp.iterdir())
    shutil.rmtree(tmp, ignore_errors=True)
    assert not left


def test_demo_without_serve_cleans_up_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM while the demo starts, loads or runs its examples (where it lands depends on the
    machine's load; the cleanup must not): no directory is left. A SIGTERM that lands while
    the demo is already stopping its cluster must not cut that short either (it once left the
    directory behind when the run ended on its own just before the signal)."""
    tmp = _tmpdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpsql", "demo"],  # the examples: several seconds of queries
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(tmp.glob("dpsql-pg-*/data/postmaster.pid")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    left = list(tmp.iterdir())
    shutil.rmtree(tmp, ignore_errors=True)
    assert not left

"""``python -m dpsql serve`` as a process: serves psql, logs one JSON line per statement, exits 0 on
SIGTERM. ``dpsql verifier`` makes credentials the server accepts."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from dpsql.cli import main
from tests.conftest import IN_CI
from tests.helpers import db_name, start_serve
from tests.policies import PolicyMaker, private_table


def test_verifier_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dpsql.wire.auth import check_password

    monkeypatch.setattr(sys, "stdin", io.StringIO("pw1\n"))
    assert main(["verifier", "zoe", "--stdin"]) == 0
    out = capsys.readouterr().out
    verifier = out.split('credential: "')[1].rstrip('"\n')
    assert out.startswith("analysts:\n  zoe:") and check_password(verifier, "pw1")


def test_serve_process(
    make_db: Callable[[str], str], make_policy: PolicyMaker, tmp_path: Path
) -> None:
    psql = shutil.which("psql")
    if psql is None:
        if IN_CI:
            pytest.fail("psql is required in CI")
        pytest.skip("psql not installed")
    from dpsql.wire.auth import make_verifier

    upstream = make_db("wire_cli")
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid int, v int); INSERT INTO t SELECT g, g % 7 FROM "
                     "generate_series(1, 500) g")  # fmt: skip
    # Fixed contribution bounds (R = G = 1, one row per unit): with `auto` the row bound is a
    # noisy choice that lands among the empty buckets far above the data now and then (the
    # small-table guard lets the choice run with p ~ 1e-2, then ~2% of choices go high: R up to
    # 10^6 and the count's noise with it), so the range check below failed with p ~ 3e-4. Fixed:
    # true count 285, Laplace scale <= 1 / 0.9, P(|noise| >= 185) < e^-160.
    policy = make_policy(
        "serve",
        base={"version": 1},
        tables={"t": private_table("uid", {"v": {"type": "integer", "bounds": [0, 10]}})},
        analysts={"zoe": {"credential": make_verifier("pw"), "budget": {"epsilon": 50}}},
    ).path
    port_file = tmp_path / "port"
    proc, port = start_serve(
        ["--policy", str(policy), "--upstream", upstream], port_file=port_file,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        out = subprocess.run(
            [psql, "-h", "127.0.0.1", "-p", str(port), "-U", "zoe", "-d", db_name(upstream), "-X", "-A", "-t",
             "-c", "SELECT COUNT(*) FROM t WHERE v > 2"],
            capture_output=True, text=True, timeout=30,
            env={"PGPASSWORD": "pw", "PATH": os.environ.get("PATH", "/usr/bin")},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert 100 < int(out.stdout.strip()) < 500
    finally:
        proc.send_signal(signal.SIGTERM)
        logs, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, logs
    assert f"listening on 127.0.0.1:{port} " in logs
    assert not port_file.exists()  # removed at exit
    lines = [json.loads(x.split(" dpsql.statement ", 1)[1]) for x in logs.splitlines()
             if " dpsql.statement " in x]  # fmt: skip
    private = [x for x in lines if x["kind"] == "private"]
    assert private and private[0]["analyst"] == "zoe" and private[0]["epsilon"] > 0
    assert "v > 2" not in logs

"""``python -m dpsql serve`` configured by the policy's ``server:`` section and the environment
(no --upstream/--listen flags), ``dpsql query`` taking its upstream and ledger the same way, and
``dpsql check`` on that section."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest

from dpsql.cli import main
from tests.helpers import db_name, start_serve
from tests.integration.budget.ledger_support import release_sums

ROOT = Path(__file__).resolve().parents[3]


def _policy(tmp_path: Path, server: str) -> Path:
    from dpsql.wire.auth import make_verifier

    path = tmp_path / "policy.yaml"
    # Fixed contribution bounds (R = G = 1, one row per unit), on the lines `auto` bounds took:
    # an `auto` row bound is a noisy choice that lands far above the data now and then (R up to
    # 10^6), and `100 < n < 500` failed with p ~ 2e-4. Fixed: true count 300, Laplace scale
    # <= 1 / 0.9, P(|noise| >= 200) < e^-170. (Line numbers below count on these lines.)
    path.write_text(
        "version: 1\ntables:\n  t:\n    privacy_unit: uid\n"
        "    max_rows_per_unit: 1\n    max_groups_per_unit: 1\n"
        "    columns: {uid: {type: integer, identifier: true}, "
        "v: {type: integer, bounds: [0, 10]}}\n"
        f'analysts:\n  zoe:\n    credential: "{make_verifier("pw")}"\n    budget: {{epsilon: 50}}\n'
        + server
    )
    return path


def test_serve_from_file_and_environment(make_db: Callable[[str], str], tmp_path: Path) -> None:
    upstream = make_db("serve_cfg")
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid int, v int); INSERT INTO t SELECT g, g % 7 FROM "
                     "generate_series(1, 300) g")  # fmt: skip
    taken = socket.create_server(("127.0.0.1", 0))  # held: serving there would fail
    file_port = taken.getsockname()[1]
    policy = _policy(
        tmp_path,
        'server:\n  upstream: "${T_SERVE_DSN}"\n'
        f"  listen: 127.0.0.1:{file_port}\n  max_sessions: 1\n  log_level: info\n",
    )
    env = {**os.environ, "T_SERVE_DSN": upstream, "DPSQL_LISTEN": "127.0.0.1:0"}
    env.pop("DPSQL_UPSTREAM", None)
    proc, env_port = start_serve(
        ["--policy", str(policy), "--max-sessions", "2"], listen=None, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert env_port != file_port  # the environment beats the file
        dsn = f"host=127.0.0.1 port={env_port} user=zoe password=pw dbname={db_name(upstream)}"
        with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:  # flag (2) beats file (1)
            (n,) = a.execute("SELECT COUNT(*) FROM t").fetchone()  # type: ignore[misc]
            assert 100 < n < 500
            assert b.execute("SELECT 1").fetchone() == (1,)
            with pytest.raises(psycopg.OperationalError, match="too many"):
                psycopg.connect(dsn).close()
    finally:
        proc.send_signal(signal.SIGTERM)
        logs, _ = proc.communicate(timeout=30)
        taken.close()
    assert proc.returncode == 0, logs
    assert "listen=DPSQL_LISTEN" in logs and "max_sessions=--max-sessions" in logs
    assert f"upstream={policy}:13" in logs
    assert upstream not in logs  # the DSN (a secret) is never logged


def test_serve_refuses_an_unset_variable_it_needs(tmp_path: Path) -> None:
    policy = _policy(tmp_path, 'server:\n  upstream: "${T_SERVE_UNSET}"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("T_SERVE_UNSET", "DPSQL_UPSTREAM")}
    out = subprocess.run(
        [sys.executable, "-m", "dpsql", "serve", "--policy", str(policy)],
        cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert "server.upstream: environment variable T_SERVE_UNSET is not set" in out.stderr


def test_check_validates_the_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _policy(tmp_path, "server:\n  upstream: postgresql://u:s3cret@h/d\n  max_sessions: 5\n"
                   "timing: {quantum_ms: 250}\n")  # fmt: skip
    assert main(["check", str(good)]) == 0
    out = capsys.readouterr().out.replace("\n", "")
    assert "server: max_sessions=5, upstream=(set)" in out and "s3cret" not in out
    assert "timing: private answers at multiples of 250 ms" in out
    bad = _policy(tmp_path, "server:\n  max_sessions: -1\n")
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out.replace("\n", "")  # rich wraps long lines
    assert f"{bad}:13: server.max_sessions: Input should be greater" in out


def test_check_warns_when_min_ms_does_not_cover_the_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = _policy(tmp_path, "timing: {min_ms: 1000}\n")
    assert main(["check", str(short)]) == 0
    assert "not above the statement timeout (30000 ms)" in capsys.readouterr().out.replace("\n", "")
    covered = _policy(tmp_path, "server: {statement_timeout_ms: 500}\ntiming: {min_ms: 1000}\n")
    assert main(["check", str(covered)]) == 0
    out = capsys.readouterr().out.replace("\n", "")
    assert "not before 1000 ms" in out and "not above" not in out


def test_query_takes_upstream_and_ledger_as_serve_does(
    make_db: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``dpsql query``: --upstream > DPSQL_UPSTREAM > server.upstream (ledger likewise). A
    bogus DSN (nothing listens on port 1) at every lower layer: using it would fail."""
    upstream, ledger = make_db("query_cfg"), make_db("query_ledger")
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid int, v int); INSERT INTO t SELECT g, g % 7 FROM "
                     "generate_series(1, 300) g")  # fmt: skip
    bogus = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"
    policy = _policy(tmp_path, 'server:\n  upstream: "${T_Q_DSN}"\n  ledger: "${T_Q_LEDGER}"\n')
    for name in ("DPSQL_UPSTREAM", "DPSQL_LEDGER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("T_Q_LEDGER", ledger)

    asked: list[int] = []

    def query(*flags: str) -> int:  # a new statement each time: none is a free repeat
        asked.append(len(asked))
        return main(["query", "--policy", str(policy), "--analyst", "zoe", "--epsilon", "0.5",
                     *flags, f"SELECT COUNT(*) FROM t WHERE v >= {len(asked)}"])  # fmt: skip

    monkeypatch.setenv("T_Q_DSN", upstream)
    assert query() == 0, capsys.readouterr()  # the file's upstream and ledger
    assert release_sums(ledger)["zoe"].epsilon == Fraction(1, 2)
    monkeypatch.setenv("T_Q_DSN", bogus)
    monkeypatch.setenv("DPSQL_UPSTREAM", upstream)
    assert query() == 0, capsys.readouterr()  # the environment beats the file
    monkeypatch.setenv("DPSQL_UPSTREAM", bogus)
    monkeypatch.setenv("DPSQL_LEDGER", bogus)
    assert query("--upstream", upstream, "--ledger", ledger) == 0, capsys.readouterr()
    assert release_sums(ledger)["zoe"].epsilon == Fraction(3, 2)  # one ledger for all three
    capsys.readouterr()

    monkeypatch.delenv("DPSQL_UPSTREAM")
    monkeypatch.delenv("DPSQL_LEDGER")
    monkeypatch.delenv("T_Q_DSN")
    assert query() == 1
    err = capsys.readouterr().err.replace("\n", "")
    assert "server.upstream: environment variable T_Q_DSN is not set" in err
    bare = _policy(tmp_path, "")
    assert main(["query", "--policy", str(bare), "SELECT 1"]) == 1
    assert "no upstream PostgreSQL" in capsys.readouterr().err.replace("\n", "")

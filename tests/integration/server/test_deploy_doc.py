"""docs/deploy.md, followed literally on a fresh database (issue #20): its `sql` block run as the
administrator, its `sh` blocks run as written (only the host and ports replaced by the test
cluster's, `dpsql` by `python -m dpsql`), the DP query answered through psql. Then what start-up
refuses: a missing privilege, a missing table, a ledger the query role can't create.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from dpsql.demo import load_demo
from tests.conftest import IN_CI
from tests.helpers import ROOT, start_serve

DOC = ROOT / "docs" / "deploy.md"


def _blocks(kind: str) -> list[str]:
    """The `kind` code blocks of sections 1-4 (the steps), in order."""
    steps = DOC.read_text().split("\n## TLS, systemd")[0]
    return re.findall(rf"```{kind}\n(.*?)```", steps, flags=re.S)


@pytest.fixture
def shop(pg_admin_dsn: str) -> Iterator[dict[str, str]]:
    """A fresh `shop` database with the demo tables; the doc's roles are dropped afterwards."""
    info = psycopg.conninfo.conninfo_to_dict(pg_admin_dsn)
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        _drop(conn)
        conn.execute("CREATE DATABASE shop")
    admin = psycopg.conninfo.make_conninfo(pg_admin_dsn, dbname="shop")
    load_demo(admin)
    try:
        yield {"admin": admin, "host": str(info.get("host", "127.0.0.1")),
               "port": str(info.get("port", "5432"))}  # fmt: skip
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            _drop(conn)


def _drop(conn: psycopg.Connection) -> None:
    for db in ("shop", "dpsql_ledger"):
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    for role in ("dpsql_reader", "dpsql_ledger"):
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _local(cmd: str, shop: dict[str, str]) -> str:
    return cmd.replace("127.0.0.1:5432", f"{shop['host']}:{shop['port']}")


def _serve_args(cmd: str) -> list[str]:
    """The doc's `dpsql serve` line, minus `dpsql serve` and its --listen (the test binds any
    free port and learns it from --port-file)."""
    words = shlex.split(cmd)
    assert words[:2] == ["dpsql", "serve"]
    i = words.index("--listen")
    return words[2:i] + words[i + 2 :]


def _dpsql(words: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dpsql", *words], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _refusal(args: list[str]) -> str:
    """What `dpsql serve ARGS` writes when it refuses to start (it must)."""
    res = _dpsql(["serve", *args, "--listen", "127.0.0.1:0"])
    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    return res.stderr


def test_deploy_doc_literally(shop: dict[str, str], tmp_path: Path) -> None:
    if shutil.which("psql") is None:
        if IN_CI:
            pytest.fail("psql is not installed")
        pytest.skip("psql is not installed")
    (roles,) = _blocks("sql")
    with psycopg.connect(shop["admin"], autocommit=True) as conn:
        for statement in filter(None, (s.strip() for s in roles.split(";"))):
            conn.execute(statement)  # type: ignore[call-overload]
    check, serve, query = (_local(b.strip(), shop) for b in _blocks("sh"))
    res = _dpsql(shlex.split(check)[1:])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]

    args = _serve_args(serve)
    proc, port = start_serve(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        words = shlex.split(query.replace("port=6543", f"port={port}"))
        out = subprocess.run(words, capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        # a noisy count: an integer, possibly negative (the doc's policy chooses R per query and
        # lands far above the data with probability ~1e-2, then the noise can exceed the 122k)
        assert re.search(r"^\s*-?\d+\s*$", out.stdout, flags=re.M), out.stdout
    finally:
        proc.terminate()
        proc.wait(30)
    with psycopg.connect(shop["admin"].replace("dbname=shop", "dbname=dpsql_ledger")) as conn:
        released = conn.execute("SELECT count(*) FROM dpsql.release").fetchone()
        assert released and released[0] >= 1  # charged in the ledger role's own database

    # what start-up refuses, one line each, no traceback
    with psycopg.connect(shop["admin"], autocommit=True) as conn:
        conn.execute("REVOKE SELECT ON public.pums FROM dpsql_reader")
    err = _refusal(args)
    assert "GRANT SELECT ON public.pums TO dpsql_reader" in err, err
    with psycopg.connect(shop["admin"], autocommit=True) as conn:
        conn.execute("GRANT SELECT ON public.pums TO dpsql_reader")
        conn.execute("ALTER TABLE public.regions RENAME TO regions_old")
    err = _refusal(args)
    assert "table public.regions named in the policy does not exist upstream" in err, err
    with psycopg.connect(shop["admin"], autocommit=True) as conn:
        conn.execute("ALTER TABLE public.regions_old RENAME TO regions")
    no_ledger = args[: args.index("--ledger")] + args[args.index("--ledger") + 2 :]
    err = _refusal(no_ledger)
    assert 'the ledger role "dpsql_reader" may not create the ledger schema' in err, err

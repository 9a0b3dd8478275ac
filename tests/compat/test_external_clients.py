"""psql, PgJDBC (Debian's libpostgresql-jdbc-java on the installed JDK) and node-postgres against
``dpsql serve``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.compat.conftest import (
    AGGREGATE,
    HIDDEN,
    PUMS_COLUMNS,
    RAW,
    REFUSED_SQLSTATE,
    VISIBLE_TABLES,
    Server,
    require,
)
from tests.compat.test_python_clients import plausible_count

HERE = Path(__file__).resolve().parent
JDBC_JAR = "/usr/share/java/postgresql.jar"


def psql(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGPASSWORD": server.password, "PGSSLMODE": "disable"}
    cmd = ["psql", "-X", "-h", server.host, "-p", str(server.port), "-U", server.user]
    return subprocess.run(
        [*cmd, "-d", server.dbname, *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_psql(dpsql_server: Server) -> None:
    require("psql")
    out = psql(dpsql_server, "-A", "-t", "-c", AGGREGATE)
    assert out.returncode == 0, out.stderr
    plausible_count(out.stdout.strip(), dpsql_server)
    refused = psql(dpsql_server, "-v", "VERBOSITY=verbose", "-c", RAW)
    assert refused.returncode != 0
    assert f"ERROR:  {REFUSED_SQLSTATE}" in refused.stderr, refused.stderr
    for meta in (
        r"\dt",
        r"\dt+",
        r"\d",
        r"\d pums",
        r"\d+ pums",
        r"\di",
        r"\dn",
        r"\l",
        r"\du",
        r"\conninfo",
    ):
        res = psql(dpsql_server, "-c", meta)
        assert res.returncode == 0, (meta, res.stderr)
        text = res.stdout.lower()
        for word in HIDDEN:
            assert word not in text, (meta, text)
    tables = psql(dpsql_server, "-c", r"\dt").stdout
    assert "pums" in tables and "regions" in tables
    sized = psql(dpsql_server, "-c", r"\dt+").stdout
    assert "pums" in sized and "kB" not in sized and "bytes" not in sized  # sizes are blank
    described = psql(dpsql_server, "-c", r"\d pums").stdout
    assert "income" in described and "secret_ssn" not in described


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_jdbc(dpsql_server: Server) -> None:
    require("java")
    require(JDBC_JAR)
    s = dpsql_server
    res = subprocess.run(
        ["java", "-cp", JDBC_JAR, str(HERE / "clients" / "Client.java"), s.host, str(s.port),
         s.dbname, s.user, s.password, "meta", f"sql:{AGGREGATE}", f"stmt:{AGGREGATE}", f"sql:{RAW}"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    meta, prepared, plain, raw = _json_lines(res.stdout)
    assert meta["ok"], meta
    assert {t[1] for t in meta["tables"]} == VISIBLE_TABLES
    assert {c[1] for c in meta["columns"] if c[0] == "pums"} == set(PUMS_COLUMNS)
    for idx in meta["indexes"]:
        for row in idx:
            assert row[2] in (None, 0, -1, -1.0, 0.0), row  # CARDINALITY is no statistic
    for r in (prepared, plain):
        assert r["ok"], r
        plausible_count(r["rows"][0][0], dpsql_server)
    assert not raw["ok"] and raw["sqlstate"] == REFUSED_SQLSTATE


def test_node_pg(dpsql_server: Server) -> None:
    require("node")
    require(str(HERE / "node" / "node_modules" / "pg"))
    res = subprocess.run(
        ["node", str(HERE / "node" / "client.js"), dpsql_server.url + "?sslmode=disable", "meta",
         f"sql:{AGGREGATE}", f"simple:{AGGREGATE}", f"sql:{RAW}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    meta, prepared, simple, raw = _json_lines(res.stdout)
    assert meta["ok"], meta
    assert {t["table_name"] for t in meta["tables"]} == VISIBLE_TABLES
    plausible_count(prepared["rows"][0][0], dpsql_server)
    plausible_count(simple["rows"][0]["count"], dpsql_server)
    assert not raw["ok"] and raw["sqlstate"] == REFUSED_SQLSTATE


def test_node_pg_array_parameter(dpsql_server: Server) -> None:
    require("node")
    require(str(HERE / "node" / "node_modules" / "pg"))
    res = subprocess.run(
        ["node", str(HERE / "node" / "client.js"), dpsql_server.url + "?sslmode=disable", "types"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (types,) = _json_lines(res.stdout)
    assert types["ok"], types
    assert {t["typname"] for t in types["types"]} == {"int4", "text", "numeric"}

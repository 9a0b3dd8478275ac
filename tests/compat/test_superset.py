"""Apache Superset's own connection code path against ``dpsql serve`` (an optional tier).

Superset is heavy and pins its own SQLAlchemy 1.4, so it lives in a venv of its own and this
test runs only when ``DPSQL_SUPERSET_PYTHON`` names that venv's Python (see the README):

    python3 -m venv /work/venv-superset
    /work/venv-superset/bin/pip install apache-superset psycopg2-binary rich cachetools \\
        'flask-caching==2.3.1'
    DPSQL_SUPERSET_PYTHON=/work/venv-superset/bin/python python -m pytest tests/compat/test_superset.py

``clients/superset_client.py`` registers dpsql as a Superset database with ``-c
dpsql.epsilon=0.5`` in its engine parameters and runs the connection test, the dataset editor's
listings through PostgresEngineSpec, column discovery (``SELECT * ... LIMIT 0``), SQL Lab's
``execute_sql_statements`` (``SELECT pg_backend_pid()`` first, then the query) for an aggregate
and for a raw read, and SQL Lab's Stop (``cancel_query`` from another connection while a
statement runs on the SQL Lab one). Properties: each step succeeds, the epsilon from the
connection's options is the session's, the aggregate has the declared keys, the raw read fails in
SQL Lab with dpsql's message and hint, no hidden name is listed, and Stop stops the running
statement (it was True whatever happened: the statement ran on). Without Superset, the same two
statements through psycopg: tests/integration/wire/test_stop_from_another_session.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.compat.conftest import HIDDEN, Server

HERE = Path(__file__).resolve().parent


def test_superset_engine_spec_and_sql_lab(dpsql_server: Server, tmp_path: Path) -> None:
    python = os.environ.get("DPSQL_SUPERSET_PYTHON")
    if not python:
        pytest.skip("optional tier: set DPSQL_SUPERSET_PYTHON to a Python with apache-superset")
    s = dpsql_server
    res = subprocess.run(
        [python, str(HERE / "clients" / "superset_client.py"), s.host, str(s.port), s.dbname,
         str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    steps: dict[str, list[dict[str, Any]]] = {}
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            steps.setdefault(item["step"], []).append(item)
    assert res.returncode == 0, res.stderr[-4000:]
    assert steps["connect"][0]["epsilon"] == "0.5"
    inspect = steps["inspect"][0]
    assert {"pums", "purchases", "regions"} <= set(inspect["tables"])
    assert not any(h in json.dumps(inspect) for h in HIDDEN)
    assert steps["columns"][0]["rows"] == 0 and "amount" in steps["columns"][0]["names"]
    aggregate, raw = steps["sqllab"]
    assert aggregate["status"] == "success" and isinstance(aggregate["cancel_id"], int)
    categories = {row["category"] for row in aggregate["data"]}
    assert categories == {"books", "clothing", "electronics", "groceries", "travel"}
    assert raw["status"] == "failed" and "raw rows" in raw["error"] and "HINT" in raw["error"]
    stop = steps["cancel"][0]  # SQL Lab's Stop stops the running statement (newcomer21 #38)
    assert stop["ok"] is True and stop["seen"] == "active", stop
    # not "answered": it stopped. psycopg2-binary's libpq reports a backend terminated mid-query as
    # "server closed the connection unexpectedly" without the FATAL's words, against PostgreSQL
    # itself too (pg_sleep + pg_terminate_backend, Superset 6.1.0's psycopg2 2.9: the same words;
    # psycopg 3 reads 57P01 "terminating connection ..." from both): either is PostgreSQL's outcome
    assert stop["outcome"].startswith("OperationalError: "), stop
    assert any(
        w in stop["outcome"]
        for w in ("terminating connection", "server closed the connection unexpectedly")
    ), stop

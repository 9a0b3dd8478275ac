"""psql's ``\\d dpsql.history`` and ``\\d dpsql.budget`` describe dpsql's own views.

They are answered by dpsql from the ledger (no upstream relation), so psql found 'Did not find
any relation named "dpsql.history".'. A catalog query that names them (dpsql.catalog.own_views)
now reads them as views of a schema dpsql, with the columns and types dpsql answers them with;
a listing that does not name them (``\\dv``) is as before.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.budget.views import BUDGET_COLUMNS, HISTORY_COLUMNS
from dpsql.catalog.own_views import OWN_VIEWS
from tests.compat.conftest import require
from tests.helpers import analyst_dsn, served_engine


def test_the_catalog_says_what_the_views_answer() -> None:
    """The catalog's columns are the views' own (a change to a view's record shows here)."""
    for name, columns in (("budget", BUDGET_COLUMNS), ("history", HISTORY_COLUMNS)):
        assert OWN_VIEWS[name][1] == tuple((c.name, c.type_oid) for c in columns), name


@pytest.fixture(scope="module")
def port(demo_dsn: str, demo_policy: Any) -> Iterator[int]:
    with served_engine(demo_policy, demo_dsn) as srv:
        yield srv.port


def _psql(port: int, *commands: str) -> str:
    require("psql")
    args = ["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "analyst", "-d", "demo"]
    res = subprocess.run(
        [*args, *(x for c in commands for x in ("-c", c))],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PGPASSWORD": "analyst"},
    )  # fmt: skip
    assert res.returncode == 0 and "ERROR" not in res.stderr, res.stderr
    return res.stdout + res.stderr


@pytest.mark.parametrize(
    ("view", "columns"), [("history", HISTORY_COLUMNS), ("budget", BUDGET_COLUMNS)]
)
def test_psql_describes_dpsqls_own_view(port: int, view: str, columns: Any) -> None:
    out = _psql(port, f"\\d dpsql.{view}")
    assert f'View "dpsql.{view}"' in out, out
    with psycopg.connect(analyst_dsn(port)) as conn:  # the types PostgreSQL prints
        names = dict(
            conn.execute("SELECT oid::int, format_type(oid, NULL) FROM pg_type").fetchall()
        )
    for c in columns:
        assert any(
            line.split("|")[0].strip() == c.name and line.split("|")[1].strip() == names[c.type_oid]
            for line in out.splitlines()
            if "|" in line
        ), (c.name, out)


def test_a_listing_that_does_not_name_them_is_as_before(port: int) -> None:
    """``\\dv`` lists the policy's tables only (no view outside the search path, as
    PostgreSQL's); ``\\dn`` lists the schema ``dpsql`` beside ``public`` (newcomer25 #15: the
    schema whose views ``\\d dpsql.history`` describes was not listed; fails before);
    ``\\dv dpsql.*`` names the schema and lists the two views."""
    plain = _psql(port, "\\dv")
    assert "history" not in plain and "dpsql" not in plain, plain
    schemas = _psql(port, "\\dn")
    names = [line.split("|")[0].strip() for line in schemas.splitlines() if "|" in line]
    assert names == ["Name", "dpsql", "public"], schemas
    named = _psql(port, "\\dv dpsql.*")
    assert "history" in named and "budget" in named, named

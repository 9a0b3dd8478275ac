"""`dpsql init --upstream DSN` (issue #20): a starting policy from the catalog that loads, passes
`dpsql serve`'s start-up checks, and marks its guesses for review."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from dpsql.cli import main
from dpsql.demo import SCHEMA as DEMO_SCHEMA
from dpsql.policy import load_policy
from dpsql.server.startup_checks import startup_problems
from tests.helpers import ROOT

SCHEMA = """
CREATE TYPE status AS ENUM ('new', 'paid', 'sent');
CREATE TABLE regions (code text PRIMARY KEY, label text);
INSERT INTO regions VALUES ('N', 'north'), ('S', 'south');
CREATE TABLE users (id integer PRIMARY KEY, email text UNIQUE,
                    age integer CHECK (age >= 0 AND age <= 120));
CREATE TABLE orders (id bigint PRIMARY KEY, user_id integer REFERENCES users (id),
                     amount numeric CHECK (amount >= 0 AND amount <= 1000), quantity integer,
                     state status, region text REFERENCES regions (code), placed date,
                     raw bytea);
CREATE TABLE visits (user_id integer REFERENCES users (id), at timestamptz);
ANALYZE;
"""


def _command(dsn: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`python -m dpsql init` as a user runs it (a process of its own: ~1 s of CPU for the
    interpreter and dpsql's imports), once in this module; the other calls run the same
    ``dpsql.cli.main`` in this process (:func:`_init`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSQL_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "dpsql", "init", "--upstream", dsn, "--output", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _init(
    dsn: str, out: Path, *extra: str, capsys: pytest.CaptureFixture[str]
) -> subprocess.CompletedProcess[str]:
    """``dpsql init --upstream dsn --output out`` through the command's own entry point
    (``dpsql.cli.main``, what ``python -m dpsql`` calls): its exit status and what it printed.
    An exception it lets through (a traceback for the user) fails the test here."""
    capsys.readouterr()
    argv = ["init", "--upstream", dsn, *extra, "--output", str(out)]
    with pytest.MonkeyPatch.context() as mp:
        for k in [k for k in os.environ if k.startswith("DPSQL_")]:
            mp.delenv(k)
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own refusals
            code = e.code if isinstance(e.code, int) else 1
    got = capsys.readouterr()
    return subprocess.CompletedProcess(["dpsql", *argv], code, got.out, got.err)


PRODUCTS = """
CREATE TABLE products (sku text PRIMARY KEY, name text);
INSERT INTO products SELECT 'p' || g, 'product ' || g FROM generate_series(1, 1500) g;
CREATE TABLE reviews (customer_no integer, sku text REFERENCES products (sku), stars integer);
"""


def test_init_on_the_demo_schema(
    make_db: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's tables (never analyzed), no users table to reference: purchases' unit is
    user_id (its name), never region (a key into the small lookup regions, which is public);
    pums' is pid; bigint stays bigint. A column referencing a large table that is not one of
    people (products) is an identifier, not the unit."""
    dsn = make_db("init_demo")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DEMO_SCHEMA)  # type: ignore[call-overload]
        conn.execute(PRODUCTS)  # type: ignore[call-overload]
    out = tmp_path / "policy.yaml"
    res = _init(dsn, out, capsys=capsys)
    assert res.returncode == 0, res.stderr[-2000:]
    text = out.read_text()
    policy = load_policy(str(out))
    purchases = policy.tables["public.purchases"]
    assert purchases.privacy_unit == "user_id"
    assert policy.tables["public.pums"].privacy_unit == "pid"
    assert policy.public_tables == ("public.regions",)
    assert "public.regions" not in policy.tables
    assert purchases.columns["region"].keys_from == "public.regions.code"
    assert not purchases.columns["region"].identifier
    assert purchases.columns["id"].type == "bigint" and purchases.columns["id"].identifier
    assert purchases.columns["user_id"].type == "integer"
    assert policy.tables["public.reviews"].privacy_unit == "customer_no"
    assert policy.tables["public.reviews"].columns["sku"].identifier
    assert policy.tables["public.products"].privacy_unit == "row"
    for unit in ("user_id", "pid", "customer_no", "row"):
        assert f"privacy_unit: {unit}   # REVIEW" in text
    assert [p.text for p in startup_problems(policy, dsn, dsn) if p.fatal] == []


def test_init_writes_a_policy_that_serves(
    make_db: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = make_db("init")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)  # type: ignore[call-overload]
    out = tmp_path / "policy.yaml"
    res = _command(dsn, out)  # the command itself, in a process of its own
    assert res.returncode == 0, res.stderr[-2000:]
    text = out.read_text()
    policy = load_policy(str(out))
    orders, users = policy.tables["public.orders"], policy.tables["public.users"]
    assert orders.privacy_unit == "user_id" and users.privacy_unit == "id"
    assert policy.tables["public.visits"].privacy_unit == "user_id"
    assert policy.public_tables == ("public.regions",)
    assert orders.columns["amount"].bounds == (0, 1000)
    assert users.columns["age"].bounds == (0, 120)
    assert orders.columns["quantity"].bounds is None
    assert orders.columns["state"].keys == ("new", "paid", "sent")
    assert orders.columns["region"].keys_from == "public.regions.code"
    assert users.columns["email"].identifier and orders.columns["id"].identifier
    assert "raw" not in orders.columns and "bytea is not supported" in text
    assert text.count("# REVIEW") >= 8
    assert [p.text for p in startup_problems(policy, dsn, dsn) if p.fatal] == []
    again = _init(dsn, out, capsys=capsys)
    assert again.returncode == 1 and "exists" in again.stdout + again.stderr


def _refusal(res: subprocess.CompletedProcess[str], sqlstate: str, words: str) -> None:
    """A refusal as every dpsql command gives one: exit status 1, 'ERROR <SQLSTATE>: ...' in the
    user's words and a HINT saying what to do instead, no traceback."""
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    flat = " ".join(res.stderr.split())  # the message may wrap (a long temporary path under xdist)
    assert f"ERROR {sqlstate}: " in flat and words in flat, res.stderr
    assert "HINT: " in res.stderr and "Traceback" not in res.stderr, res.stderr


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_init_refusals_have_a_sqlstate_and_say_what_to_do(
    make_db: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad arguments, an existing file, a DSN that is not one, a database that does not answer,
    a directory that does not exist, a schema with no table: each a refusal with its SQLSTATE
    (before: a psycopg traceback for the DSN and connection cases, exit status 1 with no
    SQLSTATE for an unwritable output)."""
    out = tmp_path / "policy.yaml"
    out.write_text("keep: me\n")
    dsn = make_db("init_refusals")
    _refusal(_init(dsn, out, capsys=capsys), "58P02", "exists")
    assert out.read_text() == "keep: me\n"  # not overwritten
    garbage = _init("garbage===", tmp_path / "a.yaml", capsys=capsys)
    _refusal(garbage, "22023", "not a connection string")
    down = f"postgresql://127.0.0.1:{_closed_port()}/x"
    _refusal(_init(down, tmp_path / "b.yaml", capsys=capsys), "08006", "could not connect")
    nodb = psycopg.conninfo.make_conninfo(dsn, dbname="nosuchdb_init")
    res = _init(nodb, tmp_path / "b.yaml", capsys=capsys)
    _refusal(res, "08006", "could not connect")
    flat = " ".join(res.stderr.split())
    assert 'database "nosuchdb_init" does not exist' in flat, res.stderr  # the reason, in DETAIL
    nodir = _init(dsn, tmp_path / "no" / "dir.yaml", capsys=capsys)
    _refusal(nodir, "58030", "does not exist")
    res = _init(dsn, tmp_path / "c.yaml", "--schema", "nosuch", capsys=capsys)
    _refusal(res, "3F000", "no table or view in schema nosuch")
    assert not any((tmp_path / n).exists() for n in ("a.yaml", "b.yaml", "c.yaml"))

"""``--to-table`` names a table PostgreSQL's way and is checked before anything is charged
(newcomer22 #27: ``--to-table public.regions --replace`` tried ``DROP TABLE public.regions``, the
policy's public table and the keys_from source of purchases.region, stopped only by a foreign
key, and was charged; ``'"public"."visits"'`` created a schema literally named ``"public"``).

Real CLI (in process), real PostgreSQL (the demo data), a ledger of its own; deterministic: exit
status, the SQLSTATE in the words, the ledger's releases, the upstream's catalog.
"""

from __future__ import annotations

import csv
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from dpsql.cli import main
from dpsql.errors import DpsqlError
from dpsql.release.outputs import OutColumn, write_pg_table


def _releases(ledger: str) -> int:
    with psycopg.connect(ledger) as conn:
        row = conn.execute("SELECT to_regclass('dpsql.release') IS NOT NULL").fetchone()
        if row is None or not row[0]:
            return 0
        got = conn.execute("SELECT count(*) FROM dpsql.release").fetchone()
        return int(got[0]) if got else 0


@pytest.fixture(scope="module")
def ledger(make_db: Callable[[str], str]) -> str:
    """One ledger for the refusals (each charges nothing: its releases stay at 0)."""
    return make_db("release_target")


def _release(demo_dsn: str, ledger: str, out: Path, *extra: str) -> int:
    from dpsql.demo import POLICY

    # (the demo has two analysts: --analyst names whose budget is charged)
    return main(["release", "histogram", "--policy", str(POLICY), "--upstream", demo_dsn,
                 "--ledger", ledger, "--table", "pums", "--columns", "sex",
                 "--rows-per-unit", "4", "--cells-per-unit", "4",
                 "--epsilon", "0.01", "--out", str(out), "--no-progress",
                 "--analyst", "analyst", *extra])  # fmt: skip


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("public.regions", "42501: public.regions is a public table of the policy"),
        ('"public"."regions"', "42501: public.regions is a public table of the policy"),
        ('"public"."pums"', "42501: public.pums is a private table of the policy"),
        ("PUBLIC.Purchases", "42501: public.purchases is a private table of the policy"),
        ("dpsql.release", "42501: dpsql.release is in the schema dpsql"),
        ("a.b.c", "22023: --to-table table name 'a.b.c' must be table or schema.table"),
        ('"public', "22023: --to-table '\"public': a double quote is not closed"),
    ],
)
def test_a_table_of_the_policy_or_a_bad_name_is_refused_before_any_charge(
    demo_dsn: str,
    ledger: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    target: str,
    words: str,
) -> None:
    assert _release(demo_dsn, ledger, tmp_path, "--to-table", target, "--replace") == 1
    got = capsys.readouterr()
    err = " ".join(got.err.split())
    assert words in err and "nothing was charged" in err, err
    assert "charging the ledger" not in got.out, got.out  # it charged nothing
    assert _releases(ledger) == 0
    with psycopg.connect(demo_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM regions").fetchone() == (5,)
        quoted = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE '%\"%'")
        assert quoted.fetchone() == (0,)  # no schema named "public" with its quotes


def test_an_existing_or_unwritable_table_is_refused_before_any_charge(
    demo_dsn: str, ledger: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"scratch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(demo_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (x integer); INSERT INTO {name} VALUES (7)")
        conn.execute(f"CREATE VIEW {name}_v AS SELECT x FROM {name}")
    try:
        assert _release(demo_dsn, ledger, tmp_path, "--to-table", name) == 1
        err = " ".join(capsys.readouterr().err.split())
        assert f"42P07: table public.{name} already exists: nothing was charged" in err, err
        # --replace: DROP TABLE would fail (a view depends on it): known before the charge
        assert _release(demo_dsn, ledger, tmp_path, "--to-table", name, "--replace") == 1
        err = " ".join(capsys.readouterr().err.split())
        assert "2BP01: the release table" in err and "nothing was charged" in err, err
        assert f"view {name}_v depends on table {name}" in err, err
        assert _releases(ledger) == 0
        with psycopg.connect(demo_dsn) as conn:
            assert conn.execute(f"SELECT x FROM {name}").fetchall() == [(7,)]
    finally:
        with psycopg.connect(demo_dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {name} CASCADE")


def test_a_quoted_name_is_written_as_sql_reads_it(
    demo_dsn: str, make_db: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = make_db("release_target_quoted")
    schema = f"rel_{uuid.uuid4().hex[:8]}"
    try:
        assert _release(demo_dsn, ledger, tmp_path, "--to-table", f'{schema}."Sex Counts"') == 0
        assert f'table {schema}."Sex Counts"' in " ".join(capsys.readouterr().out.split())
        # the table holds the release: its CSV's rows, column for column (not a count's sign:
        # at epsilon 0.01 both noisy cells come out at 0 in about 1 release of 10, a valid one)
        with (tmp_path / "histogram.csv").open(newline="") as f:
            rows = list(csv.reader(f))
        assert rows[0] == ["sex", "count", "error_95"] and len(rows) == 3, rows
        with psycopg.connect(demo_dsn) as conn:
            got = conn.execute(
                f'SELECT sex, "count", error_95 FROM {schema}."Sex Counts" ORDER BY sex'
            ).fetchall()
        want = [(s, int(n), float(e)) for s, n, e in rows[1:]]
        assert got == want, (got, rows)
        assert _releases(ledger) == 1
    finally:
        with psycopg.connect(demo_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_a_failed_write_is_an_error_not_a_traceback(demo_dsn: str, tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("n\n1\n")
    with pytest.raises(DpsqlError) as e:  # exists, and no replace (a write after the check)
        write_pg_table(demo_dsn, "public.regions", [OutColumn("n", "integer", [1])], csv,
                       replace=False)  # fmt: skip
    assert e.value.sqlstate == "42P07" and "public.regions can't be written" in e.value.message

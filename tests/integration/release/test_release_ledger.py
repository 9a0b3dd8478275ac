"""``dpsql release`` charges the ledger ``dpsql serve`` charges: ``--ledger``, else DPSQL_LEDGER,
else the policy's ``server.ledger``, else the upstream (newcomer22 #6: it ignored both and
opened the upstream, so with the owner's DSN as DPSQL_UPSTREAM it created a second, empty
ledger in the data's database: bob's epsilon-2 budget released epsilon 4 there and through the
server). Real CLI in-process, real PostgreSQL, a small table and policy of its own;
deterministic (which database holds the release).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.policies import DocArgs, PolicyMaker, private_table

VISITS = private_table("pid", {"dept": {"type": "text", "keys": ["a", "b"]}}, rows=2)
RELEASE: DocArgs = {"base": {"dataset": "release_ledger"}, "tables": {"public.visits": VISITS}}


def _releases(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT to_regclass('dpsql.release') IS NOT NULL").fetchone()
        if row is None or not row[0]:
            return 0
        got = conn.execute("SELECT count(*) FROM dpsql.release").fetchone()
        return int(got[0]) if got else 0


@pytest.mark.parametrize("how", ["env", "file"])
def test_a_release_charges_the_servers_ledger(
    make_db: Callable[[str], str],
    tmp_path: Path,
    make_policy: PolicyMaker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    from dpsql.cli import main

    upstream, ledger = make_db("rel_data"), make_db("rel_ledger")
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE visits (pid int, dept text);"
            "INSERT INTO visits SELECT g % 50, (ARRAY['a','b'])[1 + g % 2]"
            " FROM generate_series(1, 200) g"
        )
    budgets: DocArgs = {"budget": {"epsilon": 10}, "analysts": {"bob": {"budget": {"epsilon": 2}}}}
    if how == "file":
        monkeypatch.setenv("REL_LEDGER", ledger)
        policy = make_policy(
            "release", **RELEASE, **budgets, server={"ledger": "${REL_LEDGER}"}
        ).path
    else:
        monkeypatch.setenv("DPSQL_LEDGER", ledger)
        policy = make_policy("release", **RELEASE, **budgets).path
    monkeypatch.setenv("DPSQL_UPSTREAM", upstream)
    argv = ["release", "histogram", "--policy", str(policy), "--table", "visits",
            "--columns", "dept", "--epsilon", "1", "--analyst", "bob",
            "--out", str(tmp_path / "out"), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert (_releases(ledger), _releases(upstream)) == (1, 0)
    out = capsys.readouterr().out
    assert "charging the ledger in database" in out and "rel_ledger" in out
    # bob has 1 of 2 left in the one ledger: a second release of 1 fits, a third does not.
    assert main(argv) == 0
    assert main(argv) == 1
    assert (_releases(ledger), _releases(upstream)) == (2, 0)


def test_a_release_says_what_it_charged_and_history_names_it(
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The CLI prints what the release used of each budget, the one-time conversion of a
    budget's first Gaussian release to Renyi accounting included, and the ledger records a
    statement the analyst can read in dpsql.history (newcomer22 #14: the dataset budget moved
    by ~8 epsilon silently; history rows of releases had an empty statement)."""
    from dpsql.cli import main

    upstream = make_db("rel_charged")
    with psycopg.connect(upstream, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE visits (pid int, dept text);"
            "INSERT INTO visits SELECT g % 50, (ARRAY['a','b'])[1 + g % 2]"
            " FROM generate_series(1, 200) g"
        )
    policy = make_policy(
        "release",
        **RELEASE,
        # one low order: the conversion costs ~7 epsilon
        budget={"epsilon": 100, "delta": 1.0e-3, "renyi_order": 2},
        analysts={"bob": {"budget": {"epsilon": 50, "delta": 1.0e-4}}},
    ).path
    argv = ["release", "histogram", "--policy", str(policy), "--upstream", upstream,
            "--table", "visits", "--columns", "dept", "--analyst", "bob",
            "--out", str(tmp_path / "out"), "--no-progress"]  # fmt: skip
    assert main([*argv, "--epsilon", "0.5"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "charged ledger release #1 (epsilon 0.5) to analyst bob; it used epsilon 0.5 of the "
        "analyst budget bob, epsilon 0.5 of the dataset budget release_ledger;" in out
    ), out
    assert main([*argv, "--epsilon", "0.5", "--delta", "1e-6"]) == 0  # Gaussian
    out = " ".join(capsys.readouterr().out.split())
    assert "charged ledger release #2 (epsilon 0.5, delta 1e-06: zCDP rho " in out, out
    assert "of the dataset budget release_ledger (its one-time conversion to Renyi" in out, out
    with psycopg.connect(upstream) as conn:
        rows = conn.execute("SELECT statement FROM dpsql.release ORDER BY id").fetchall()
    assert rows == [("release histogram of public.visits (dept)",)] * 2

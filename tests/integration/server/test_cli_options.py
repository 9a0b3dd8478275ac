"""Options go where a user writes them (issue #20): `dpsql budget show --policy ...` as the README
writes it, and before the command as docs/budget.md does; `dpsql check --policy ...` too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from dpsql.cli import main
from dpsql.demo import POLICY
from tests.helpers import ROOT


def _dpsql(capsys: pytest.CaptureFixture[str], *words: str) -> subprocess.CompletedProcess[str]:
    """``dpsql WORDS``'s exit status and output through the command's entry point
    (``dpsql.cli.main``, what ``python -m dpsql`` calls) in this process: the options are
    parsed the same way, without ~1 s of CPU for a new interpreter and dpsql's imports a call
    (the command as a process of its own: test_piped_tables_are_not_cut_to_80_columns)."""
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        for k in [k for k in os.environ if k.startswith("DPSQL_")]:
            mp.delenv(k)
        try:
            code = main(list(words))
        except SystemExit as e:  # argparse's own refusals
            code = e.code if isinstance(e.code, int) else 1
    got = capsys.readouterr()
    return subprocess.CompletedProcess(["dpsql", *words], code, got.out, got.err)


def test_budget_options_before_or_after_the_command(
    make_db: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = make_db("cli_ledger")
    for words in (
        ("budget", "show", "--policy", str(POLICY), "--ledger", ledger),
        ("budget", "--policy", str(POLICY), "--ledger", ledger, "show"),
        ("budget", "--policy", str(POLICY), "show", "--ledger", ledger, "--analyst", "analyst"),
    ):
        res = _dpsql(capsys, *words)
        assert res.returncode == 0, (words, res.stderr[-2000:])
        assert "analyst" in res.stdout
    res = _dpsql(capsys, "budget", "show", "--ledger", ledger)
    assert res.returncode == 1 and "no policy file given" in res.stdout + res.stderr


def test_check_takes_the_policy_either_way(capsys: pytest.CaptureFixture[str]) -> None:
    for words in (("check", str(POLICY)), ("check", "--policy", str(POLICY))):
        res = _dpsql(capsys, *words)
        assert res.returncode == 0, res.stderr[-2000:]


def test_piped_tables_are_not_cut_to_80_columns() -> None:
    """Piped (not a terminal, no COLUMNS), rich would cut table cells to "…" at 80 columns:
    table names as ``public.…``, numbers as ``1.044e+…``. EXPLAIN's tables come out whole."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    sql = "SELECT category, AVG(amount) FROM purchases GROUP BY 1"
    done = subprocess.run(
        [sys.executable, "-m", "dpsql", "explain", "--policy", str(POLICY), sql],
        cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    assert "…" not in done.stdout, done.stdout
    assert "AVG(amount)" in done.stdout and "sensitivity" in done.stdout
    # the error interval's sentence is below the table, its cell the lead and a note number
    # (newcomer25 #15: a ~450-character cell); fails before
    row = next(line for line in done.stdout.splitlines() if line.startswith("│ avg "))
    cell = row.rstrip("│ ").rsplit("│", 1)[1].strip()
    assert cell.startswith("about ±") and cell.endswith("/N [1]") and len(cell) <= 40, row
    assert "\n[1] avg: about ±" in done.stdout and "(N: the noisy count;" in done.stdout


def test_set_points_to_the_command_options(
    make_db: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`dpsql query "SET dpsql.epsilon = 2"` (and `dpsql demo ...`, the same code) said only "SET
    is handled by the dpsql session, not the engine" with "connect through `dpsql serve`"
    (newcomer24 #19): the refusal now names the option that does it here, and the session is
    unharmed (the next statement still runs)."""
    db = make_db("cli_set")
    res = _dpsql(
        capsys,
        *("query", "--policy", str(POLICY), "--upstream", db, "--no-ledger"),
        *("SET dpsql.epsilon = 2", "SHOW dpsql.epsilon", "SELECT 1 AS one"),
    )
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1, out
    assert out.count("ERROR 0A000:") == 2, out
    assert "SET is not run by `dpsql query`" in out and "SHOW is not run by" in out, out
    assert 'set them as options: `dpsql query --epsilon 2 "SELECT ..."`' in out, out
    assert "connect psql to `dpsql serve`" in out, out
    assert "│ 1 │" in out, out

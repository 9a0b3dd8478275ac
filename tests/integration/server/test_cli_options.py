"""Options go where a user writes them (issue #20): `dpsql budget show --policy ...` as the README
writes it, and before the command as docs/budget.md does; `dpsql check --policy ...` too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from dpsql.demo import POLICY
from tests.helpers import ROOT


def _dpsql(*words: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSQL_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "dpsql", *words], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_budget_options_before_or_after_the_command(make_db: Callable[[str], str]) -> None:
    ledger = make_db("cli_ledger")
    for words in (
        ("budget", "show", "--policy", str(POLICY), "--ledger", ledger),
        ("budget", "--policy", str(POLICY), "--ledger", ledger, "show"),
        ("budget", "--policy", str(POLICY), "show", "--ledger", ledger, "--analyst", "analyst"),
    ):
        res = _dpsql(*words)
        assert res.returncode == 0, (words, res.stderr[-2000:])
        assert "analyst" in res.stdout
    res = _dpsql("budget", "show", "--ledger", ledger)
    assert res.returncode == 1 and "no policy file given" in res.stdout + res.stderr


def test_check_takes_the_policy_either_way() -> None:
    for words in (("check", str(POLICY)), ("check", "--policy", str(POLICY))):
        res = _dpsql(*words)
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

"""A release checks what no data decides before it charges anything: the ``release`` extra's
modules and a writable output directory (was: without pyarrow, ``dpsql release histogram``
charged epsilon 1, then printed a ModuleNotFoundError traceback; twice, charged twice).

The missing module is simulated in a subprocess (``sys.modules['pyarrow'] = None``, as Python
treats a module that cannot be imported); real CLI, real PostgreSQL (demo data), a ledger of its
own; deterministic (exit status, words, and the ledger's releases: none).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.helpers import ROOT

RUN = (
    "import sys; sys.modules['{module}'] = None; "
    "from dpsql.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _releases(ledger: str) -> int:
    with psycopg.connect(ledger) as conn:
        exists = conn.execute("SELECT to_regclass('dpsql.release') IS NOT NULL").fetchone()
        if exists is None or not exists[0]:
            return 0
        row = conn.execute("SELECT count(*) FROM dpsql.release").fetchone()
        return int(row[0]) if row else 0


def _argv(demo_dsn: str, ledger: str, out: Path) -> list[str]:
    from dpsql.demo import POLICY

    return ["release", "histogram", "--policy", str(POLICY), "--upstream", demo_dsn,
            "--ledger", ledger, "--table", "pums", "--columns", "sex,educ",
            "--rows-per-unit", "4", "--cells-per-unit", "4",
            "--epsilon", "1", "--out", str(out), "--no-progress"]  # fmt: skip


@pytest.mark.parametrize("module", ["pyarrow", "matplotlib"])
def test_a_missing_extra_is_named_before_any_charge(
    demo_dsn: str, make_db: Callable[[str], str], tmp_path: Path, module: str
) -> None:
    ledger = make_db("release_preflight")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):  # again: still nothing charged
        got = subprocess.run(
            [sys.executable, "-c", RUN.format(module=module), *_argv(demo_dsn, ledger, tmp_path)],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert got.returncode == 1, got.stderr
        assert "Traceback" not in got.stderr, got.stderr
        assert f"needs {module}" in got.stderr and "pip install 'dpsql[release]'" in got.stderr
        assert _releases(ledger) == 0


def test_an_unwritable_output_directory_is_refused_before_any_charge(
    demo_dsn: str, make_db: Callable[[str], str], tmp_path: Path
) -> None:
    from dpsql.cli import main

    ledger = make_db("release_preflight_out")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(_argv(demo_dsn, ledger, blocker / "out")) == 1  # a file in the path
    assert _releases(ledger) == 0


@pytest.mark.parametrize(
    ("analyst", "words"),
    [
        (None, "22023"),  # several analysts, none given
        ("alise", "42704"),  # not one of the policy's
    ],
)
def test_the_analyst_is_one_of_the_policy_before_any_charge(
    demo_dsn: str,
    make_db: Callable[[str], str],
    make_policy: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    analyst: str | None,
    words: str,
) -> None:
    """newcomer22 #7: without --analyst the release charged 'analyst' and, that name not in the
    policy, refused with 53400 'add analysts.analyst.budget to the policy' (a budget error for a
    missing option). Now a policy with several analysts wants --analyst (or DPSQL_ANALYST), a
    name it lacks is 42704 with the closest one; both before any charge, naming the analysts."""
    from dpsql.cli import main
    from dpsql.demo import POLICY

    monkeypatch.delenv("DPSQL_ANALYST", raising=False)
    base = yaml.safe_load(Path(POLICY).read_text())
    two = {n: base["analysts"]["analyst"] for n in ("alice", "bob")}
    pf = make_policy("two_analysts", base=base, analysts=two)
    ledger = make_db("release_analyst")
    argv = _argv(demo_dsn, ledger, tmp_path / "out")
    argv[argv.index("--policy") + 1] = str(pf.path)
    if analyst is not None:
        argv += ["--analyst", analyst]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert words in err and "alice, bob" in err, err
    assert "53400" not in err and "nothing was charged" in err
    if analyst is not None:
        assert "did you mean --analyst alice?" in err, err
    assert _releases(ledger) == 0

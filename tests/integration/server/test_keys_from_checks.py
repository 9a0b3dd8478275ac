"""A ``keys_from`` the upstream lacks is said by ``dpsql check --upstream`` and by ``dpsql
serve``'s checks before listening, with the closest name the upstream has (newcomer22 #24:
``keys_from: public.region.code`` passed both; analysts then got 42P01 for a table they never
wrote). Real PostgreSQL (the demo data), the real CLI in process; deterministic words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.cli import main
from dpsql.demo import POLICY
from dpsql.policy import load_policy
from dpsql.server.startup_checks import startup_problems


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("keys_from: public.regions.code", "keys_from: public.regions.cod",
         "column public.regions.cod named in the policy (the keys_from of public.purchases.region)"
         " does not exist upstream (did you mean code?)"),
        ("public.regions", "public.region",
         "table public.region named in the policy does not exist upstream (did you mean "
         "public.regions?)"),
    ],
)  # fmt: skip
def test_a_missing_keys_table_or_column_stops_check_and_serve(
    demo_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    words: str,
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.read_text().replace(old, new))
    fatal = [p.text for p in startup_problems(load_policy(path), demo_dsn, None) if p.fatal]
    assert fatal == [words]
    assert main(["check", str(path), "--upstream", demo_dsn]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "(did you mean " in out and "does not exist upstream" in out, out

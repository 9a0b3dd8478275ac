"""A ``keys_from`` the upstream lacks is said by ``dpsql check --upstream`` and by ``dpsql
serve``'s checks before listening, with the closest name the upstream has (newcomer22 #24:
``keys_from: public.region.code`` passed both; analysts then got 42P01 for a table they never
wrote). Real PostgreSQL (the demo data), the real CLI in process; deterministic words.
"""

from __future__ import annotations

import pytest

from dpsql.cli import main
from dpsql.policy import load_policy
from dpsql.server.startup_checks import startup_problems
from tests.policies import PolicyMaker, demo_table


@pytest.mark.parametrize(
    ("public_table", "keys_from", "words"),
    [
        ("public.regions", "public.regions.cod",
         "column public.regions.cod named in the policy (the keys_from of public.purchases.region)"
         " does not exist upstream (did you mean code?)"),
        ("public.region", "public.region.code",
         "table public.region named in the policy does not exist upstream (did you mean "
         "public.regions?)"),
    ],
)  # fmt: skip
def test_a_missing_keys_table_or_column_stops_check_and_serve(
    demo_dsn: str,
    make_policy: PolicyMaker,
    capsys: pytest.CaptureFixture[str],
    public_table: str,
    keys_from: str,
    words: str,
) -> None:
    region = {"type": "text", "keys_from": keys_from}
    purchases = demo_table("public.purchases", {"region": region})
    path = make_policy(
        "keys", add_tables={"public.purchases": purchases}, public_tables=[public_table]
    ).path
    fatal = [p.text for p in startup_problems(load_policy(path), demo_dsn, None) if p.fatal]
    assert fatal == [words]
    assert main(["check", str(path), "--upstream", demo_dsn]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "(did you mean " in out and "does not exist upstream" in out, out

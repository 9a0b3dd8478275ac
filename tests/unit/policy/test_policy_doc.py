"""docs/policy.md describes every key of the policy file (issue #20): each field of each policy
model appears as a `key` in a table row of its page, so a new key can't go undocumented."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from dpsql.policy import model, settings, tables

DOC = Path(__file__).resolve().parents[3] / "docs" / "policy.md"
MODELS: tuple[type[BaseModel], ...] = (
    model.Policy, model.Defaults, tables.PrivateTable, tables.Column, model.Analyst, model.Budget,
    settings.Timing, settings.ServerSettings,
)  # fmt: skip


def test_every_policy_key_is_documented() -> None:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `")]
    documented = {k for line in rows for k in re.findall(r"`([a-z_]+)`", line.split("|")[1])}
    missing = sorted(
        f"{m.__name__}.{name}" for m in MODELS for name in m.model_fields if name not in documented
    )
    assert not missing, f"not in docs/policy.md: {missing}"


def test_the_example_loads(tmp_path: Path) -> None:
    from dpsql.policy import load_policy

    (example,) = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    path = tmp_path / "policy.yaml"
    path.write_text(example.replace('"SCRAM-SHA-256$4096:..."', "null"))
    policy = load_policy(str(path))
    assert "public.purchases" in policy.tables and policy.analysts["alice"].deny

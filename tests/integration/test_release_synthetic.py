"""Synthetic data (MST + Private-PGM) from a 1M-row table in a real PostgreSQL."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.cli import main
from dpsql.errors import InvalidParameter, PrivacyViolation
from dpsql.release.synthetic import run_synthetic
from tests.integration import release_support

COLUMNS = ["age", "sex", "educ", "income", "region", "employed"]


@pytest.fixture(scope="module")
def people(make_db: Callable[[str], str]) -> str:
    return release_support.people_dsn(make_db)


@pytest.fixture(scope="module")
def released(people: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One release through the CLI: (written metadata, quality report JSON, base dir, budgets)."""
    pol = release_support.policy()
    base = tmp_path_factory.mktemp("synthetic")
    (base / "policy.yaml").write_text(release_support.POLICY)
    rc = main(
        [
            "release", "synthetic", "--policy", str(base / "policy.yaml"), "--upstream", people,
            "--ledger", people, "--table", "people", "--columns", ",".join(COLUMNS),
            "--epsilon", "1", "--delta", "1e-6", "--out", str(base / "out"), "--analyst", "owner",
            "--to-table", "released.people_synth", "--replace", "--iters", "300",
            "--quality-report", str(base / "private" / "quality.json"), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    meta = json.loads((base / "out" / "synthetic.json").read_text())
    quality = json.loads((base / "private" / "quality.json").read_text())
    with Ledger.open(people, pol) as ledger:
        spent = ledger.remaining("owner")
    return meta, quality, base, spent


def test_outputs_and_schema(released, people: str) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    meta, _, base, _ = released
    out = base / "out"
    table = pq.read_table(out / "synthetic.parquet")
    assert table.column_names == COLUMNS
    assert table.num_rows == meta["rows"]
    # about as many rows as bounded units' rows (R = 2 per unit: ~ 200k units)
    assert 200_000 < table.num_rows < 600_000
    ages = table.column("age").to_pylist()
    assert all(isinstance(a, int) and 0 <= a <= 99 for a in ages[:1000])
    assert set(table.column("sex").to_pylist()) <= {"F", "M"}
    assert set(table.column("employed").to_pylist()) <= {True, False}
    assert meta["privacy"]["epsilon"] == 1.0 and meta["privacy"]["delta"] == 1e-6
    assert len(meta["selected_pairs"]) == len(COLUMNS) - 1
    assert (out / "synthetic.png").read_bytes()[:4] == b"\x89PNG"
    with psycopg.connect(people) as conn:
        types = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'released' AND table_name = 'people_synth'"
            ).fetchall()
        )
        n = conn.execute("SELECT count(*) FROM released.people_synth").fetchone()[0]  # type: ignore[index]
    assert types == {
        "age": "bigint", "sex": "text", "educ": "bigint", "income": "double precision",
        "region": "text", "employed": "boolean",
    }  # fmt: skip
    assert n == meta["rows"]


def test_charged_to_the_ledger(released) -> None:  # type: ignore[no-untyped-def]
    meta, _, _, spent = released
    owner = next(b for b in spent if b.budget == "analyst")
    assert owner.releases >= 1 and Fraction(owner.rho_spent) > 0
    assert meta["privacy"]["ledger_release_id"] is not None


def test_quality_report_is_owner_only_and_beats_the_baseline(released) -> None:  # type: ignore[no-untyped-def]
    _, quality, base, _ = released
    q = base / "private" / "quality.json"
    assert stat.S_IMODE(os.stat(q).st_mode) == 0o600
    assert not list((base / "out").glob("*quality*"))
    assert "owner only" in quality["warning"]
    s = quality["summary"]
    # the table has strong age-educ-income-employed dependencies that the independent baseline
    # misses and MST captures
    assert s["mean_2way_tvd_synthetic"] < s["mean_2way_tvd_baseline"]
    assert s["mean_1way_tvd_synthetic"] < 0.05


def test_refusals(people: str, tmp_path: Path) -> None:
    pol = release_support.policy()
    common = {"table": "people", "epsilon": 1.0, "out_dir": tmp_path / "o", "progress": False}
    with pytest.raises(PrivacyViolation, match="no declared keys or bounds"):
        run_synthetic(pol, people, columns=["age", "note"], **common)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="delta > 0"):
        run_synthetic(pol, people, columns=["age"], delta=0.0, **common)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="inside the release directory"):
        run_synthetic(
            pol,
            people,
            columns=["age"],
            quality_path=tmp_path / "o" / "q.json",
            **common,  # type: ignore[arg-type]
        )
    with pytest.raises(PrivacyViolation, match="private table"):
        run_synthetic(pol, people, columns=["age"], to_table="people", **common)  # type: ignore[arg-type]
    assert not (tmp_path / "o").exists()

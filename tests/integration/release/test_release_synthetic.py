"""Synthetic data (AIM by default, MST; Private-PGM) from a 1M-row table in a real PostgreSQL.

Statistical assertions state their property and false-failure probability (below 1e-6 for the
module: each is at most ALPHA) and come with a deliberately broken twin that must fail:

- the number of synthetic rows is the bounded count within the noise's tail bound (twin: the
  count without contribution bounding);
- on (with overwhelming probability) exact measurements, MST's tree captures the planted
  dependencies and its synthetic rows beat the independent baseline on 2-way marginals by a
  factor 2 (twin: the same pipeline without the 2-way measurements).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.cli import main
from dpsql.errors import InvalidParameter, PrivacyViolation
from dpsql.release.jobs import Job, resolve
from dpsql.release.mst import plan_mst, run_mst
from dpsql.release.quality import quality_report
from dpsql.release.source import Bound, bounded_cells
from dpsql.release.synthesis import fit_result, sample_result
from dpsql.release.synthetic import run_synthetic
from tests.integration.release import release_support
from tests.policies import PolicyMaker

# needs mbi/jax (the synthetic extra; CI runs these in a venv of their own)
pytestmark = pytest.mark.synthetic

COLUMNS = ["age", "sex", "educ", "income", "region", "employed"]
ALPHA = 1e-7  # false-failure probability of each statistical assertion (three in this module)
# The table's planted dependencies (release_support.SCHEMA): educ from age, income from educ,
# employed from age; sex and region are drawn independently of everything.
PLANTED = {("age", "educ"), ("educ", "income"), ("age", "employed")}


@pytest.fixture(scope="module")
def people(make_db: Callable[[str], str]) -> str:
    return release_support.people_dsn(make_db)


@pytest.fixture(scope="module")
def released(  # type: ignore[no-untyped-def]
    people: str, tmp_path_factory: pytest.TempPathFactory, make_policy: PolicyMaker
):
    """One release through the CLI: (written metadata, quality report JSON, base dir, budgets)."""
    pol = release_support.policy()
    base = tmp_path_factory.mktemp("synthetic")
    policy_file = make_policy("release", base=release_support.POLICY_DOC).path
    rc = main(
        [
            "release", "synthetic", "--policy", str(policy_file), "--upstream", people,
            "--ledger", people, "--table", "people", "--columns", ",".join(COLUMNS),
            "--epsilon", "1", "--delta", "1e-6", "--out", str(base / "out"), "--analyst", "owner",
            "--to-table", "released.people_synth", "--replace", "--iters", "300",
            "--synthesizer", "mst",
            "--quality-report", str(base / "private" / "quality.json"), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    meta = json.loads((base / "out" / "synthetic.json").read_text())
    quality = json.loads((base / "private" / "quality.json").read_text())
    with Ledger.open(people, pol) as ledger:
        spent = ledger.remaining("owner")
    return meta, quality, base, spent


@pytest.fixture(scope="module")
def cells(people: str):  # type: ignore[no-untyped-def]
    """(source, bound, bounded cells idx, their counts n) as the release reads them, no noise."""
    src = resolve(release_support.policy().for_analyst("owner"), people, "people", COLUMNS, None)
    bound = Bound.for_source(src, "per_unit")
    idx, n = bounded_cells(people, src, bound)
    return src, bound, idx, n


def _one(dsn: str, q: str) -> Any:
    with psycopg.connect(dsn) as conn:
        return conn.execute(q).fetchone()[0]  # type: ignore[index]


def test_outputs_and_schema(released, people: str) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    meta, _, base, _ = released
    out = base / "out"
    table = pq.read_table(out / "synthetic.parquet")
    assert table.column_names == COLUMNS
    assert table.num_rows == meta["rows"]
    ages = table.column("age").to_pylist()
    assert all(isinstance(a, int) and 0 <= a <= 99 for a in ages[:1000])
    assert set(table.column("sex").to_pylist()) <= {"F", "M"}
    assert set(table.column("employed").to_pylist()) <= {True, False}
    assert meta["privacy"]["epsilon"] == 1.0 and meta["privacy"]["delta"] == 1e-6
    assert meta["privacy"]["synthesizer"] == "mst"
    assert len(meta["selected"]) == len(COLUMNS) - 1
    assert meta["published"] in ("model", "baseline") and meta["comparison"]["pairs"] == 15
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


def _total_half_width(meta: dict[str, Any], shape: tuple[int, ...]) -> float:
    """t with P(|rows - N| > t) <= ALPHA, N the bounded row count (exact, no noise).

    The rows sampled are round(T), T Private-PGM's total: a weighted average (weights >= 0, sum 1;
    mbi.estimation.minimum_variance_unbiased_total) of the M noisy marginals' sums, each N + E_m
    with E_m the sum of the k_m cells' independent discrete Gaussian noises. A discrete Gaussian
    of parameter sigma² is sigma²-sub-Gaussian (Canonne, Kamath & Steinke 2020, Sec. 2: its moment
    generating function is at most the continuous Gaussian's), so E_m is k_m sigma_m²-sub-Gaussian
    and P(|E_m| > t_m) <= 2 exp(-t_m² / (2 k_m sigma_m²)) = ALPHA / M for t_m below; then
    |T - N| <= max_m |E_m| outside an event of probability ALPHA, and rounding adds 1/2.
    """
    index = {name: i for i, name in enumerate(COLUMNS)}
    ms = meta["measurements"]
    t = 0.0
    for m in ms:
        k = math.prod(shape[index[c]] for c in m["marginal"])
        t = max(t, m["noise_std"] * math.sqrt(2 * k * math.log(2 * len(ms) / ALPHA)))
    return t + 0.5


def test_row_count_is_the_bounded_count_within_the_noise(released, cells, people: str) -> None:  # type: ignore[no-untyped-def]
    """Property: rows = N ± t (see _total_half_width; false failure <= ALPHA).

    N = sum over units of min(rows, R) whatever rows the salted hash keeps; t is about 3,600
    rows here (sigma about 45, 160 cells), N about 391,000. Twin: without contribution bounding the
    count is the table's 1,010,000 rows, which the same check must refuse.
    """
    meta = released[0]
    src, bound, _, n = cells
    exact = _one(
        people,
        f"SELECT sum(least(c, {bound.rows})) FROM (SELECT count(*) c FROM people GROUP BY pid) u",
    )
    assert int(n.sum()) == exact
    t = _total_half_width(meta, src.shape)
    assert abs(meta["rows"] - exact) <= t, (meta["rows"], exact, t)
    unbounded = _one(people, "SELECT count(*) FROM people")
    assert abs(unbounded - exact) > t


def test_charged_to_the_ledger(released) -> None:  # type: ignore[no-untyped-def]
    meta, _, _, spent = released
    owner = next(b for b in spent if b.budget == "analyst")
    assert owner.releases >= 1 and Fraction(owner.rho_spent) > 0
    assert meta["privacy"]["ledger_release_id"] is not None


def test_quality_report_is_owner_only(released) -> None:  # type: ignore[no-untyped-def]
    _, quality, base, _ = released
    q = base / "private" / "quality.json"
    assert stat.S_IMODE(os.stat(q).st_mode) == 0o600
    assert not list((base / "out").glob("*quality*"))
    assert "owner only" in quality["warning"]
    assert set(quality["one_way"]) == set(COLUMNS)
    assert len(quality["two_way"]) == len(COLUMNS) * (len(COLUMNS) - 1) // 2
    assert all(0 <= v <= 1 for v in quality["summary"].values())


# rho 10^4: the 1-way and 2-way marginals get sigma² <= 0.0036 (R = 2), so each cell's noise is 0
# except with probability <= 2 exp(-1 / (2 * 0.0036)) < 1e-60 (sub-Gaussian tail, as above);
# under 1,000 cells: the measurements are exact except with probability < 1e-57. Selection runs
# with epsilon_s = 73: a candidate g rows below the best score is picked with probability
# <= exp(-epsilon_s g / (2 R)) = exp(-18 g) relative to it.
EXACT_RHO = Fraction(10**4)
SEED = 20261122  # mbi's sampler (post-processing, not noise) draws from numpy's global generator


def _synthesize(cells, two_way: bool = True):  # type: ignore[no-untyped-def]
    """MST on exact measurements -> (selected pairs by name, quality summary vs the real cells)."""
    src, bound, idx, n = cells
    names = [a.name for a in src.axes]
    plan = plan_mst(names, src.shape, EXACT_RHO, bound.rows)
    if not two_way:
        plan = dataclasses.replace(plan, two_way=None)  # broken: 1-way marginals only
    result = run_mst(plan, idx, n)
    np.random.seed(SEED)
    synth = sample_result(result, fit_result(result, 300), None)
    report = quality_report(names, src.shape, idx, n, synth, [m.noisy for m in result.one_way])
    pairs = {tuple(sorted((names[i], names[j]), key=COLUMNS.index)) for i, j in result.selected}
    return pairs, report.summary()


def test_mst_beats_the_independent_baseline(cells) -> None:  # type: ignore[no-untyped-def]
    """Property: MST's synthetic 2-way marginals are at least twice as close (mean TVD) to the real
    ones as the independent baseline's, and its 1-way marginals are within TVD 0.02.

    False failure: (1) the measurements are exact (above). (2) The tree: a pair's score is the L1
    distance of its real 2-way marginal from independence; educ-income, age-educ and age-employed
    score about 480,000, 400,000 and 216,000 rows, and in each of Kruskal's first three rounds the
    best candidate is one of them, ahead of the next (age-income 335,000, educ-employed 181,000)
    by more than 35,000 rows: another is picked with probability <= 15 exp(-18 * 35,000). The
    last two edges attach sex and region, independent of everything: any choice is as good.
    (3) Private-PGM is deterministic given exact measurements (up to floating point). (4)
    Sampling: mbi's randomized rounding draws each column by rounding counts within the rows that
    share its parent's value and shuffling them; moving one of the N ~ 391,000 rows changes a mean
    TVD by at most 1/N and a transposition by 2/N, so (bounded differences for independent
    shuffles, McDiarmid 1998) a mean moves from its expectation by more than t with probability
    <= exp(-N t² / 8): below 1e-19 for t = 0.03.
    Measured over repeated runs: synthetic 0.037, baseline 0.152 (a threshold of 0.076), 1-way
    0.0026. Twin: without the 2-way measurements (an independent model) the synthetic 2-way TVD is
    the baseline's, 0.154 > 0.076 (passing would need a move of 0.077: < 1e-100).
    """
    pairs, s = _synthesize(cells)
    assert pairs >= PLANTED, pairs
    assert s["mean_2way_tvd_synthetic"] < 0.5 * s["mean_2way_tvd_baseline"], s
    assert s["mean_1way_tvd_synthetic"] < 0.02, s
    pairs, s = _synthesize(cells, two_way=False)
    assert not pairs
    assert s["mean_2way_tvd_synthetic"] >= 0.5 * s["mean_2way_tvd_baseline"], s


def test_refusals(people: str, tmp_path: Path) -> None:
    pol = release_support.policy()
    job = Job(pol, people, table="people", epsilon=1.0, out_dir=tmp_path / "o", progress=False)
    with pytest.raises(PrivacyViolation, match="no declared keys or bounds"):
        run_synthetic(job, ["age", "note"])
    with pytest.raises(InvalidParameter, match="delta > 0"):
        run_synthetic(dataclasses.replace(job, delta=0.0), ["age"])
    with pytest.raises(InvalidParameter, match="inside the release directory"):
        run_synthetic(job, ["age"], quality_path=tmp_path / "o" / "q.json")
    with pytest.raises(PrivacyViolation, match="private table"):
        run_synthetic(dataclasses.replace(job, to_table="people"), ["age"])
    assert not (tmp_path / "o").exists()

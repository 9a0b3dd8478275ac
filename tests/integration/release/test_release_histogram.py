"""DP histograms on a 1M-row table in a real PostgreSQL: bounding, noise scale, post-processing, CLI.

Statistical tests state their property and false-failure probability (<= 1e-6) and come with a
deliberately broken mechanism that must fail.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import psycopg
import pytest
from scipy import stats

from dpsql.budget.ledger import Ledger
from dpsql.cli import main
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.errors import BudgetExhausted, InvalidParameter
from dpsql.release.histogram import LevelPlan, measure, plan_histogram, postprocess
from dpsql.release.jobs import Job, resolve, run_histogram
from dpsql.release.source import Bound, bounded_counts
from tests.integration.release import release_support
from tests.policies import PolicyMaker, build_policy, demo_doc

ALPHA = 1e-7  # each statistical assertion's false-failure probability (a few: < 1e-6 in all)


@pytest.fixture(scope="module")
def people(make_db: Callable[[str], str]) -> str:
    return release_support.people_dsn(make_db)


@pytest.fixture(scope="module")
def pol():  # type: ignore[no-untyped-def]
    return release_support.policy()


@pytest.fixture(scope="module")
def educ_region(people: str, pol):  # type: ignore[no-untyped-def]
    """(source, bounded counts) over educ x region (80 cells), counted once for the module."""
    src = resolve(pol, people, "people", ["educ", "region"], None)
    return src, bounded_counts(people, src, Bound.for_source(src, "per_cell"))


@pytest.fixture(scope="module")
def age_educ(people: str, pol):  # type: ignore[no-untyped-def]
    """(source, bounded counts) over age (bins of 5) x educ: 320 cells, many empty."""
    src = resolve(pol, people, "people", ["age", "educ"], {"age": 5.0})
    return src, bounded_counts(people, src, Bound.for_source(src, "per_cell"))


def _one(dsn: str, q: str) -> list[tuple]:  # type: ignore[type-arg]
    with psycopg.connect(dsn) as conn:
        return conn.execute(q).fetchall()


def test_table_has_a_million_rows(people: str) -> None:
    assert _one(people, "SELECT count(*) FROM people")[0][0] >= 1_000_000


def test_bounded_counts_equal_the_bounded_aggregate(people: str, pol) -> None:  # type: ignore[no-untyped-def]
    """With noise off: each unit counts min(rows, R) in each of its cells (G >= cells here)."""
    src = resolve(pol, people, "people", ["sex"], None)
    got = bounded_counts(people, src, Bound.for_source(src, "per_cell"))
    rows = _one(
        people,
        "SELECT sex, sum(LEAST(n, 2)) FROM (SELECT pid, sex, count(*) n FROM people "
        "GROUP BY pid, sex) s GROUP BY sex ORDER BY sex",
    )
    assert got.tolist() == [int(n) for _, n in rows]


def test_heavy_units_touch_at_most_g_cells_with_r_rows(people: str, pol) -> None:  # type: ignore[no-untyped-def]
    with psycopg.connect(people, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS heavy AS SELECT * FROM people WHERE pid < 0")
    table = release_support.POLICY_DOC["tables"]["public.people"]
    hp = build_policy(base=release_support.POLICY_DOC, tables={"public.heavy": table})
    src = resolve(hp, people, "heavy", ["educ"], None)
    counts = bounded_counts(people, src, Bound.for_source(src, "per_cell"))
    # 5 units with 125 rows in each of 16 cells: each keeps 3 cells x 2 rows.
    assert counts.sum() == 5 * 3 * 2
    assert counts.max() <= 5 * 2


def _pmf(kind: str, param: float, ks: np.ndarray) -> np.ndarray:
    if kind == "laplace":
        logp = -np.abs(ks) / param
    else:
        logp = -(ks.astype(np.float64) ** 2) / (2 * param)
    p = np.exp(logp - logp.max())
    return p / p.sum()


def _gof_pvalue(noise: np.ndarray, kind: str, param: float) -> float:
    """Chi-square goodness of fit of integer noise to the stated discrete distribution."""
    span = int(60 * math.sqrt(param) if kind == "gaussian" else 60 * param) + 10
    ks = np.arange(-span, span + 1)
    expected = _pmf(kind, param, ks) * noise.size
    observed = np.bincount(np.clip(noise, -span, span) + span, minlength=ks.size)
    keep = expected >= 5
    lo, hi = np.flatnonzero(keep)[[0, -1]]
    obs = np.concatenate([[observed[:lo].sum()], observed[lo : hi + 1], [observed[hi + 1 :].sum()]])
    exp = np.concatenate([[expected[:lo].sum()], expected[lo : hi + 1], [expected[hi + 1 :].sum()]])
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


def _noise(plan, true: np.ndarray, reps: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = [measure(plan, true)["cells"] - true for _ in range(reps)]
    return np.rint(np.concatenate([o.reshape(-1) for o in out])).astype(np.int64)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_noise_scale_is_as_stated(educ_region, delta: float) -> None:  # type: ignore[no-untyped-def]
    """Property: cell noise follows the stated discrete Laplace (scale) / Gaussian (sigma²).

    Chi-square goodness of fit over 40,000 draws (bins pooled to expected counts >= 5); a correct
    sampler fails with probability ALPHA (the chi-square approximation of the statistic's null
    distribution). A mechanism with half the sensitivity (a sensitivity bug) must be rejected: its
    noise has half the scale, and its p-value is 0 to double precision.
    """
    src, counts = educ_region
    plan = plan_histogram(
        src, Bound.for_source(src, "per_cell"), Fraction(1), Fraction(repr(delta))
    )
    true = counts.astype(np.float64)
    mech = plan.cells_level.mechanism
    if isinstance(mech, Laplace):
        kind, param = "laplace", float(mech.noise_scale)
        assert mech.sensitivity == 3 * 2  # G R
        broken = Laplace(mech.sensitivity / 2, mech.epsilon)
    else:
        assert isinstance(mech, Gaussian)
        kind, param = "gaussian", float(mech.noise_sigma2)
        assert mech.sensitivity**2 >= 3 * 4  # (sqrt(G) R)²
        broken = Gaussian(mech.sensitivity / 2, mech.rho)
    assert _gof_pvalue(_noise(plan, true, 500), kind, param) > ALPHA
    bad = dataclasses.replace(plan, levels=(LevelPlan("cells", (0, 1), broken),))
    assert _gof_pvalue(_noise(bad, true, 500), kind, param) < ALPHA


@pytest.mark.parametrize("levels", [("cells",), ("total", "marginals", "cells")])
def test_postprocessing_never_increases_error_on_average(age_educ, levels) -> None:  # type: ignore[no-untyped-def]
    """Property: E||post - true||² <= E||noisy cells - true||² (the same release's cells).

    On a sparse table (ages 0-17 and 88-99 are empty) the mean improvement is many standard
    errors above 0; the test needs a paired z above 5 (chance below 1e-7 under the property's
    alternative of no improvement). Twin: a sign bug in the correction must fail.
    """
    src, true = age_educ
    plan = plan_histogram(
        src, Bound.for_source(src, "per_cell"), Fraction(1, 2), Fraction(0), levels
    )
    raw_err, post_err, broken_err = [], [], []
    for _ in range(60):
        noisy = measure(plan, true)
        post = postprocess(plan, noisy)
        assert post.min() >= 0 and post.dtype.kind == "i"
        raw_err.append(float(((noisy["cells"] - true) ** 2).sum()))
        post_err.append(float(((post - true) ** 2).sum()))
        # the twin: the same correction applied with the wrong sign (a sign bug)
        broken_err.append(float(((2 * noisy["cells"] - post - true) ** 2).sum()))
    # measured over 20 x 60 releases: z = 45 +- 4 (cells) and 48 +- 4.5 (all levels), min 38;
    # falling to 5 is a ~9-standard-deviation event (false failure far below 1e-7)
    z = _paired_z(raw_err, post_err)
    assert z > 5, z
    # With a = noisy - true and c = noisy - post, the right correction reduces the error by
    # 2 a.c - |c|² per release, the wrong one by -2 a.c - |c|² <= minus that: its mean reduction
    # is negative whenever the right one's is positive (as z > 5 says), so the twin always fails.
    assert _paired_z(raw_err, broken_err) < 0


def _paired_z(raw_err: list[float], post_err: list[float]) -> float:
    """The mean error reduction over its standard error (releases are independent)."""
    d = np.array(raw_err) - np.array(post_err)
    return float(d.mean() / (d.std(ddof=1) / math.sqrt(d.size)))


def test_postprocessed_levels_are_consistent(educ_region) -> None:  # type: ignore[no-untyped-def]
    src, true = educ_region
    plan = plan_histogram(
        src, Bound.for_source(src, "per_cell"), Fraction(1), levels=("total", "marginals", "cells")
    )
    noisy = measure(plan, true)
    post = postprocess(plan, noisy)
    assert post.shape == (16, 5) and post.min() >= 0
    # The consistent total is close to the measured one (within the levels' 99.9% half-widths
    # summed, 666 here). 2,000 runs: |post.sum() - total| / hw had mean 0.018 and max 0.095; the
    # deviation is a small weighted mix of Laplace noises, so exceeding hw is beyond 1e-20.
    hw = sum(lv.mechanism.half_width(0.999) for lv in plan.levels)
    assert abs(post.sum() - float(noisy["total"])) <= hw


def test_cli_histogram_end_to_end(people: str, tmp_path: Path, make_policy: PolicyMaker) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    ledger_schema = "dpsql"
    rc = main(
        [
            "release", "histogram", "--policy", str(make_policy("release", base=release_support.POLICY_DOC).path), "--upstream", people,
            "--table", "people", "--columns", "income,region", "--bins", "income=20000",
            "--epsilon", "1", "--levels", "total,marginals,cells", "--out", str(out),
            "--to-table", "released.income_region", "--replace", "--analyst", "owner",
            "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    meta = json.loads((out / "histogram.json").read_text())
    assert meta["privacy"]["epsilon"] == 1.0 and meta["privacy"]["mechanism"] == "laplace"
    assert meta["cells"] == 10 * 5 and meta["axes"][1]["keys"] == ["C", "E", "N", "S", "W"]
    assert {lv["level"] for lv in meta["levels"]} == {
        "total", "marginal:income", "marginal:region", "cells",
    }  # fmt: skip
    table = pq.read_table(out / "histogram.parquet")
    assert table.num_rows == 50 and min(table.column("count").to_pylist()) >= 0
    assert (out / "histogram.csv").read_text().startswith('"income","region","count","error_95"')
    assert (out / "histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _one(people, "SELECT count(*), sum(count) FROM released.income_region")
    assert rows[0][0] == 50 and rows[0][1] == sum(table.column("count").to_pylist())
    spent = _one(
        people,
        f"SELECT epsilon_spent FROM {ledger_schema}.budget WHERE kind = 'analyst' AND name = 'owner'",
    )
    assert spent and Fraction(spent[0][0]) >= 1
    assert meta["privacy"]["ledger_release_id"] is not None


def test_budget_refusal_writes_nothing(people: str, pol, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ledger = Ledger.open(people, pol, schema="dpsql_refuse")
    try:
        with pytest.raises(BudgetExhausted) as e:
            job = Job(pol, people, table="people", epsilon=1.0, out_dir=tmp_path / "o",
                      analyst="poor", ledger=ledger, progress=False)  # fmt: skip
            run_histogram(job, ["sex"])
        assert e.value.sqlstate == "53400"
        assert not (tmp_path / "o").exists()
    finally:
        ledger.close()


def test_cli_on_the_demo(
    demo_dsn: str, make_db: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo policy (max_rows_per_unit and max_groups_per_unit: auto): keys_from a public
    table, G x R bounding of the heavy users with the numbers the owner gives; the CLI and the
    JSON say what a count counts."""
    from dpsql.demo import POLICY

    ledger = make_db("release_ledger")
    out = tmp_path / "demo"
    argv = ["release", "histogram", "--policy", str(POLICY), "--upstream", demo_dsn,
            "--ledger", ledger, "--table", "purchases", "--columns", "region,category",
            "--rows-per-unit", "16", "--cells-per-unit", "5", "--analyst", "analyst",
            "--epsilon", "1", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    meta = json.loads((out / "histogram.json").read_text())
    assert meta["axes"][0]["keys"] == ["C", "E", "N", "S", "W"]  # from public.regions
    assert meta["privacy"]["contribution_bound"] == {
        "rows_per_unit_per_cell": 16, "cells_per_unit": 5,
    }  # fmt: skip
    assert meta["levels"][0]["sensitivity"] == str(16 * 5)
    counts = (
        "rows of public.purchases, at most 16 rows of each user_id in a cell and in at most 5 "
        "cells per user_id (the others left out)"
    )
    assert meta["privacy"]["counts"] == counts
    assert f"count = {counts}" in " ".join(capsys.readouterr().out.split())
    assert _one(ledger, "SELECT count(*) FROM dpsql.release WHERE state = 'committed'")[0][0] == 1


def test_auto_bounds_are_refused_with_words_asking_for_numbers(
    demo_dsn: str, make_db: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """newcomer21 #29: the demo policy's ``auto`` bounds were 1 in a release, so the sex x educ
    histogram published 88 as the "count" of a cell with 216 rows (the pid with a row there),
    with an error_95 of 6.5 and nothing saying so. A release now asks for the numbers (22023,
    before any budget is charged, nothing written); a number for a bound the policy fixes is
    refused too."""
    from dpsql.demo import POLICY

    ledger = make_db("release_auto")
    out = tmp_path / "auto"
    argv = ["release", "histogram", "--policy", str(POLICY), "--upstream", demo_dsn,
            "--ledger", ledger, "--table", "pums", "--columns", "sex,educ", "--analyst", "analyst",
            "--epsilon", "1", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert (
        "ERROR 22023: public.pums has max_rows_per_unit: auto and max_groups_per_unit: auto" in said
    )
    assert "R = 1 counts pid values, not rows" in said
    assert "--rows-per-unit R --cells-per-unit G" in said
    assert main([*argv, "--rows-per-unit", "4"]) == 1  # G still auto
    assert "max_groups_per_unit: auto" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    assert _one(ledger, "SELECT count(*) FROM dpsql.release")[0][0] == 0


def test_a_declared_total_releases_auto_bounds_at_one_cap_per_unit(
    demo_dsn: str,
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With ``max_rows_per_unit_total: 4`` declared for the demo's pums (each pid has 1-4 rows;
    R and G left ``auto``) a histogram is released without numbers on the command line (it was
    refused, 22023, as in the test above): each pid keeps at most 4 rows over all its cells, so
    the cell vector moves by at most 4 (the noise's sensitivity; R = G = 4 would be 16), every
    row is counted (the bounded counts are the table's, deterministic), and the JSON and CLI say
    what a count counts."""
    pums = {**demo_doc()["tables"]["public.pums"], "max_rows_per_unit_total": 4}
    pf = make_policy("total", add_tables={"public.pums": pums})
    ledger = make_db("release_total")
    out = tmp_path / "total"
    argv = ["release", "histogram", "--policy", str(pf.path), "--upstream", demo_dsn,
            "--ledger", ledger, "--table", "pums", "--columns", "sex,educ", "--analyst", "analyst",
            "--epsilon", "1", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    meta = json.loads((out / "histogram.json").read_text())
    assert meta["privacy"]["contribution_bound"] == {"rows_per_unit": 4}
    assert meta["levels"][0]["sensitivity"] == "4"
    counts = "rows of public.pums, at most 4 rows of each pid (the others left out)"
    assert meta["privacy"]["counts"] == counts
    assert f"count = {counts}" in " ".join(capsys.readouterr().out.split())
    src = resolve(pf.policy, demo_dsn, "pums", ["sex", "educ"], None)
    bound = Bound.for_source(src, "per_cell")
    assert (bound.mode, bound.rows, bound.cells) == ("per_unit", 4, 1)
    truth = _one(demo_dsn, "SELECT count(*) FROM pums WHERE sex IS NOT NULL AND educ IS NOT NULL")
    got = bounded_counts(demo_dsn, src, bound)
    assert int(got.sum()) == truth[0][0]  # nothing left out: no pid has more than 4 rows
    assert _one(ledger, "SELECT count(*) FROM dpsql.release WHERE state = 'committed'")[0][0] == 1


def test_a_number_for_a_fixed_bound_is_refused(people: str, pol, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = Job(pol, people, table="people", epsilon=1.0, out_dir=tmp_path / "o", progress=False,
              rows_per_unit=5)  # fmt: skip
    with pytest.raises(InvalidParameter) as e:
        job.source(["sex"])
    assert "max_rows_per_unit is not auto in the policy (2)" in e.value.message

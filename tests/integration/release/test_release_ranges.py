"""``dpsql release ranges`` end to end: the 1M-row ``people`` table, served through dpsql.

The release writes a table of consistent bin counts; declared in ``public_tables``, an analyst's
range query on it is answered by the engine as a public query (no budget).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.cli import main
from dpsql.engine import Engine
from dpsql.errors import InvalidParameter
from dpsql.release.hierarchy import leaf_operator, plan_tree
from dpsql.release.jobs import Job
from dpsql.release.ranges import run_ranges
from dpsql.session import SessionContext
from tests.integration.release import release_support
from tests.policies import PolicyMaker, build_policy

ALPHA = 1e-6  # Chebyshev on the noise: a tighter alpha would make the twin's margin thin


@pytest.fixture(scope="module")
def people(make_db: Callable[[str], str]) -> str:
    return release_support.people_dsn(make_db)


@pytest.fixture(scope="module")
def released(  # type: ignore[no-untyped-def]
    people: str, tmp_path_factory: pytest.TempPathFactory, make_policy: PolicyMaker
):
    base = tmp_path_factory.mktemp("ranges")
    policy_file = make_policy("release", base=release_support.POLICY_DOC).path
    rc = main(
        [
            "release", "ranges", "--policy", str(policy_file), "--upstream", people,
            "--ledger", people, "--table", "people", "--column", "age", "--bins", "age=1",
            "--epsilon", "1", "--out", str(base / "out"), "--analyst", "owner",
            "--to-table", "released.people_age_ranges", "--replace", "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    return json.loads((base / "out" / "ranges.json").read_text()), base


def _one(dsn: str, q: str) -> tuple:  # type: ignore[type-arg]
    with psycopg.connect(dsn) as conn:
        return conn.execute(q).fetchone()  # type: ignore[return-value]


def test_outputs_and_charge(released, people: str) -> None:  # type: ignore[no-untyped-def]
    meta, base = released
    assert meta["bins"] == 100 and meta["privacy"]["epsilon"] == 1.0
    e = meta["range_error"]
    assert e["rmse_over_all_ranges"] <= e["flat_histogram_rmse_over_all_ranges"] + 1e-9
    assert meta["privacy"]["mechanism"].startswith("flat")  # 100 bins: no tree beats flat
    assert (base / "out" / "ranges.parquet").exists()
    n, first, last = _one(
        people,
        "SELECT count(*), min(label), (SELECT cumulative FROM released.people_age_ranges "
        "WHERE bin = 99) FROM released.people_age_ranges",
    )
    total = _one(people, "SELECT sum(count) FROM released.people_age_ranges")[0]
    assert n == 100 and first == "[0, 1)" and last == pytest.approx(total)
    with Ledger.open(people, release_support.policy()) as ledger:
        owner = next(b for b in ledger.remaining("owner") if b.budget == "analyst")
    assert owner.releases >= 1 and Fraction(owner.epsilon_spent) >= 1


def test_range_query_through_dpsql_is_free_and_accurate(released, people: str) -> None:
    """Property: the range 20 <= age <= 40 read through the engine (a public query: no budget) is
    the expected bounded count E within t_noise + t_choice, except with probability ALPHA.

    The release kept at most R = 2 rows per unit, chosen at random among the unit's rows (in or
    out of the range): unit u with c rows, c_in in range keeps k = min(c, 2), of which a
    hypergeometric number lands in range, mean k c_in / c, within [max(0, k - (c - c_in)),
    min(k, c_in)]; independent across units, so Hoeffding gives t_choice at ALPHA/2. The
    noise of the range estimate has variance node variance x ||L^T 1_range||² (the estimator is
    linear): Chebyshev gives t_noise at ALPHA/2. Twin: the unbounded count must be outside.
    """
    ranges = build_policy(
        base=release_support.POLICY_DOC, add_public_tables=["released.people_age_ranges"]
    )
    engine = Engine(ranges, people, pool_size=2)
    try:
        q = "SELECT sum(count) FROM released.people_age_ranges WHERE bin BETWEEN 20 AND 40"
        prepared = engine.prepare(q, "owner")
        assert prepared.kind == "public"  # a public table: answered without budget
        got = float(engine.execute(prepared, SessionContext(analyst="owner")).rows[0][0])
    finally:
        engine.close()
    mean, width2 = _one(
        people,
        "SELECT sum(least(c, 2)::float8 * c_in / c), sum(power(least(least(c, 2), c_in) - "
        "greatest(0, least(c, 2) - (c - c_in)), 2)) FROM (SELECT count(*) c, "
        "count(*) FILTER (WHERE age BETWEEN 20 AND 40) c_in FROM people GROUP BY pid) u",
    )
    t_choice = math.sqrt(float(width2) * math.log(4 / ALPHA) / 2)
    plan = plan_tree(100, Fraction(1), Fraction(0), 2)
    row = leaf_operator(plan)[20:41].sum(axis=0)
    t_noise = plan.mechanism.std * math.sqrt(float((row * row).sum())) / math.sqrt(ALPHA / 2)
    t = t_choice + t_noise
    assert abs(got - float(mean)) <= t, (got, mean, t)
    unbounded = _one(people, "SELECT count(*) FROM people WHERE age BETWEEN 20 AND 40")[0]
    assert abs(unbounded - float(mean)) > 2 * t, (unbounded, mean, t)


def test_refusals(people: str, tmp_path: Path) -> None:
    pol = release_support.policy()
    with pytest.raises(InvalidParameter, match="branching"):
        job = Job(pol, people, table="people", epsilon=1.0, out_dir=tmp_path / "o", progress=False)
        run_ranges(job, "age", branching=3)
    assert not (tmp_path / "o").exists()

"""Why a GROUP BY of declared keys is noisy, in its notice (newcomer23 #5).

``auto`` G over declared keys is their number: as far as the public policy says, one person
may be in every group, so each group's noise is sized for that (pums by educ: 16 keys, each
pid in one, 16x the noise one group per person needs). The bounds notice says so and what
fixes it (the data owner's max_groups_per_unit or max_rows_per_unit_total); an AVG that is
NULL in some groups says how ORDER BY ... DESC sorts them (first: PostgreSQL's NULLS FIRST).
Deterministic: the words, set without the data (G from the keys), whatever the noise.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.policy import load_policy
from dpsql.session import SessionContext

WHY = "each group's noise is sized for "


@pytest.fixture(scope="module")
def auto_engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    e = Engine(demo_policy_auto, demo_dsn, pool_size=2)
    yield e
    e.close()


def _notices(e: Engine, sql: str) -> list[str]:
    r = e.execute(e.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    return list(r.notices)


def test_keyed_group_by_says_why_its_noise_is_large(auto_engine: Engine) -> None:
    bounds = _notices(auto_engine, "SELECT educ, COUNT(DISTINCT pid) FROM pums GROUP BY educ")[0]
    assert bounds.startswith("contribution bounds: 16 groups per pid (from the declared keys)")
    assert (
        WHY + "16 groups per pid: educ has 16 declared keys and, as far as the policy says, one "
        "pid may be in all of them (16x the noise of one group per pid)"
    ) in bounds, bounds
    assert "(one educ each, say)" in bounds and "max_groups_per_unit in the policy" in bounds
    assert "1/16 of this noise" in bounds and "max_rows_per_unit_total" in bounds
    two = _notices(auto_engine, "SELECT sex, educ, AVG(income) FROM pums GROUP BY sex, educ")[0]
    assert WHY + "32 groups per pid: sex and educ have 32 declared key combinations" in two


@pytest.mark.parametrize(
    "sql",
    [
        # per-group COUNT and SUM under the L1 cap over groups: G sizes no noise here
        "SELECT category, COUNT(*), SUM(amount) FROM purchases GROUP BY category",
        # one key left by the WHERE clause: one group
        "SELECT educ, COUNT(DISTINCT pid) FROM pums WHERE educ = 3 GROUP BY educ",
    ],
)
def test_no_such_words_where_g_sizes_no_noise(auto_engine: Engine, sql: str) -> None:
    assert not any(WHY in n for n in _notices(auto_engine, sql))


def test_no_such_words_once_the_policy_declares_g(demo_dsn: str, tmp_path: Any) -> None:
    from dpsql.demo import POLICY

    text = POLICY.read_text().replace(
        "privacy_unit: pid\n    max_rows_per_unit: auto\n    max_groups_per_unit: auto",
        "privacy_unit: pid\n    max_rows_per_unit: auto\n    max_groups_per_unit: 1",
    )
    path = tmp_path / "g1.yaml"
    path.write_text(text)
    e = Engine(load_policy(path), demo_dsn, pool_size=1)
    try:
        ns = _notices(e, "SELECT educ, COUNT(DISTINCT pid) FROM pums GROUP BY educ")
    finally:
        e.close()
    assert not any(WHY in n for n in ns), ns
    # 1/16 of the keyed G's noise (±48.5 at epsilon 1), now that G is the policy's 1
    assert any("the noise alone is within ±3.5 at 95%" in n for n in ns), ns


def test_null_averages_say_how_order_by_desc_sorts_them(
    demo_dsn: str, demo_policy: Any, exact_noise: Any
) -> None:
    """Races 7-9 have no row in pums: at zero noise their AVG is NULL, and ORDER BY ... DESC
    lists them first (PostgreSQL's order): the notice says so and how to put them last; not
    where the statement writes NULLS LAST or orders by nothing."""
    e = Engine(demo_policy, demo_dsn, pool_size=1, noise=exact_noise)
    try:
        lines = []
        for sql in (
            "SELECT race, AVG(age) AS a FROM pums GROUP BY race ORDER BY a DESC LIMIT 3",
            "SELECT race, AVG(age) AS a FROM pums GROUP BY race ORDER BY a DESC NULLS LAST",
            "SELECT race, AVG(age) AS a FROM pums GROUP BY race",
        ):
            r = e.execute(e.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
            lines.append(next(n for n in r.notices if n.startswith("AVG(age):")))
            if "LIMIT 3" in sql:  # as PostgreSQL sorts
                assert [row[1] for row in r.rows] == [None, None, None], r.rows
    finally:
        e.close()
    assert all("It is NULL in 3 of 9 groups" in line for line in lines), lines
    said = "ORDER BY ... DESC lists such groups first"
    assert said in lines[0] and "DESC NULLS LAST" in lines[0], lines[0]
    assert said not in lines[1] and said not in lines[2], lines

"""An L1 cap over a unit's groups keeps min(T, L) of an integer measure, apportioned exactly.

A unit's integer partials p over its kept groups (T = their sum) are scaled into the cap L by
largest remainders (dpsql.sql.rewrite.bound_partials._apportioned): floor(p · L / T) each, and
the L - sum(floors) left over to the groups with the largest remainders. Truncating each share
(TRUNC(p · L / T), before) kept 0 of a unit with 2 + 1 rows under L = 1, so a grouped COUNT at
L = 1 counted only units whose rows all fall in one group (newcomer22 #16). Exact: the SQL's own
values, no noise (the private SQL run directly, as test_l1_cap_rounding does).

The units below have no tied remainders among the groups that get a leftover row, so each
group's kept count is determined; unit 2 (one row in each of a, b, c: three equal remainders
under L = 1) is checked by its total only (which group gets its row is the salted hash's choice).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.private_sql import salted
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bounds import AutoBounds, ChosenBound, total_column
from tests.policies import PolicyMaker, private_table

# unit -> rows per group
UNITS: dict[int, dict[str, int]] = {
    1: {"a": 2, "b": 1},  # T = 3
    2: {"a": 1, "b": 1, "c": 1},  # T = 3, tied remainders
    3: {"a": 5},  # T = 5
    4: {"a": 1, "b": 2, "c": 3},  # T = 6
    5: {"b": 1},  # T = 1
    6: {"a": 3, "b": 4, "c": 2},  # T = 9
    7: {"b": 3, "c": 2},  # T = 5
}


def _apportion(rows: dict[str, int], cap: int) -> dict[str, int]:
    """Largest remainders on |p|, the sign kept, written out by hand (no tie may decide)."""
    total = sum(abs(p) for p in rows.values())
    if total <= cap:
        return dict(rows)
    floors = {g: abs(p) * cap // total for g, p in rows.items()}
    rems = {g: abs(p) * cap % total for g, p in rows.items()}
    order = sorted(rems, key=lambda g: -rems[g])
    left = cap - sum(floors.values())
    assert left == 0 or rems[order[left - 1]] > (rems[order[left]] if left < len(order) else -1)
    share = {g: floors[g] + (1 if g in order[:left] else 0) for g in rows}
    return {g: n if rows[g] >= 0 else -n for g, n in share.items()}


def _released(
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    rows: list[tuple[int, str, int]],
    sql: str,
    kind: str,
    cap: int,
    groups: int,
) -> dict[str, Fraction]:
    """The bounded per-group values of ``sql`` over t(uid, g, v) holding ``rows``, the L1 cap of
    its one measure of ``kind`` set to ``cap``: the private SQL run as it is, without noise."""
    dsn = make_db("l1apportion")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text, v integer)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)
    cols = {
        "g": {"type": "text", "keys": ["a", "b", "c"]},
        "v": {"type": "integer", "bounds": [-10, 10]},
    }
    pf = make_policy(
        "l1apportion",
        base={"version": 1},
        tables={"public.t": private_table("uid", cols, rows=10, groups=groups)},
        analysts={"a": {"budget": {"epsilon": 10, "delta": 0.1}}},
    )
    engine = Engine(pf.policy, dsn, pool_size=1)
    try:
        p = engine.prepare(sql, "a")
        assert p.analysis is not None
        (m,) = [m for m in p.analysis.measures if m.kind == kind]
        assert m.integral
        bound = ChosenBound("total", total_column(m), Fraction(cap), Fraction(0), 0, 0)
        capped = apply_bounds(p.analysis, AutoBounds((bound,)))
        text = salted(engine.private_sql(p, capped))
    finally:
        engine.close()
    with psycopg.connect(dsn) as conn:
        got = conn.execute(text).fetchall()
    return {r[0]: Fraction(Decimal(r[1])) for r in got}


@pytest.mark.parametrize("cap", [1, 4])
@pytest.mark.parametrize("groups", [3, 2])  # 2: groups are ranked per unit (keys > G)
def test_kept_count_is_min_of_rows_and_cap(
    make_db: Callable[[str], str], make_policy: PolicyMaker, cap: int, groups: int
) -> None:
    # with G = 2 a unit with 3 groups keeps 2 of them (the salted hash's choice): only units
    # with at most 2 groups then
    units = {u: r for u, r in UNITS.items() if groups == 3 or len(r) <= 2}
    rows = [(u, g, 1) for u, r in units.items() for g, n in r.items() for _ in range(n)]
    sql = "SELECT g, COUNT(*) FROM t GROUP BY g"
    got = _released(make_db, make_policy, rows, sql, "count_rows", cap, groups)
    assert sum(got.values()) == sum(min(sum(r.values()), cap) for r in units.values())
    determined = {u: r for u, r in units.items() if u != 2 or cap >= 3}
    want = {g: 0 for g in "abc"}
    for r in determined.values():
        for g, n in _apportion(r, cap).items():
            want[g] += n
    if len(determined) == len(units):
        assert got == want
    else:  # unit 2's one row went to one of a, b, c
        extra = {g: got.get(g, 0) - want[g] for g in "abc"}
        assert sorted(extra.values()) == [0, 0, 1]


# unit -> its one value in each group (an integer SUM with negative values: |p| apportioned)
SIGNED: dict[int, dict[str, int]] = {
    1: {"a": -3, "b": 2},  # T = 5
    2: {"a": 4},  # T = 4
    3: {"a": -1, "b": -3, "c": 5},  # T = 9
}


@pytest.mark.parametrize("cap", [1, 4])
def test_an_integer_sum_keeps_its_signs_and_min_of_total_and_cap(
    make_db: Callable[[str], str], make_policy: PolicyMaker, cap: int
) -> None:
    rows = [(u, g, v) for u, r in SIGNED.items() for g, v in r.items()]
    sql = "SELECT g, SUM(v) FROM t GROUP BY g"
    got = _released(make_db, make_policy, rows, sql, "sum", cap, 3)
    want = {g: 0 for g in "abc"}
    for r in SIGNED.values():
        for g, n in _apportion(r, cap).items():
            want[g] += n
    assert {g: got.get(g, 0) for g in "abc"} == want

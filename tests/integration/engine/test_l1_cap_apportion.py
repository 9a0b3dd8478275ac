"""An L1 cap over a unit's groups keeps min(T, L) of an integer measure, apportioned exactly.

A unit's integer partials p over its kept groups (T = the sum of |p|) are scaled into the cap L
by systematic rounding along the unit's group order, with an offset from the unit's salted hash
(dpsql.sql.rewrite.bound_partials._apportioned): each share is the floor or the ceiling of its
quota |p| · L / max(T, L), with p's sign, and a unit's shares add up to min(T, L) exactly.
Truncating each share (TRUNC(p · L / T), before f33b7a5) kept 0 of a unit with 2 + 1 rows under
L = 1, so a grouped COUNT at L = 1 counted only units whose rows all fall in one group
(newcomer22 #16). Exact: the SQL's own values, no noise (the private SQL run directly, as
test_l1_cap_rounding does).

Adapted from the largest-remainder apportionment (f33b7a5), whose group values were fixed by the
remainders: which group gets a ceiling is now the offset's choice (the salt's), so each unit is
checked alone (a WHERE on its unit) against the floor/ceiling of each quota and its exact total;
the statement over all units by its exact total and each group's floor/ceiling sums. New: the
rounding is unbiased (largest remainders gave a 2 + 1 unit's row to its 2 every time).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.private_sql import salted
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
from dpsql.sql.auto_bounds import total_column
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


def _released(
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    contents: list[list[tuple[int, str, int]] | str],
    sql: str,
    kind: str,
    cap: int,
    groups: int,
) -> list[dict[str, Fraction]]:
    """The bounded per-group values of ``sql`` over t(uid, g, v) holding each of ``contents``
    in turn (rows, or the INSERT that fills it), the L1 cap of its one measure of ``kind`` set
    to ``cap``: the private SQL run as it is (a fresh salt each time), without noise."""
    dsn = make_db("l1apportion")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text, v integer)")
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
        text = engine.private_sql(p, capped)
    finally:
        engine.close()
    out = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for rows in contents:
            conn.execute("TRUNCATE t")
            if isinstance(rows, str):
                conn.execute(rows)  # type: ignore[arg-type]
            else:
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)
            got = conn.execute(salted(text)).fetchall()  # type: ignore[arg-type]
            out.append({r[0]: Fraction(Decimal(r[1])) for r in got})
    return out


def _quotas(rows: dict[str, int], cap: int) -> dict[str, Fraction]:
    """Each group's quota |p| · L / max(T, L), with p's sign."""
    total = max(sum(abs(p) for p in rows.values()), cap)
    return {g: Fraction(p * cap, total) for g, p in rows.items()}


def _check_unit(got: dict[str, Fraction], rows: dict[str, int], cap: int) -> None:
    """A unit's shares (run alone): each the floor or the ceiling of its quota (so at most its
    partial in magnitude, with its sign), all adding up to min(T, L) in magnitude."""
    shares = {g: got.get(g, Fraction(0)) for g in rows}
    for g, q in _quotas(rows, cap).items():
        assert shares[g] in (math.floor(q), math.ceil(q)), (rows, cap, shares)
        assert abs(shares[g]) <= abs(rows[g]) and shares[g] * rows[g] >= 0, (rows, shares)
    assert sum(abs(v) for v in shares.values()) == min(sum(map(abs, rows.values())), cap)
    assert set(got) <= set(rows) or all(got[g] == 0 for g in set(got) - set(rows))


def _check_groups(got: dict[str, Fraction], units: dict[int, dict[str, int]], cap: int) -> None:
    """The statement over all units: each group between the sums of its units' floors and
    ceilings, the total exactly the sum of min(T, L)."""
    low = {g: Fraction(0) for g in "abc"}
    high = {g: Fraction(0) for g in "abc"}
    for r in units.values():
        for g, q in _quotas(r, cap).items():
            low[g] += math.floor(q)
            high[g] += math.ceil(q)
    for g in "abc":
        assert low[g] <= got.get(g, 0) <= high[g], (g, got, low, high)
    assert sum(map(abs, got.values())) <= sum(
        min(sum(map(abs, r.values())), cap) for r in units.values()
    )


@pytest.mark.parametrize("cap", [1, 4])
@pytest.mark.parametrize("groups", [3, 2])  # 2: groups are ranked per unit (keys > G)
def test_kept_count_is_min_of_rows_and_cap(
    make_db: Callable[[str], str], make_policy: PolicyMaker, cap: int, groups: int
) -> None:
    # with G = 2 a unit with 3 groups keeps 2 of them (the salted hash's choice): only units
    # with at most 2 groups then
    units = {u: r for u, r in UNITS.items() if groups == 3 or len(r) <= 2}
    each = [[(u, g, 1) for g, n in r.items() for _ in range(n)] for u, r in units.items()]
    contents = [[row for rows in each for row in rows], *each]  # all units, then each alone
    sql = "SELECT g, COUNT(*) FROM t GROUP BY g"
    every, *alone = _released(make_db, make_policy, contents, sql, "count_rows", cap, groups)
    assert sum(every.values()) == sum(min(sum(r.values()), cap) for r in units.values())
    _check_groups(every, units, cap)
    for got, r in zip(alone, units.values(), strict=True):
        _check_unit(got, r, cap)


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
    each = [[(u, g, v) for g, v in r.items()] for u, r in SIGNED.items()]
    contents = [[row for rows in each for row in rows], *each]  # all units, then each alone
    every, *alone = _released(
        make_db, make_policy, contents, "SELECT g, SUM(v) FROM t GROUP BY g", "sum", cap, 3
    )
    _check_groups(every, SIGNED, cap)
    for got, r in zip(alone, SIGNED.values(), strict=True):
        _check_unit(got, r, cap)


WHOLE = 3000  # units of 2 rows in a and 1 in b


def test_the_rounding_is_unbiased(make_db: Callable[[str], str], make_policy: PolicyMaker) -> None:
    """Property: under L = 1 a unit with 2 rows in a and 1 in b gives its one kept row to a with
    probability 2/3 (its quota; the offset is uniform on [0, 3) and the unit's group order
    decides nothing on average), independently across units (each its own salted hash). Over
    3,000 such units a's count is Binomial(3000, 2/3): mean 2,000, sd 25.8; outside
    2,000 +- 155 (6 sd) has probability < 1e-8. Largest remainders (f33b7a5's broken twin
    here) gave all 3,000 to a; truncation (before it) gave 0 to both."""
    fill = (
        "INSERT INTO t SELECT u, g, 1 FROM generate_series(1, 3000) AS u, "
        "unnest(ARRAY['a', 'a', 'b']) AS g"
    )
    (got,) = _released(
        make_db, make_policy, [fill], "SELECT g, COUNT(*) FROM t GROUP BY g", "count_rows", 1, 3
    )
    assert got["a"] + got["b"] == WHOLE
    assert abs(got["a"] - 2000) <= 155, got

"""Privacy audit of the clamped mass measured on a table the catalog proves one row per unit.

On such a table the private SQL skips bounding (dpsql.execute.unique_units) but still measures,
for a column clamped narrower than declared, each row's clamped-off mass (dpsql.sql.rewrite.
bound_contributions._unique_dropped): per group the sum of min(e, C) (e: the row's clamped-off
mass in grid steps, C the cap) and the count of rows with e > C. The plan releases them with
Laplace noise calibrated to L1 sensitivity C and 1 (dpsql.sql.bias.bias_plans), so the privacy of
the release rests on one property of the SQL: removing one unit (one row) moves the first by at
most C steps and the second by at most 1, in L1 over the groups.

Checked exactly (deterministic, no noise: false failure 0): D has 40 units, ``uid`` the PRIMARY
KEY, v declared [0, 10,000] and clamped to 100; three "whales" hold v = 5,000 (each loses 4,900,
far beyond C = 400) and five hold 350 (below C). For every unit, the SQL runs on D and on D
without it (a DELETE rolled back), grouped and not; the L1 change of each column must stay
within its sensitivity, and a whale reaches it (the bound is tight). The twin that counts a
unit's whole clamped-off mass (no cap: what a missing LEAST would do) moves the first column by
4,900 for a whale, about 12 times C, and is caught.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from sqlglot import exp

from dpsql.engine import Engine
from dpsql.execute.private_sql import salted
from dpsql.session import SessionContext
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
from dpsql.sql.auto_bounds import auto_items
from dpsql.sql.plan import Plan
from dpsql.sql.rewrite import measure_dropped
from tests.policies import build_policy, private_table

POLICY = build_policy(
    base={},
    version=1,
    dataset="audit_uclamp",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.u": private_table(
            "uid",
            {
                "g": {"type": "text", "keys": ["a", "b"]},
                "v": {"type": "numeric", "bounds": [0, 10000]},
            },
        )
    },
)
UNITS = 40
WHALES = (0, 13, 26)


def _value(u: int) -> int:
    return 5000 if u in WHALES else 350 if u % 8 == 1 else 1 + u % 30


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("audit_uclamp")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE u (uid integer PRIMARY KEY, g text NOT NULL, v numeric)")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO u VALUES (%s, %s, %s)",
                [(x, "ab"[x % 2], _value(x)) for x in range(UNITS)],
            )
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    e = Engine(POLICY, dsn, pool_size=1)
    yield e
    e.close()


def _plan(engine: Engine, sql: str) -> tuple[Any, Plan]:
    prepared = engine.prepare(sql)
    session = SessionContext(epsilon=Fraction(1))
    a = engine.plan(prepared, session).analysis
    assert a.unique_unit, "the catalog proves one row per unit"
    (item,) = [it for it in auto_items(a) if it.kind == "value_hi"]
    clamp = ChosenBound("value_hi", item.column, Fraction(100), Fraction(1, 5), 1, len(item.grid))
    plan = engine.plan(prepared, session, analysis=apply_bounds(a, AutoBounds((clamp,))))
    assert isinstance(plan, Plan) and len(plan.bias) == 1
    return prepared, plan


def _columns(conn: psycopg.Connection[Any], text: str, keys: int) -> dict[Any, tuple[int, int]]:
    """(dropped steps, over-cap count) per group."""
    rows = conn.execute(text).fetchall()
    return {tuple(r[:keys]): (int(r[-2]), int(r[-1])) for r in rows}


def _largest_moves(engine: Engine, dsn: str, sql: str) -> tuple[int, int, int, int]:
    """The largest L1 change of (dropped, over_cap) when one unit is removed, over all units,
    and the plan's sensitivities of the two releases (cap in steps, over-cap L1)."""
    prepared, plan = _plan(engine, sql)
    (b,) = plan.bias
    text = salted(engine.private_sql(prepared, plan.analysis))
    assert "_dp_parts" not in text, "the unbounded (catalog) path"
    keys = len(plan.analysis.group_keys)
    worst_d = worst_k = 0
    with psycopg.connect(dsn) as conn:
        full = _columns(conn, text, keys)
        for x in range(UNITS):
            with conn.transaction(force_rollback=True):
                conn.execute("DELETE FROM u WHERE uid = %s", (x,))
                less = _columns(conn, text, keys)
            groups = set(full) | set(less)
            d = sum(abs(full.get(g, (0, 0))[0] - less.get(g, (0, 0))[0]) for g in groups)
            k = sum(abs(full.get(g, (0, 0))[1] - less.get(g, (0, 0))[1]) for g in groups)
            worst_d, worst_k = max(worst_d, d), max(worst_k, k)
    steps = int(b.dropped.sensitivity / b.target.grid)
    return worst_d, worst_k, steps, int(b.over_cap.sensitivity)


SQLS = [
    "SELECT SUM(v) FROM u",
    "SELECT g, SUM(v) FROM u GROUP BY g",
    "SELECT g, AVG(v) FROM u GROUP BY g",
]


@pytest.mark.parametrize("sql", SQLS)
def test_one_unit_moves_the_clamped_mass_by_at_most_its_sensitivity(
    engine: Engine, dsn: str, sql: str
) -> None:
    d, k, cap, over = _largest_moves(engine, dsn, sql)
    assert d <= cap and k <= over, (d, cap, k, over)
    assert d == cap and k == 1, "a whale loses more than the cap: the bound is reached"


def test_the_uncapped_twin_is_caught(
    engine: Engine, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = measure_dropped.dropped_columns

    def uncapped(t: Any, e: exp.Expr, before: exp.Expr | None) -> tuple[exp.Expr, exp.Expr]:
        _, over = real(t, e, before)
        whole = exp.Coalesce(this=exp.Sum(this=e.copy()), expressions=[exp.Literal.number(0)])
        return whole, over

    monkeypatch.setattr(measure_dropped, "dropped_columns", uncapped)
    d, _, cap, _ = _largest_moves(engine, dsn, SQLS[0])
    assert d > cap, (d, cap)

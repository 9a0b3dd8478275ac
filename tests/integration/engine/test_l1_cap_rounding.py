"""An L1 cap over a unit's groups holds exactly, whatever the digits of the unit's values.

The unit's partials are scaled by a factor <= L / T (T: their absolute sum over its groups;
dpsql.sql.rewrite.bound_partials._scaled). NUMERIC division rounds its last digit, so the factor
written as TRUNC(L / GREATEST(T, L), 18) was 1 when T exceeded L by less than the division's
precision: a unit with SUM 50 in one group and 50.0000000000000000000001 in another kept
100.0000000000000000000001 against a cap of 100. Exact (the SQL's own NUMERIC values, no noise):
alone in the table, the unit's released vector (its neighbour without it is all zeros) must have
L1 norm <= L.
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
from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
from dpsql.sql.auto_bounds import total_column
from tests.policies import PolicyMaker, private_table

CAP = Fraction(100)
TINY = "0.0000000000000000000001"  # 1e-22: below the factor's 18 digits and the division's 20


@pytest.mark.parametrize(
    ("values", "within"),
    [
        ((("a", "50"), ("b", f"50{TINY[1:]}")), False),  # T = L + 1e-22
        ((("a", "30"), ("b", "70"), ("c", "1")), False),  # T = 101
        ((("a", "60"), ("b", "40")), True),  # T = L: kept as it is
    ],
)
def test_one_units_vector_is_within_the_cap(
    make_db: Callable[[str], str],
    make_policy: PolicyMaker,
    values: tuple[tuple[str, str], ...],
    within: bool,
) -> None:
    dsn = make_db("l1cap")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text, v numeric)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (1, %s, %s)", values)
    cols = {
        "g": {"type": "text", "keys": ["a", "b", "c"]},
        "v": {"type": "numeric", "bounds": [0, 100]},
    }
    pf = make_policy(
        "l1cap",
        base={"version": 1},
        tables={"public.t": private_table("uid", cols, rows=10, groups=3)},
        analysts={"a": {"budget": {"epsilon": 10, "delta": 0.1}}},
    )
    engine = Engine(pf.policy, dsn, pool_size=1)
    try:
        p = engine.prepare("SELECT g, SUM(v) FROM t GROUP BY g", "a")
        assert p.analysis is not None
        (m,) = [m for m in p.analysis.measures if m.kind == "sum"]
        capped = apply_bounds(
            p.analysis,
            AutoBounds((ChosenBound("total", total_column(m), CAP, Fraction(0), 0, 0),)),
        )
        text = salted(engine.private_sql(p, capped))
    finally:
        engine.close()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(text).fetchall()
    got = {r[0]: Fraction(Decimal(r[1])) for r in rows}
    norm = sum((abs(x) for x in got.values()), Fraction(0))
    assert norm <= CAP
    raw = sum((Fraction(Decimal(v)) for _, v in values), Fraction(0))
    assert (norm == raw) is within  # a unit within the cap keeps its values exactly

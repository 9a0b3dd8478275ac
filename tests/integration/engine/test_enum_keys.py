"""A column the policy declares ``text`` whose PostgreSQL type is an enum (as ``dpsql init``
writes one: "keys: the enum's labels"; ``dpsql check --upstream`` accepts it) answers as a text
column does (newcomer22 #29: MIN/MAX/MEDIAN/percentiles by it failed upstream with
``hashtextextended(dept, bigint) does not exist``, withheld and charged; ``department::text
LIKE 'o%'`` and ``upper(department::text)`` failed once the analyst's cast was dropped).
Deterministic: the released keys are the declared ones (6 of 7 fail before)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.policies import PolicyMaker, private_table

DEPTS = ["cardiology", "general", "oncology"]


@pytest.fixture(scope="module")
def engine(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[Engine]:
    dsn = make_db("enumkeys")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE dept AS ENUM ('cardiology', 'general', 'oncology')")
        conn.execute("CREATE TABLE visits (pid int NOT NULL, department dept, cost numeric)")
        conn.execute(
            "INSERT INTO visits SELECT g % 400, (enum_range(NULL::dept))[1 + g % 3], g % 97"
            " FROM generate_series(1, 3000) g"
        )
    cols = {
        "department": {"type": "text", "keys": DEPTS},
        "cost": {"type": "numeric", "bounds": [0, 100]},
    }
    table = private_table("pid", cols, rows=None, groups=None)
    pf = make_policy("enumkeys", tables={"public.visits": table})
    e = Engine(pf.policy, dsn)
    try:
        yield e
    finally:
        e.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT department, COUNT(*) FROM visits GROUP BY department",
        "SELECT department, MIN(cost) FROM visits GROUP BY department",
        "SELECT department, MEDIAN(cost) FROM visits GROUP BY department",
        "SELECT department, percentile_cont(0.5) WITHIN GROUP (ORDER BY cost) FROM visits GROUP BY 1",
        "SELECT department::text AS d, MAX(cost) FROM visits GROUP BY 1",
        "SELECT COUNT(*) FROM visits WHERE department::text LIKE 'o%'",
        "SELECT upper(department::text), COUNT(*) FROM visits GROUP BY 1",
    ],
)
def test_enum_column_declared_text(engine: Engine, sql: str) -> None:
    got = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    if "GROUP BY" in sql:
        want = [d.upper() for d in DEPTS] if "upper" in sql else DEPTS
        assert sorted(str(r[0]) for r in got.rows) == want
    else:
        assert len(got.rows) == 1 and got.rows[0][0] is not None

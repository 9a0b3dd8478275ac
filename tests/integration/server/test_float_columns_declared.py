"""review21: a float column declared ``numeric`` in the policy (the family name the policy's
type list offers) stops ``dpsql serve``: the rewrite keeps a NUMERIC that meets a float within
the float's range only where the policy says the column is one (dpsql.sql.rewrite.float_safe).
Declared numeric, ``amount * 1e307 > f`` failed exactly for the rows with amount above 18, a
binary search on one person's value. Deterministic (the catalog only)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from tests.owner import declared_problems
from tests.policies import PolicyMaker, private_table


def test_a_float_column_must_be_declared_as_a_float(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> None:
    create = (
        "CREATE TABLE t (u integer, a numeric, f double precision, r real, "
        "g double precision, h real)"
    )
    columns = {
        "a": {"type": "numeric"},
        "f": {"type": "numeric"},  # a double declared numeric
        "r": {"type": "numeric"},  # a real declared numeric
        "g": {"type": "double precision"},
        "h": {"type": "float4"},
    }
    _, _, problems = declared_problems(make_db, make_policy, "floatdecl", create, columns)
    assert [p.text.split(":")[0] for p in problems] == ["column public.t.f", "column public.t.r"]
    assert all(p.fatal for p in problems), problems
    assert "write type: double precision" in next(p.text for p in problems if ".f:" in p.text)


def test_dpsql_check_reports_it(make_db: Callable[[str], str], make_policy: PolicyMaker) -> None:
    from dpsql.check import catalog_findings

    dsn = make_db("floatchk")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer, f double precision, g double precision)")
    columns = {"f": {"type": "numeric"}, "g": {"type": "float8"}}
    pf = make_policy("floatchk", tables={"public.t": private_table("u", columns)}, public_tables=[])
    found = [f for f in catalog_findings(pf.policy, dsn) if f.table == "public.t"]
    assert [f.column for f in found] == ["f"], found

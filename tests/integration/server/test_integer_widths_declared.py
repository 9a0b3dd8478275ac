"""An integer column's declared width is the database's (words29, session 29 task 6). The
policy may name a serial as its DDL does (``bigserial`` / ``serial8`` is a bigint, ``serial``
an integer, ``smallserial`` a smallint): before, the policy refused those names, and a bigint
column declared ``integer`` (what a bigserial id looks like) started: dpsql typed SUM(id) as
bigint where PostgreSQL's is numeric, and read the column as 32 bits. Now such a width
mismatch stops ``dpsql serve`` (and ``dpsql check`` reports it) with the name to write.
Deterministic (the catalog, and one statement at zero noise)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.policy.tables import _TYPE_FAMILIES, INTEGER_BITS, Column
from dpsql.session import SessionContext
from tests.helpers import EXACT, unrounded
from tests.owner import declared_problems
from tests.policies import PolicyMaker, private_table


def test_every_integer_name_has_a_width() -> None:
    names = {n for n, f in _TYPE_FAMILIES.items() if f == "integer"}
    assert names == set(INTEGER_BITS)
    assert [Column(type=t).integer_bits for t in ("bigserial", "serial8", "serial", "serial2")] == [
        64, 64, 32, 16,
    ]  # fmt: skip


def test_a_bigint_declared_integer_stops_serve(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> None:
    create = "CREATE TABLE t (u integer, id bigserial, j bigserial, n serial, s smallint, b bigint)"
    columns = {
        "id": {"type": "bigserial", "bounds": [0, 10]},
        "j": {"type": "integer", "bounds": [0, 10]},  # a bigserial declared integer
        "n": {"type": "serial", "bounds": [0, 10]},
        "s": {"type": "bigint", "bounds": [0, 10]},  # a smallint declared bigint
        "b": {"type": "int8", "bounds": [0, 10]},
    }
    policy, dsn, problems = declared_problems(make_db, make_policy, "intwidths", create, columns)
    assert [p.text.split(":")[0] for p in problems] == ["column public.t.j", "column public.t.s"]
    assert all(p.fatal for p in problems), problems
    assert "write type: bigint" in next(p.text for p in problems if ".j:" in p.text)

    from dpsql.check import catalog_findings

    found = [f for f in catalog_findings(policy, dsn) if f.table == "public.t"]
    assert sorted(f.column for f in found) == ["j", "s"], found


def test_sum_of_a_bigserial_has_postgresqls_type(
    make_db: Callable[[str], str], make_policy: PolicyMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SUM of a bigint is numeric in PostgreSQL: so is SUM(id) of a column declared bigserial."""
    unrounded(monkeypatch)
    dsn = make_db("bigserialsum")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer, id bigserial)")
        conn.execute("INSERT INTO t (u) SELECT g FROM generate_series(1, 50) g")
    columns = {"id": {"type": "bigserial", "bounds": [0, 100]}}
    table = private_table("u", columns, rows=1, groups=1)
    pf = make_policy("bigserialsum", tables={"public.t": table}, public_tables=[])
    engine = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    try:
        sql = "SELECT SUM(id) FROM t"
        with psycopg.connect(dsn) as conn:
            cur = conn.execute(sql)
            want = (cur.description[0].type_code, cur.fetchone()[0])
        r = engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
        assert (r.columns[0].type_oid, r.rows[0][0]) == want
    finally:
        engine.close()

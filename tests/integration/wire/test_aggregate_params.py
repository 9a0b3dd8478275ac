"""A parameter in an aggregate's argument (``SUM(q / $1)``, ``AVG(a * $1)``), as ORMs and BI
tools send it, through psycopg and asyncpg: answered as PostgreSQL answers the same text.

Before, both drivers got 42501 "the range of q / $1 can't be bounded" at Parse. Now the
statement is analyzed at Execute with its values written as literals of the parameter's type
(dpsql/sql/aggregate_params.py): PostgreSQL types ``q / $1`` by ``$1``'s type (psycopg declares
int2 for 2, float8 for 2.5, numeric for a Decimal, int8 for 10**12; asyncpg asks and is told
``$1`` is q's type), and so does dpsql.

Properties, on a private table of one row per person (R = 1, zero noise, every value inside its
bounds, so dpsql's answer is PostgreSQL's): each answer's value and RowDescription type are
PostgreSQL's to the same text with the same parameters (and the type is ``pg_typeof``'s);
asyncpg's ParameterDescription and RowDescription before Bind are PostgreSQL's; each value is a
release of its own (charged once; the same value again is a free repeat); a value that leaves
the argument unbounded (``$1 = 0``) is refused at Execute with its SQLSTATE and the statement's
own words, the same refusal over an empty table (not a data-dependent error), nothing charged;
a column with no bounds stays refused at Parse. Deterministic.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from tests.conftest import IN_CI
from tests.helpers import EXACT, analyst_dsn, served_engine, unrounded
from tests.owner import owner_db
from tests.policies import PolicyMaker, private_table

COLUMNS = {
    "q": {"type": "integer", "bounds": [1, 10]},
    "a": {"type": "numeric", "bounds": [0, 500]},
    "x": {"type": "numeric"},  # no bounds: SUM(x / $1) is refused whatever $1
}
CREATE = (
    "CREATE TABLE priv (u int, q int, a numeric, x numeric)",
    # a: even whole numbers, so a * 2.5 is whole too (a SUM of sensitivity 1250 is released on a
    # grid of 1: dpsql/dp/mechanisms.py)
    "INSERT INTO priv SELECT u, 1 + u % 10, 2 * (u * 37 % 250), u FROM generate_series(1, 300) u",
    "CREATE TABLE nobody (LIKE priv)",
)
# (aggregates, the rest, parameters): psycopg declares int2 / float8 / numeric / int8 / unknown
PSYCOPG = [
    ("SUM(q / %s)", "", (2,)),
    ("SUM(q / %s)", "", (2.5,)),
    ("SUM(q / %s)", "", (Decimal("2.5"),)),
    ("SUM(q / %s)", "", (-3,)),
    ("SUM(q / %s)", "", (10**12,)),
    ("SUM((q + 1) / %s)", "", ("3",)),
    ("AVG(a * %s)", "", (2,)),
    ("AVG(a * %s)", "", (2.5,)),
    ("SUM(q * %s + 1), COUNT(*)", " WHERE q > %s", (3, 4)),
]
ASYNCPG = ["SELECT SUM(q / $1) FROM priv", "SELECT AVG(a * $1) FROM priv"]
HISTORY = "SELECT id, cached, statement FROM dpsql.history ORDER BY id"


@pytest.fixture(scope="module")
def dsns(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[tuple[str, str]]:
    """(PostgreSQL's, dpsql's) DSNs on the same data; dpsql's with a ledger and zero noise."""
    dsn = owner_db(make_db, "agg_params", *CREATE)
    table = private_table("u", COLUMNS, rows=1, groups=1)
    pf = make_policy(
        "agg_params", tables={"public.priv": table, "public.nobody": table}, public_tables=[]
    )
    ledger = Ledger.open(make_db("agg_params_ledger"), pf.policy)
    try:
        with served_engine(pf.policy, dsn, ledger=ledger, noise=EXACT) as srv:
            yield dsn, analyst_dsn(srv.port)
    finally:
        ledger.close()


def _answer(dsn: str, sql: str, args: tuple[object, ...]) -> tuple[list[Any], list[int]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(sql, args)
        row = cur.fetchone()
        assert row is not None
        return list(row), [d.type_code for d in cur.description or []]


def _close(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is b
    x, y = Decimal(str(a)), Decimal(str(b))
    return abs(x - y) <= Decimal("1e-9") * max(1, abs(y))


@pytest.mark.parametrize(("aggs", "rest", "args"), PSYCOPG)
def test_psycopg_answers_as_postgresql(
    dsns: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    aggs: str,
    rest: str,
    args: tuple[object, ...],
) -> None:
    unrounded(monkeypatch)
    pg, dpsql = dsns
    sql = f"SELECT {aggs} FROM priv{rest}"
    want, want_types = _answer(pg, sql, args)
    got, got_types = _answer(dpsql, sql, args)
    assert got_types == want_types
    assert all(_close(g, w) for g, w in zip(got, want, strict=True)), (got, want)
    first = aggs.split("), ")[0].removesuffix(")") + ")"
    typeof = _answer(pg, f"SELECT pg_typeof({first})::oid::int FROM priv{rest}", args)[0]
    assert typeof == want_types[:1]


def _asyncpg() -> Any:
    if importlib.util.find_spec("asyncpg") is None:
        if IN_CI:
            pytest.fail("asyncpg is not installed")
        pytest.skip("asyncpg is not installed")
    import asyncpg  # type: ignore[import-untyped]

    return asyncpg


async def _asyncpg_answer(dsn: str, sql: str, value: object) -> tuple[Any, ...]:
    asyncpg = _asyncpg()
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    c = await asyncpg.connect(
        host=info.get("host"), port=int(info.get("port") or 5432), user=info.get("user"),
        password=info.get("password"), database=info.get("dbname"), ssl=False,
    )  # fmt: skip
    try:
        st = await c.prepare(sql)  # Parse + Describe: the types before any value
        params = [t.oid for t in st.get_parameters()]
        columns = [a.type.oid for a in st.get_attributes()]
        row = await st.fetchrow(value)
        return params, columns, list(row)
    finally:
        await c.close()


@pytest.mark.parametrize("sql", ASYNCPG)
def test_asyncpg_describes_and_answers_as_postgresql(
    dsns: tuple[str, str], monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    unrounded(monkeypatch)
    _asyncpg()
    want, got = (asyncio.run(_asyncpg_answer(dsn, sql, 3)) for dsn in dsns)
    assert got[:2] == want[:2]  # ParameterDescription, RowDescription
    assert _close(got[2][0], want[2][0]), (got, want)


def test_each_value_is_a_release_of_its_own(dsns: tuple[str, str]) -> None:
    with psycopg.connect(dsns[1], autocommit=True) as c:
        before = len(c.execute(HISTORY).fetchall())
        answers = [c.execute("SELECT SUM(q / %s) FROM priv", (v,)).fetchone() for v in (7, 7, 9)]
        added = c.execute(HISTORY).fetchall()[before:]
    assert answers[0] == answers[1]
    assert [cached for _, cached, _ in added] == [False, True, False]
    assert added[0][2] == added[1][2] != added[2][2]


@pytest.mark.parametrize("table", ["priv", "nobody"])
def test_a_value_that_leaves_it_unbounded_is_refused_at_execute(
    dsns: tuple[str, str], table: str
) -> None:
    """``$1 = 0``: PostgreSQL's 22012 from the constant (over rows or none alike: never a
    data-dependent error), said with the value; nothing charged."""
    with psycopg.connect(dsns[1], autocommit=True) as c:
        before = c.execute(HISTORY).fetchall()
        for value in (0, 0.0):
            with pytest.raises(psycopg.errors.DivisionByZero) as got:
                c.execute(f"SELECT SUM(q / %s) FROM {table}", (value,))
            assert got.value.diag.message_primary == "division by zero"
            assert got.value.diag.message_detail == f"with $1 = {value}"
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
            c.execute(f"SELECT SUM(q %% %s) FROM {table}", (3,))
        assert (
            refused.value.diag.message_primary
            == "the range of q % $1 can't be bounded from the declared bounds"
        )
        assert c.execute(HISTORY).fetchall() == before


def test_an_unbounded_column_stays_refused_at_parse(dsns: tuple[str, str]) -> None:
    """Refused whatever the value: at Parse (asyncpg's prepare), as before."""
    asyncpg = _asyncpg()

    async def prepare() -> None:
        info = psycopg.conninfo.conninfo_to_dict(dsns[1])
        c = await asyncpg.connect(
            host=info.get("host"), port=int(info.get("port") or 5432), user=info.get("user"),
            password=info.get("password"), database=info.get("dbname"), ssl=False,
        )  # fmt: skip
        try:
            await c.prepare("SELECT SUM(x / $1) FROM priv")
        finally:
            await c.close()

    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        asyncio.run(prepare())

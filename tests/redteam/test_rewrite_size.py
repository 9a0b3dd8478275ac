"""What one short statement may make the proxy build and PostgreSQL evaluate per row.

Found by review21: flattening replaces each reference to a derived table's column by a copy of
its expression, so a chain of derived tables (or CTEs) each selecting ``a + a AS a`` from the
next doubled the innermost expression per level: 430 characters, 2^16 copies, minutes of proxy
CPU under the interpreter lock (every session stalled) and an expression PostgreSQL evaluated for
each row that reached it. ``date_trunc`` (``to_char``, ``date_part``, a cast to timestamp) reads
its argument three times once made total (``within_timestamps``), so ten nested ones were 3^10
copies: 178 s to rewrite. Both are now refused (54001) before anything runs; ordinary nesting
(BI tools' wrappers, ``to_char(date_trunc('month', CAST(d AS timestamp)), 'YYYY-MM')``) is not.
Deterministic: refusals are decided from the statement alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import StatementTooComplex
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table


@pytest.fixture(scope="module")
def engine(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[Engine]:
    dsn = make_db("rwsize")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT u, u::numeric AS x, DATE '2025-01-01' + u AS d "
            "FROM generate_series(1, 20) u"
        )
    columns = {"x": {"type": "numeric", "bounds": [0, 100]}, "d": {"type": "date"}}
    pf = make_policy("rwsize", tables={"public.t": private_table("u", columns)}, public_tables=[])
    e = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    yield e
    e.close()


def _chain(depth: int, expr: str) -> str:
    q = "SELECT x AS a, d, u FROM t"
    for _ in range(depth):
        q = f"SELECT {expr} AS a, d, u FROM ({q}) s"
    return f"SELECT COUNT(*) FROM ({q}) z WHERE a > 0"


def _cte_chain(depth: int, expr: str) -> str:
    ctes = ["c0 AS (SELECT x AS a, u FROM t)"]
    ctes += [f"c{i} AS (SELECT {expr} AS a, u FROM c{i - 1})" for i in range(1, depth + 1)]
    return f"WITH {', '.join(ctes)} SELECT COUNT(*) FROM c{depth} WHERE a > 0"


def _nested(depth: int, inner: str = "d") -> str:
    return "date_trunc('day', " * depth + inner + ")" * depth


REFUSED = {
    "derived tables doubling a column": _chain(12, "a + a"),
    # 512 copies: within the copy budget, but 511 additions once flat (at most 256)
    "derived tables doubling a column 9 deep": _chain(9, "a + a"),
    "derived tables tripling a column": _chain(8, "a * a - a"),
    "CTEs doubling a column": _cte_chain(12, "a + a"),
    "date_trunc nested 4 deep": f"SELECT COUNT(*) FROM t GROUP BY {_nested(4)}",
    "date_trunc nested 6 deep in WHERE": f"SELECT COUNT(*) FROM t WHERE {_nested(6)} > now()",
    "casts to timestamp nested": "SELECT COUNT(*) FROM t WHERE "
    + "CAST(" * 4
    + "d"
    + " AS timestamp)" * 4
    + " > now()",
    "date_trunc nested through derived tables": (
        "SELECT COUNT(*) FROM (SELECT date_trunc('day', a) AS a FROM (SELECT date_trunc('day', a)"
        " AS a FROM (SELECT date_trunc('day', a) AS a FROM (SELECT date_trunc('day', d) AS a "
        "FROM t) s1) s2) s3) s4 GROUP BY a"
    ),
}
ANSWERED = [
    _chain(3, "a + a"),
    "SELECT n FROM (SELECT COUNT(*) AS n FROM (SELECT x * 2 AS a, u FROM t) s) w LIMIT 5",
    "SELECT to_char(date_trunc('month', CAST(d AS timestamp)), 'YYYY-MM') AS m, COUNT(*) "
    "FROM t GROUP BY 1",
    f"SELECT COUNT(*) FROM t WHERE {_nested(3)} > now()",
]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_expanding_statements_are_refused(engine: Engine, name: str) -> None:
    with pytest.raises(StatementTooComplex) as e:
        engine.prepare(REFUSED[name])
    assert e.value.sqlstate == "54001" and e.value.hint, e.value


@pytest.mark.parametrize("sql", ANSWERED)
def test_ordinary_nesting_is_answered(engine: Engine, sql: str) -> None:
    engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))

"""width_bucket over a private numeric column must not fail depending on one row's value.

PostgreSQL raises for a NaN operand ("operand, lower bound, and upper bound cannot be NaN"), so
``width_bucket(x, 0, 100, 10)`` failed on a database where one person's ``x`` was NaN (and that
row reached it past the WHERE clause) and answered on its neighbour: a noiseless bit about one
person. dpsql clamps the operand first (dpsql.sql.width_bucket: NaN reads as 10^1000, the bucket
above the upper bound). Property: on two neighbouring databases (the target's x is 90 in one,
NaN in the other) each statement's outcome class is the same (answered); the statement as
written does fail on PostgreSQL itself on the NaN database (the channel the clamp closes), and
a GROUP BY of the buckets releases every bucket the bounds allow. Deterministic (zero noise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

STATEMENTS = [
    "SELECT COUNT(*) FROM t WHERE x > 50 AND width_bucket(x, 0, 100, 10) = 10",
    "SELECT width_bucket(x, 0, 100, 10) AS b, COUNT(*) FROM t GROUP BY 1",
    "SELECT SUM(width_bucket(x, 100, 0, 4)) FROM t WHERE x > 50",
]


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[tuple[Engine, str], tuple[Engine, str]]]:
    columns = {"x": {"type": "numeric", "bounds": [0, 100]}}
    pf = make_policy("wbnan", tables={"public.t": private_table("u", columns)}, public_tables=[])
    made = []
    for target in ("90", "NaN"):
        dsn = make_db("wbnan")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (u integer NOT NULL, x numeric)")
            conn.execute(
                "INSERT INTO t SELECT u, CASE WHEN u = 1 THEN %s::numeric ELSE u END "
                "FROM generate_series(1, 40) u",
                (target,),
            )
        made.append((Engine(pf.policy, dsn, pool_size=1, noise=EXACT), dsn))
    yield made[0], made[1]
    for e, _ in made:
        e.close()


def _outcome(engine: Engine, sql: str) -> str:
    try:
        engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    except DpsqlError as e:
        return e.sqlstate
    return "answered"


@pytest.mark.parametrize("sql", STATEMENTS)
def test_a_nan_does_not_decide_the_outcome(
    neighbours: tuple[tuple[Engine, str], tuple[Engine, str]], sql: str
) -> None:
    (low, low_dsn), (nan, nan_dsn) = neighbours
    assert _outcome(low, sql) == _outcome(nan, sql) == "answered"
    # the channel: PostgreSQL itself fails on the NaN database only (a broken twin without the
    # clamp would report it)
    with psycopg.connect(low_dsn) as conn:
        conn.execute(sql)
    with psycopg.connect(nan_dsn) as conn, pytest.raises(psycopg.Error, match="NaN"):
        conn.execute(sql)


def test_the_buckets_come_from_the_bounds(
    neighbours: tuple[tuple[Engine, str], tuple[Engine, str]],
) -> None:
    (low, low_dsn), _ = neighbours
    sql = STATEMENTS[1]
    prepared = low.prepare(sql)
    assert prepared.analysis is not None and not prepared.analysis.needs_selection
    r = low.execute(prepared, SessionContext(analyst="analyst"))
    got = {int(row[0]): round(float(row[1])) for row in r.rows}
    with psycopg.connect(low_dsn) as conn:
        want = dict(conn.execute(sql).fetchall())
    assert sorted(got) == list(range(1, 12))  # x in [0, 100]: buckets 1 .. 11 (x = 100: 11)
    assert {k: got[k] for k in want} == want and all(got[k] == 0 for k in got if k not in want)

"""Constants reach PostgreSQL as the user wrote them.

dpsql sends PostgreSQL SQL written from sqlglot's tree, not the user's text, and sqlglot rewrites
some constants as it reads and writes them. review26 found ``to_char(d, 'fmmonth')`` sent as
``'fMMonth'`` (PostgreSQL answers ``f03onth``: every label of a GROUP BY wrong, with confident
counts beside them) and ``'"dd"'`` sent as ``'"DD"'``. Over public tables dpsql's answer must be
PostgreSQL's answer to the same text (run by the owner); over a private table the groups of a
``to_char`` key must be the ones PostgreSQL's own ``SELECT DISTINCT`` gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT

DAY = "date '2025-03-04'"
TS = "timestamp '2025-03-04 13:05:06.5'"

# to_char / to_date / to_timestamp formats sqlglot's strftime mapping does not give back as
# written (the first four were sent otherwise before: a wrong value each), and some it does
FORMATS = [
    f"to_char({DAY}, 'fmmonth')",  # was 'fMMonth': f03onth
    f"to_char({DAY}, '\"dd\" DD')",  # was '"DD" DD': DD 04
    f"to_char({DAY}, '%Y %m')",  # was 'YYYY MM': 2025 03 (PostgreSQL: %5 %m)
    f"to_char({DAY}, 'YYYY\"%d\"')",  # was 'YYYY"%D"'
    "to_date('2025%03', 'YYYY\"%\"MM')",
    f"to_char({DAY}, 'Month MONTH month Mon MON mon TMMonth')",
    f"to_char({DAY}, 'Day DAY day Dy DY dy d D yyyy-mm-dd ddd iw ww q')",
    f"to_char({TS}, 'HH HH12 HH24 hh24 mi MI ss SS ms MS us US AM am pm')",
    f"to_char({TS}, 'FMHH24:FMMI FMDD fmdd Fmdd DDth ddTH Y,YYY cc J RM rm W')",
    "to_char(1234.5, 'fm9g999d99')",
    "to_date('04 march 2025', 'dd month yyyy')",
    "to_timestamp('2025-03-04 01:05 pm', 'yyyy-mm-dd hh12:mi am')",
    f"to_char({DAY}, $$fmmonth$$)",
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, pool_size=1, noise=EXACT)
    yield e
    e.close()


def _dpsql(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    result = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst"))
    return [tuple(r) for r in result.rows]


def _postgres(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    """PostgreSQL's answer to ``sql`` as written, run by the owner on the engine's upstream
    connection (values read as dpsql reads a public statement's)."""
    return [tuple(r) for r in engine.backend.run(sql, private=False).rows]


def _distinct(dsn: str, sql: str) -> set[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0] for r in conn.execute(sql).fetchall()}


@pytest.mark.parametrize("call", FORMATS)
def test_a_format_reaches_postgresql_as_written(engine: Engine, call: str) -> None:
    sql = f"SELECT {call} AS v FROM regions"
    assert _dpsql(engine, sql) == _postgres(engine, sql)


@pytest.mark.parametrize("fmt", ["fmmonth", '"dd"MM', "YYYY-MM", "Dy"])
def test_a_private_key_of_to_char_has_postgresql_labels(
    engine: Engine, demo_dsn: str, fmt: str
) -> None:
    key = f"to_char(purchased_at, '{fmt}')"
    got = {r[0] for r in _dpsql(engine, f"SELECT {key} AS k, COUNT(*) FROM purchases GROUP BY 1")}
    truth = _distinct(demo_dsn, f"SELECT DISTINCT {key} FROM purchases")
    assert got == truth

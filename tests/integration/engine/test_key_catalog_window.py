"""A group key's checks hold for the query that runs, not only for the catalog read before it.

Before a private statement is charged, its text keys are checked against the columns'
collations (dpsql.execute.precheck.precheck: under a case-insensitive collation 'Secret' =
'secret', and a group would print as whichever of its rows' texts PostgreSQL kept) and its keys'
printed texts against their types. Those checks read the catalog once, when the statement is
planned. A column switched to a nondeterministic collation between that read and the private
query (and switched back after it, or not) made the printed key a row's text: one unit's
'Secret' among 200 'secret' rows printed as 'Secret' (with noise off), which tells that unit's
value. Now the catalog token the checks were made under (dpsql.execute.unique_units.
CATALOG_TOKEN_SQL) is read again after the query, in the round trip of the other proofs, and
another one refuses the statement (55000, nothing released). Deterministic (noise off: EXACT).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import ObjectNotInPrerequisiteState
from dpsql.session import SessionContext
from tests.helpers import EXACT, case_insensitive_collation
from tests.policies import PolicyMaker, private_table

SWITCH = "ALTER TABLE {t} ALTER COLUMN name TYPE text COLLATE ci"
SWITCH_BACK = 'ALTER TABLE {t} ALTER COLUMN name TYPE text COLLATE "default"'


@pytest.fixture(scope="module")
def db(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[tuple[Any, str]]:
    pf = make_policy(
        "keywin",
        base={"version": 1},
        tables={
            # keyed: the catalog proves one row per unit (the proofs' round trip exists)
            "public.k": private_table("pid", {"name": {"type": "text"}}),
            # no key: no proof read around the query before this fix
            "public.n": private_table("pid", {"name": {"type": "text"}}),
        },
        analysts={"a": {"budget": {"epsilon": 10000, "delta": 0.5}}},
    )
    dsn = make_db("keywin")
    with psycopg.connect(dsn, autocommit=True) as conn:
        case_insensitive_collation(conn)
    yield pf, dsn


def _reset(dsn: str, t: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {t}")
        key = "PRIMARY KEY" if t == "k" else ""
        conn.execute(f"CREATE TABLE {t} (pid integer {key}, name text)")
        conn.execute(f"INSERT INTO {t} VALUES (0, 'Secret')")  # the first row scanned
        conn.execute(f"INSERT INTO {t} SELECT i, 'secret' FROM generate_series(1, 200) i")


def _run(pf: Any, dsn: str, sql: str, ddl: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """``sql`` answered by an engine that runs ``ddl`` (another session) just before its first
    private query that reads rows (after every check the statement makes before it)."""
    e = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    real = e.backend.run
    done: list[int] = []

    def run(text: Any, *args: Any, **kw: Any) -> Any:
        if kw.get("private") and "LIMIT 0" not in str(text) and not done:
            done.append(1)
            with psycopg.connect(dsn, autocommit=True) as conn:
                for d in ddl:
                    conn.execute(d)
        return real(text, *args, **kw)

    e.backend.run = run  # type: ignore[method-assign]
    try:
        return list(e.execute(e.prepare(sql), SessionContext(analyst="a")).rows)
    finally:
        e.close()


STATEMENTS = [
    "SELECT name, COUNT(*) FROM {t} GROUP BY name",
    "SELECT name, COUNT(*) FROM {t} GROUP BY ROLLUP (name)",
    "SELECT name, COUNT(*) AS c, SUM(COUNT(*)) OVER (ORDER BY name) AS r FROM {t} GROUP BY name",
]


@pytest.mark.parametrize("t", ["k", "n"])
@pytest.mark.parametrize("sql", STATEMENTS)
@pytest.mark.parametrize("back", [False, True], ids=["switched", "switched-and-back"])
def test_a_collation_switched_before_the_query_refuses(
    db: tuple[Any, str], t: str, sql: str, back: bool
) -> None:
    pf, dsn = db
    _reset(dsn, t)
    ddl = (SWITCH.format(t=t), SWITCH_BACK.format(t=t)) if back else (SWITCH.format(t=t),)
    with pytest.raises(ObjectNotInPrerequisiteState, match="changed while the statement ran"):
        rows = _run(pf, dsn, sql.format(t=t), ddl)
        assert all(r[0] != "Secret" for r in rows), rows  # the leak, if it answered
    # switched back: the next run reads the catalog as it is, and answers (each text its own
    # group under a deterministic collation)
    if back:
        rows = _run(pf, dsn, sql.format(t=t), ())
        assert ("secret", 200) in [(r[0], int(r[1])) for r in rows], rows


@pytest.mark.parametrize("t", ["k", "n"])
def test_no_change_or_no_key_answers(db: tuple[Any, str], t: str) -> None:
    pf, dsn = db
    _reset(dsn, t)
    rows = _run(pf, dsn, f"SELECT name, COUNT(*) FROM {t} GROUP BY name", ())
    assert sorted((r[0], int(r[1])) for r in rows) == [("Secret", 1), ("secret", 200)], rows
    # a statement without keys releases no text: DDL in its window does not refuse it
    rows = _run(pf, dsn, f"SELECT COUNT(*) FROM {t}", (SWITCH.format(t=t),))
    assert int(rows[0][0]) == 201

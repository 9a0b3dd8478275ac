"""The catalog's one-row-per-unit proof holds only for an index that compares units as the bounded
SQL does (dpsql.execute.unique_units): the unit column's own collation and its type's default
operator class.

A case-insensitive (nondeterministic) collation on the unit column with a UNIQUE index under
``COLLATE "C"``: the index admits ``alice@x``, ``ALICE@x`` and ``Alice@x``, while every query
(``PARTITION BY`` the unit, ``COUNT(DISTINCT email)``) sees one unit with three rows. Taken as
proof, the plain aggregate counted all three (SUM 301 with R = 1 declared: one unit moved the
answer by 300 against a sensitivity of 100). Deterministic: the zero-noise source, fixed R = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.unique_units import unit_is_unique
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

ROWS = [("alice@x", 100), ("ALICE@x", 100), ("Alice@x", 100), ("bob@x", 1)]
TABLES = ("ci_c", "ci_ci", "c_pattern")


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("ucoll")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)"
        )
        # the index under a finer collation than the column's: not a proof
        conn.execute("CREATE TABLE ci_c (email text COLLATE ci NOT NULL, v integer)")
        conn.execute('CREATE UNIQUE INDEX ci_c_email ON ci_c (email COLLATE "C")')
        # the index under the column's own collation: a proof (one of the variants per unit)
        conn.execute("CREATE TABLE ci_ci (email text COLLATE ci PRIMARY KEY, v integer)")
        # a non-default operator class: not taken as a proof (conservative)
        conn.execute("CREATE TABLE c_pattern (email text NOT NULL, v integer)")
        conn.execute("CREATE UNIQUE INDEX c_pattern_email ON c_pattern (email text_pattern_ops)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO ci_c VALUES (%s, %s)", ROWS)
            cur.executemany("INSERT INTO c_pattern VALUES (%s, %s)", ROWS)
            cur.executemany("INSERT INTO ci_ci VALUES (%s, %s)", [ROWS[0], ROWS[3]])
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str, make_policy: PolicyMaker) -> Iterator[Engine]:
    cols = {"v": {"type": "integer", "bounds": [0, 100]}}
    pf = make_policy(
        "ucoll",
        base={"version": 1},
        tables={
            f"public.{t}": private_table("email", cols, rows=1, groups=1, unit_type="text")
            for t in TABLES
        },
        analysts={"a": {"budget": {"epsilon": 1000, "delta": 0.1}}},
    )
    e = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


@pytest.mark.parametrize(
    ("table", "unique"), [("ci_c", False), ("ci_ci", True), ("c_pattern", False)]
)
def test_the_proof_needs_the_columns_collation_and_default_opclass(
    engine: Engine, table: str, unique: bool
) -> None:
    p = engine.prepare(f"SELECT SUM(v) FROM {table}", "a")
    assert p.analysis is not None
    assert unit_is_unique(engine.backend, p.analysis) is unique


def test_a_unit_with_case_variants_keeps_one_row(engine: Engine) -> None:
    """R = 1: the unit alice@x (three spellings, one unit to the column's collation) adds 100."""
    p = engine.prepare("SELECT SUM(v), COUNT(*) FROM ci_c", "a")
    rows = engine.execute(p, SessionContext("a")).rows
    assert [(int(rows[0][0]), int(rows[0][1]))] == [(101, 2)]

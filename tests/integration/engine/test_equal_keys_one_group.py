"""Equal keys that print differently are one group to contribution bounding too.

``GROUP BY k`` puts ``1.0``, ``1.00`` and ``1.000`` of a NUMERIC (``-0`` and ``0`` of a float8)
in one group, released as one canonical text (:mod:`dpsql.execute.key_texts`). The row path ranks
a unit's rows per (unit, group) and its groups per unit by a keyed hash of the group
(:func:`dpsql.sql.rewrite.keyed_hash.group_hash`); hashing the key's *text* made each printed
form its own window partition, each keeping R rows: one unit put 3R rows into one released group
(its sensitivity is R). The keys are now hashed as values (``Analysis.hashed_keys``), so a unit
keeps at most R rows in the group. Deterministic: the bounded SQL is run without noise, on a
unit whose 3R rows of the group all have distinct values; the broken twin (the same statement's
SQL with the keys hashed as text) keeps 3R and is caught.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.private_sql import bounded_sql, salted
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

R, G = 2, 3  # G >= the printed forms: the text hash kept each form's R rows
# (key column, its three texts of one value)
FORMS = {"k": ("1.0", "1.00", "1.000"), "f": ("-0", "0", "-0")}
SQLS = [
    "SELECT {key}, COUNT(DISTINCT x) FROM t GROUP BY {key}",
    "SELECT {key}, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t GROUP BY {key}",
]


@pytest.fixture(scope="module")
def keys_dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("eqkeys")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer, k numeric, f float8, x numeric)")
        rows = []
        for i in range(3 * R):  # unit 1: R rows of each printed form, distinct values
            rows.append((1, FORMS["k"][i // R], FORMS["f"][i // R], i + 1))
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s::numeric, %s::float8, %s)", rows)
    return dsn


@pytest.fixture(scope="module")
def keys_engine(keys_dsn: str, make_policy: PolicyMaker) -> Iterator[Engine]:
    columns = {
        "k": {"type": "numeric"},
        "f": {"type": "float"},
        "x": {"type": "numeric", "bounds": [0, 100]},
    }
    pf = make_policy(
        "eqkeys",
        tables={"public.t": private_table("u", columns, rows=R, groups=G)},
        public_tables=[],
        fixed_bounds=True,
    )
    e = Engine(pf.policy, keys_dsn, pool_size=1, noise=EXACT)
    yield e
    e.close()


def kept_in_group(dsn: str, text: str) -> int:
    """The rows the bounded SQL ``text`` counts in the one group (COUNT(DISTINCT x), or the
    quantile's row count: the grouping set of the key alone, ``_dp_set`` = 1)."""
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(salted(text))
        names = [d.name for d in cur.description or ()]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    rows = [r for r in rows if r.get("_dp_set", 1) == 1]
    assert len(rows) == 1, rows  # one group, whatever its rows print as
    return int(rows[0]["_dp_m0"])


@pytest.mark.parametrize("key", sorted(FORMS))
@pytest.mark.parametrize("sql", SQLS)
def test_a_unit_keeps_r_rows_in_a_group_of_equal_keys(
    keys_engine: Engine, keys_dsn: str, sql: str, key: str
) -> None:
    prepared = keys_engine.prepare(sql.format(key=key))
    a = prepared.analysis
    assert a is not None and a.needs_selection  # groups ranked (partition selection)
    text = keys_engine.private_sql(prepared, a)
    assert kept_in_group(keys_dsn, text) == R
    # the broken twin: the keys hashed as text (before the fix) keeps R rows per printed form
    twin = bounded_sql(prepared, replace(a, hashed_keys=()))
    assert kept_in_group(keys_dsn, twin) == R * len(set(FORMS[key]))

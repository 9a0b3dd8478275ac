"""A quantile's rows keep the cells of the reference selection, for every kind of unit type.

The rewrite ranks a quantile's rows with hashes written for speed: the unit hashed as a value
with its type's own extended hash function (``keyed_hash.value_hash``; as text when the type
has no hash function), one text key with ``hashtextextended``, the unclamped value (as NUMERIC)
hashed with ``hash_numeric_extended``, the bucket computed before the sort and carried instead
of the value: packed into the hash's low bits when the statement has one bucketing, else ties
broken by the buckets (``rank_rows.pre_bucketed``, ``packed_order``). The reference
below writes the selection as documented (docs/mechanisms.md, "Choosing rows and groups"), in
plain SQL and the slow way: record hashes of the unit, the keys and the values
(``hash_record_extended``), each unit's rows ranked by (hash of the values with its low bits
replaced by the bucket) or (hash of the values, buckets), groups by (hash of unit and keys,
keys), buckets by ``width_bucket`` on the clamped values. Both must give the same count in every (group,
bucket) cell, on data with NULLs, repeated values, units over R rows and over G groups, a
numeric unit written ``1.0`` and ``1.00`` (one unit: one partition, one hash), for units of an
integer type, text, uuid, numeric, a domain over an integer, money and varbit (no hash
function: hashed as text), and an enum (a type the probe doesn't know: hashed as text).

Deterministic (fixed data, fixed salt, no noise): no false failures. The broken twin (the
reference without the group hash in the value order's seed: another selection) differs, so
the comparison can fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.group_keys import unit_type
from dpsql.execute.private_sql import SALT_MARKER
from dpsql.execute.selected_measures import split_bucket_rows
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.rewrite.keyed_hash import HASHED_TYPES
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

SALT = "0123456789abcdef"
R, G = 3, 2
UNITS = {  # the unit column's type and its value for unit number i (row number n)
    "int4": ("integer", "i"),
    "int8": ("bigint", "i * 4294967296"),
    "text": ("text", "'u' || i"),
    "uuid": ("uuid", "md5(i::text)::uuid"),
    # 1.0 and 1.00: one unit (equal), printed two ways
    "numeric": ("numeric", "i + CASE WHEN n % 2 = 0 THEN 0.0 ELSE 0.00 END"),
    "money": ("money", "i::money"),  # no hash function: hashed as text
    "varbit": ("varbit", "i::bit(16)::varbit"),  # no hash function
    # a domain over integer: PostgreSQL describes its columns as integer (hashed as one)
    "domain": ("uid_domain", "i"),
    "enum": ("uid_enum", "('u' || i)::uid_enum"),  # not a built-in type: hashed as text
}
COLUMNS = {
    "g": {"type": "text", "keys": ["a", "b", "c", "d"]},  # 4 keys > G: groups ranked
    "x": {"type": "numeric", "bounds": [0, 10]},
    "y": {"type": "integer", "bounds": [-5, 40]},
}
QUERIES = [
    "SELECT MEDIAN(x) FROM t",  # one unit partition, no group rank
    "SELECT g, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY x), MAX(y) FROM t GROUP BY g",
    "SELECT MIN(y), MEDIAN(x) FROM t",  # two values: a record hash, two buckets
]


@pytest.fixture(scope="module", params=sorted(UNITS))
def unit_engine(
    request: pytest.FixtureRequest, make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, str, str]]:
    kind = request.param
    pg_type, value = UNITS[kind]
    dsn = make_db(f"prebucket_{kind}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE DOMAIN uid_domain AS integer")
        labels = ", ".join(f"'u{i}'" for i in range(1, 301))
        conn.execute(f"CREATE TYPE uid_enum AS ENUM ({labels})")
        conn.execute(f"CREATE TABLE t (uid {pg_type}, g text, x numeric(6, 2), y integer)")
        # 300 units of 1 to 23 rows in 1 to 4 groups; x repeats (ties), is NULL for some rows,
        # and lies outside [0, 10] for others; y is an integer with NULLs and outliers
        conn.execute(
            f"""INSERT INTO t
                SELECT {value}, chr(97 + (hashint4(n * 1000 + i) & 3)),
                       CASE WHEN n % 17 = 0 THEN NULL
                            ELSE ((hashint4(n * 1000 + i + 1) & 1023) % 130 - 10) / 10.0 END,
                       CASE WHEN n % 13 = 0 THEN NULL ELSE (hashint4(n * 1000 + i + 2) & 63) - 10 END
                FROM generate_series(1, 300) i,
                     generate_series(1, 1 + (hashint4(i) & 1023) % 23) n"""
        )
    pf = make_policy(
        "prebucket",
        base={"version": 1},
        tables={"public.t": private_table("uid", COLUMNS, rows=R, groups=G, unit_type="text")},
        analysts={"a": {"budget": {"epsilon": 1000, "delta": 0.1}}},
    )
    e = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    yield e, dsn, kind
    e.close()


def _unit_seed(type_name: str) -> str:
    """The documented seed of a unit's hashes: its record hash seeded with the salt's hash when
    its type has a hash function, else its text's hash with the salt."""
    if type_name in HASHED_TYPES:
        return f"hash_record_extended(ROW(uid), hashtextextended('{SALT}', 0))"
    return f"hashtextextended(concat_ws('|', '{SALT}', CAST(uid AS text)), 0)"


Spec = tuple[str, Fraction, Fraction, int]  # (column, lo, grid_hi, buckets)


def _spec_of(m: Measure) -> Spec:
    assert m.arg is not None
    col = m.arg.sql("postgres").split(".")[-1].strip('"')
    return (col, m.lo, m.grid_hi if m.grid_hi is not None else m.hi, m.buckets)


def _specs(a: Analysis) -> list[Spec]:
    return list(dict.fromkeys(_spec_of(m) for m in a.measures if m.kind == "quantile"))


def reference_cells(
    dsn: str, a: Analysis, seed: str, *, group_seed: bool = True
) -> dict[tuple[Any, ...], int]:
    """(bucketing, group, bucket) -> count of kept rows, the slow way (module docstring)."""
    specs = _specs(a)
    cols = list(dict.fromkeys(s[0] for s in specs))  # the rewrite's order: _dp_v0, _dp_v1
    bounds = {c: COLUMNS[c]["bounds"] for c in cols}
    clamp = {  # (GREATEST ignores a NULL: NULL stays NULL)
        c: f"CASE WHEN {c} IS NOT NULL THEN LEAST(GREATEST({c}::numeric, {lo}), {hi}) END"
        for c, (lo, hi) in bounds.items()
    }
    grouped = bool(a.group_keys)
    h = f"hash_record_extended(ROW(g), {seed})" if grouped else seed
    raw = ", ".join(f"r_{c}" for c in cols)
    key = "g" if grouped else "''"
    clamped = ", ".join(f"{clamp[c]} AS v_{c}, {c}::numeric AS r_{c}" for c in cols)
    bucket = {  # NULL for a NULL value
        spec: f"CASE WHEN v_{c} IS NOT NULL THEN "
        f"LEAST(GREATEST(width_bucket(v_{c}, {lo}, {hi}, {b}), 1), {b}) - 1 END"
        for spec in specs
        for c, lo, hi, b in [spec]
    }
    value_hash = f"hash_record_extended(ROW({raw}), {'h' if group_seed else seed})"
    if len(specs) == 1:  # one bucketing: in the hash's low bits (as many as b + 2 needs), NULL as b
        (b,) = [spec[3] for spec in specs]
        order = (
            f"({value_hash} & {-(2 ** (b + 2).bit_length())}) | COALESCE({bucket[specs[0]]}, {b})"
        )
    else:
        order = ", ".join([value_hash, *bucket.values()])
    rows = f"SELECT uid, {key} AS g, {clamped}, {h} AS h FROM t WHERE g IN ('a', 'b', 'c', 'd')"
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY uid, g ORDER BY {order}) AS rn, "
        f"dense_rank() OVER (PARTITION BY uid ORDER BY h, g) AS gr FROM ({rows}) AS r"
    )
    kept = f"SELECT * FROM ({ranked}) AS k WHERE rn <= {R}"
    if grouped:
        kept += f" AND gr <= {G}"
    out: dict[tuple[Any, ...], int] = {}
    with psycopg.connect(dsn) as conn:
        for spec in specs:
            c = spec[0]
            sql = f"SELECT g, {bucket[spec]}, count(v_{c}) FROM ({kept}) AS s GROUP BY 1, 2"
            for g, bk, n in conn.execute(sql).fetchall():
                if n:
                    out[(spec, g, bk)] = n
    return out


def engine_cells(engine: Engine, sql: str) -> tuple[Analysis, dict[tuple[Any, ...], int], str]:
    """The analysis, (bucketing, group, bucket) -> count of the engine's SQL, and that SQL."""
    p = engine.prepare(sql)
    plan = engine.plan(p, SessionContext(analyst="a"))
    a = plan.analysis
    text = engine.private_sql(p, a).replace(SALT_MARKER, SALT)
    _, hist = split_bucket_rows(plan, list(engine.backend.run(text, private=True).rows))
    out: dict[tuple[Any, ...], int] = {}
    for (i, key), counts in hist.items():
        if i < 0:  # a quantile's interval ends' extra rows (selected_measures.more_key)
            continue
        cells = enumerate(counts.tolist()) if isinstance(counts, np.ndarray) else counts.items()
        for bk, n in cells:
            if n:
                out[(_spec_of(a.measures[i]), key[0] if key else "", bk)] = int(n)
    return a, out, text


@pytest.mark.parametrize("sql", QUERIES)
def test_cells_equal_the_reference_selection(
    unit_engine: tuple[Engine, str, str], sql: str
) -> None:
    engine, dsn, kind = unit_engine
    a, got, text = engine_cells(engine, sql)
    p = engine.prepare(sql)
    name = unit_type(engine, p, p.analysis)
    want_value = kind in ("int4", "int8", "text", "uuid", "numeric", "domain")
    assert (name in HASHED_TYPES) is want_value, name
    assert ("CAST(_dp_unit AS TEXT)" in text) is not want_value
    assert "_dp_q0" in text and "ORDER BY _dp_o" in text  # buckets before the sort
    # one bucketing: packed into the order key, read back after the ranking
    assert ("NULLIF(CAST((_dp_o & " in text) is (len(_specs(a)) == 1)
    want = reference_cells(dsn, a, _unit_seed(name))
    assert got == want
    assert len(want) > 20


def test_another_selection_is_caught(unit_engine: tuple[Engine, str, str]) -> None:
    """The twin: values ordered by a hash seeded with the unit's hash only (not the group's)
    keep other rows of the units over R rows in a group, and other cells."""
    engine, dsn, kind = unit_engine
    a, got, _ = engine_cells(engine, QUERIES[1])
    name = unit_type(engine, engine.prepare(QUERIES[1]), a)
    assert got != reference_cells(dsn, a, _unit_seed(name), group_seed=False)

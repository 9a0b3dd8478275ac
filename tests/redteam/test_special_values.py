"""NaN, ±Infinity, huge and NULL values in float columns, and NULL group keys, through partial
aggregates, NULL-preserving clamps, FILTER, CASE and ROLLUP/CUBE.

With noise off, every released value must equal a reference computed here in Python from
PostgreSQL's semantics: NaN sorts above every number (so it compares ``> 0`` and clamps to the
upper bound), ±Infinity clamp to the bounds, NULL is ignored by SUM/COUNT(x)/AVG, a unit with
more than R values counts as R values at its own mean (dpsql.sql.rewrite.bound_partials), and a
NULL group key is a group of its own, told apart from a rolled-up key by GROUPING(). No statement
may fail upstream (a failure would depend on the data).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT, unrounded
from tests.policies import PolicyMaker, private_table

R = 2
LO, HI = Fraction(-5), Fraction(5)
SPECIALS = ("NaN", "Infinity", "-Infinity", None, "1e308", "-1e308", "3.5", "-7")
KEYS = ("a", "b", "c")


def _rows() -> list[tuple[int, str | None, str | None, str | None]]:
    """(unit, f, g, k): 1-3 rows per unit; g has NULLs (no declared keys), k has NULLs (keys)."""
    out = []
    for u in range(1, 301):
        for j in range(1 + u % 3):
            f = SPECIALS[(u + j) % len(SPECIALS)]
            g = None if u % 10 == 0 else f"g{u % 4}"
            k = None if u % 9 == 0 else KEYS[u % 3]
            out.append((u, f, g, k))
    return out


def _clamped(f: str | None) -> Fraction | None:
    if f is None:
        return None
    if f in ("NaN", "Infinity"):
        return HI
    if f == "-Infinity":
        return LO
    return min(max(Fraction(float(f)), LO), HI)


def _positive(f: str | None) -> bool:  # PostgreSQL: NaN > 0 is true
    return f is not None and (f in ("NaN", "Infinity") or (f != "-Infinity" and float(f) > 0))


@pytest.fixture(scope="module")
def special_engine(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[Engine]:
    dsn = make_db("rtspecial")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE e (u integer, f float8, r real, g text, k text, x numeric DEFAULT 0.5)"
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO e (u, f, r, g, k) VALUES (%s, %s::float8, %s::real, %s, %s)",
                [
                    (u, f, f if f not in ("1e308", "-1e308") else None, g, k)
                    for u, f, g, k in _rows()
                ],
            )
    columns = {
        "f": {"type": "float8", "bounds": [int(LO), int(HI)]},
        "r": {"type": "real", "bounds": [int(LO), int(HI)]},
        "g": {"type": "text"},
        "k": {"type": "text", "keys": list(KEYS)},
        # declared integer, holds 0.5 upstream (a policy `dpsql check` would flag)
        "x": {"type": "integer", "bounds": [0, 10]},
    }
    # max 10 groups per unit: no unit is in more groups, nothing dropped, an exact reference
    table = private_table("u", columns, rows=R, groups=10)
    pf = make_policy("special", tables={"public.e": table}, public_tables=[])
    e = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def _reference(key: Callable[[tuple[Any, ...]], Any], keep: Callable[[str | None], bool]) -> dict:
    """Per group: [COUNT(*), COUNT(f), SUM(f)] under the partial-aggregate semantics."""
    by: dict[tuple[int, Any], list[str | None]] = defaultdict(list)
    for row in _rows():
        by[(row[0], key(row))].append(row[1])
    out: dict[Any, list[Fraction]] = defaultdict(lambda: [Fraction(0)] * 3)
    for (_, group), fs in by.items():
        vals = [v for v in (_clamped(f) for f in fs if keep(f)) if v is not None]
        total = sum(vals, Fraction(0))
        if len(vals) > R:
            total = total * R / len(vals)
        acc = out[group]
        acc[0] += min(len(fs), R)
        acc[1] += min(len(vals), R)
        acc[2] += min(max(total, R * LO), R * HI)
    return out


def _run(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    p = engine.prepare(sql)
    return list(engine.execute(p, SessionContext(analyst="analyst")).rows)


def _close(got: Any, want: Fraction) -> bool:
    """Equal up to the release grid (a power of two <= 1, dpsql.dp.mechanisms.grid_for): a
    zero-noise sum is still snapped to it. A clamping mistake moves a sum by 2.5 or more."""
    return abs(Fraction(got) - want) <= Fraction(1, 2)


def test_grand_total(special_engine: Engine) -> None:
    want = _reference(lambda r: (), lambda f: True)[()]
    ((n, nf, s, avg),) = _run(special_engine, "SELECT COUNT(*), COUNT(f), SUM(f), AVG(f) FROM e")
    assert (n, nf) == (want[0], want[1])
    assert _close(s, want[2])
    assert _close(avg, want[2] / want[1])


def test_real_column_and_case_of_both_signs(special_engine: Engine) -> None:
    (row,) = _run(special_engine, "SELECT SUM(r), SUM(CASE WHEN f > 0 THEN f ELSE -f END) FROM e")
    assert all(v is not None and v == v for v in row)  # finite numbers, no NaN


def test_rollup_over_a_key_with_nulls(
    special_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    unrounded(monkeypatch)  # compares exact values: before the presentation rounding
    want = _reference(lambda r: r[2], lambda f: True)
    total = _reference(lambda r: (), lambda f: True)[()]
    rows = _run(
        special_engine,
        "SELECT g, GROUPING(g), COUNT(*), COUNT(f), SUM(f) FROM e GROUP BY ROLLUP(g)",
    )
    seen = {}
    for g, grouping, n, nf, s in rows:
        expect = total if grouping == 1 else want[g]
        assert (n, nf) == (expect[0], expect[1]), (g, grouping)
        assert _close(s, expect[2]), (g, grouping, s, expect[2])
        seen[(g, grouping)] = True
    assert (None, 0) in seen and (None, 1) in seen  # the NULL group and the grand total


def test_cube_over_declared_keys_with_filter(special_engine: Engine) -> None:
    want = _reference(lambda r: r[3], _positive)
    total = _reference(lambda r: (), _positive)[()]
    rows = _run(
        special_engine,
        "SELECT k, GROUPING(k), SUM(f) FILTER (WHERE f > 0), COUNT(f) FILTER (WHERE f > 0) "
        "FROM e GROUP BY CUBE(k)",
    )
    assert {(k, gr) for k, gr, *_ in rows} == {*((k, 0) for k in KEYS), (None, 1)}
    for k, grouping, s, nf in rows:
        expect = total if grouping == 1 else want[k]
        assert nf == expect[1], (k, nf, expect)
        assert _close(s, expect[2]), (k, s, expect[2])


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUM(x) FROM e",
        "SELECT k, SUM(x) FROM e GROUP BY k",
        "SELECT g, SUM(x + 1) FROM e GROUP BY g",
    ],
)
def test_integral_sums_are_integers_whatever_the_upstream_type(
    special_engine: Engine, sql: str
) -> None:
    """An integral SUM is noised on a grid of 1 with no slack: the private SQL must return
    integers even when the column declared integer holds fractions upstream (x = 0.5)."""
    p = special_engine.prepare(sql)
    assert p.analysis is not None
    assert all(m.integral for m in p.analysis.measures if m.kind == "sum")
    rows = special_engine.backend.run(special_engine.private_sql(p, p.analysis), private=True).rows
    sums = [r[-1] for r in rows]
    assert sums and all(Fraction(v).denominator == 1 for v in sums), sums

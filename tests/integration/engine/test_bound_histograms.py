"""The per-unit numbers ``auto`` bounds are chosen from, as PostgreSQL counts them, equal a
reference computed here from the raw rows.

Property (deterministic, no noise): for each statement shape, :func:`dpsql.execute.auto_bounds.
histograms` (the SQL of :mod:`dpsql.sql.rewrite.measure_bounds`) gives, per item, exactly the
number of units in each bucket of the item's grid, where a unit's number is computed in Python
from its rows: its largest row count in a group or its row count (R), its number of groups (G),
its largest (smallest) value clamped into the declared bounds, or its largest (smallest)
per-group mean (a clamp), the total of its COUNT / SUM partials over all its groups (an L1 cap),
and a unit's bucket is the number of the item's thresholds at or below its number (as
``width_bucket``). The data has NULL values, units in several groups with different counts,
values outside the declared bounds and rows the WHERE clause or the key filter drops; any
shortcut in how the SQL reads the rows (one pass instead of several) must give the same counts.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction

import numpy as np
import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute import auto_bounds
from dpsql.session import SessionContext
from dpsql.sql.auto_bound_types import AutoItem
from tests.policies import build_policy, private_table

TABLE = private_table(
    "u",
    {
        "g": {"type": "integer", "keys": [0, 1, 2, 3]},  # 4 is in the data, not declared
        "h": {"type": "text"},
        "x": {"type": "numeric", "bounds": [0, 100]},
        "k": {"type": "integer", "keys": [0, 1]},  # 2 is in the data, not declared
    },
    rows="auto",
    groups="auto",
)
BASE = {
    "version": 1,
    "dataset": "hist",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    "analysts": {"analyst": {"budget": {"epsilon": 100, "delta": 1e-4}}},
}

Row = tuple[int, int, str, Decimal | None, int]


def _rows() -> list[Row]:
    """Units 0..299: 1 to 20 rows in up to 5 groups (g 4 undeclared) and up to 6 h values,
    values from -20 to 180 (outside [0, 100] at both ends) with NULLs."""
    out: list[Row] = []
    for u in range(300):
        for k in range(1 + (u * 7) % 20):
            g = (u + k * k) % (1 + u % 5)
            x = None if (u + k) % 11 == 0 else Decimal((u * 13 + k * 29) % 201 - 20) / 2
            out.append((u, g, f"h{(u * k) % (1 + u % 6)}", x, (u * 3 + k) % 3))
    return out


@pytest.fixture(scope="module")
def engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("hist")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer NOT NULL, g integer, h text, x numeric, k int)")
        with conn.cursor().copy("COPY t (u, g, h, x, k) FROM STDIN") as cp:
            for r in _rows():
                cp.write_row(r)
    e = Engine(build_policy(base=BASE, tables={"public.t": TABLE}), dsn, pool_size=2)
    try:
        yield e
    finally:
        e.close()


def _clamp(x: Decimal, lo: Fraction, hi: Fraction) -> Fraction:
    return min(max(Fraction(x), lo), hi)


def _number(it: AutoItem, rows: list[Row], group: Callable[[Row], object]) -> Fraction:
    """A unit's number for item ``it`` from its rows (those the statement reads)."""
    by_group: dict[object, list[Row]] = defaultdict(list)
    for r in rows:
        by_group[group(r)].append(r)
    if it.kind == "rows":
        return Fraction(max(len(v) for v in by_group.values()) if it.per_group else len(rows))
    if it.kind == "groups":
        return Fraction(len(by_group))
    if it.kind == "total":
        m = it.measure
        assert m is not None
        if m.kind == "count_rows":
            return Fraction(len(rows))
        xs = [r[3] for r in rows if r[3] is not None]
        if m.kind == "count_values":
            return Fraction(len(xs))
        return sum((abs(_clamp(x, m.lo, m.hi)) for x in xs), Fraction(0))
    parts: list[list[Fraction]] = [
        [_clamp(r[3], Fraction(0), Fraction(100)) for r in v if r[3] is not None]
        for v in (by_group.values() if it.group_mean else [rows])
    ]
    if it.group_mean:
        xs = [sum(p, Fraction(0)) / len(p) for p in parts if p]
    else:
        xs = parts[0]
    if not xs:
        return Fraction(0)  # NULL: distance 0
    d = max(xs) - it.anchor if it.kind == "value_hi" else it.anchor - min(xs)
    return max(d, Fraction(0))


def _expected(
    it: AutoItem, keep: Callable[[Row], bool], group: Callable[[Row], object]
) -> np.ndarray:
    units: dict[int, list[Row]] = defaultdict(list)
    for r in _rows():
        if keep(r):
            units[r[0]].append(r)
    hist = np.zeros(len(it.grid), dtype=np.int64)
    for rows in units.values():
        hist[bisect.bisect_right(it.thresholds, _number(it, rows, group))] += 1
    return hist


def _declared(r: Row) -> bool:
    return r[1] in (0, 1, 2, 3)


CASES: list[tuple[str, Callable[[Row], bool], Callable[[Row], object], list[tuple[str, bool]]]] = [
    # rows per group and the clamp (declared keys: G is their number, not chosen)
    (
        "SELECT g, COUNT(*), AVG(x) FROM t GROUP BY g",
        _declared,
        lambda r: r[1],
        [("rows", False), ("value_hi", False)],
    ),
    # two declared key columns (8 combinations), and their per-group means
    (
        "SELECT g, k, COUNT(*), AVG(x) FROM t GROUP BY g, k",
        lambda r: _declared(r) and r[4] in (0, 1),
        lambda r: (r[1], r[4]),
        [("rows", False), ("value_hi", False)],
    ),
    (
        "SELECT g, k, AVG(x) FROM t WHERE x > 10 GROUP BY g, k",
        lambda r: _declared(r) and r[4] in (0, 1) and r[3] is not None and r[3] > 10,
        lambda r: (r[1], r[4]),
        [("value_hi", True)],
    ),
    # G chosen too (no declared keys), with a WHERE clause
    (
        "SELECT h, COUNT(*), AVG(x) FROM t WHERE x < 60 GROUP BY h",
        lambda r: r[3] is not None and r[3] < 60,
        lambda r: r[2],
        [("rows", False), ("groups", False), ("value_hi", False)],
    ),
    # AVG per group at R = 1: the clamp from each unit's largest per-group mean
    ("SELECT g, AVG(x) FROM t GROUP BY g", _declared, lambda r: r[1], [("value_hi", True)]),
    # COUNT / SUM per group: L1 caps over a unit's groups, and G
    (
        "SELECT h, SUM(x), COUNT(x), COUNT(*) FROM t GROUP BY h",
        lambda r: True,
        lambda r: r[2],
        [("groups", False), ("total", False), ("total", False), ("total", False)],
    ),
    # no GROUP BY: R over all of a unit's rows, and the clamp
    (
        "SELECT COUNT(*), AVG(x) FROM t WHERE g <> 1",
        lambda r: r[1] != 1,
        lambda r: None,
        [("rows", False), ("value_hi", False)],
    ),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_histograms_equal_the_reference(engine: Engine, case: int) -> None:
    sql, keep, group, kinds = CASES[case]
    s = SessionContext(analyst="analyst", epsilon=Fraction(1))
    prepared = engine.prepare(sql, "analyst")
    a = engine.analysis(prepared, [])  # type: ignore[arg-type]
    pend = auto_bounds.pending(engine, prepared, s, a)  # type: ignore[arg-type]
    assert [(it.kind, it.group_mean) for it in pend.missing] == kinds
    got = auto_bounds.histograms(engine, a, pend.missing)  # type: ignore[arg-type]
    for it, h in zip(pend.missing, got, strict=True):
        want = _expected(it, keep, group)
        assert h.sum() > 100 and np.count_nonzero(want) > 1, it.kind  # the data spreads
        assert h.tolist() == want.tolist(), (it.kind, it.column)


# -- a unit the catalog proves unique: each unit's numbers read off its one row ------------------
UNIQUE_SQLS = [
    "SELECT g, COUNT(*), AVG(x) FROM p GROUP BY g",  # clamp (per-group mean at R = 1)
    "SELECT g, SUM(x), COUNT(x), COUNT(*) FROM p WHERE x < 90 GROUP BY g",  # totals, NULLs
    "SELECT COUNT(*), AVG(x), SUM(x) FROM p",
]


@pytest.fixture(scope="module")
def unique_engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    """``p``: the rows of ``t`` with the first row of each unit, unit PRIMARY KEY; ``t`` too."""
    dsn = make_db("histu")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer NOT NULL, g integer, h text, x numeric, k int)")
        with conn.cursor().copy("COPY t (u, g, h, x, k) FROM STDIN") as cp:
            for r in _rows():
                cp.write_row(r)
        conn.execute(
            "CREATE TABLE p AS SELECT DISTINCT ON (u) * FROM t ORDER BY u, g, h, x, k; "
            "ALTER TABLE p ADD PRIMARY KEY (u)"
        )
    policy = build_policy(base=BASE, tables={"public.t": TABLE, "public.p": TABLE})
    e = Engine(policy, dsn, pool_size=2)
    try:
        yield e
    finally:
        e.close()


@pytest.mark.parametrize("sql", UNIQUE_SQLS)
def test_unique_unit_histograms_without_grouping(unique_engine: Engine, sql: str) -> None:
    """With the catalog's proof the SQL has no GROUP BY of the unit, and counts the same units
    per bucket as the grouped SQL (run on the same, unique, rows)."""
    from dataclasses import replace

    from dpsql.sql.rewrite.measure_bounds import measure_bounds

    s = SessionContext(analyst="analyst", epsilon=Fraction(1))
    prepared = unique_engine.prepare(sql, "analyst")
    plan = unique_engine.plan(prepared, s, [])  # type: ignore[arg-type]
    a = plan.analysis
    assert a.unique_unit  # the PRIMARY KEY, read from the catalog
    pend = auto_bounds.pending(unique_engine, prepared, s, a)  # type: ignore[arg-type]
    assert pend.missing and not any(it.kind in ("rows", "groups") for it in pend.missing)
    assert "GROUP BY _dp_unit" not in measure_bounds(a, pend.missing).sql("postgres")
    got = auto_bounds.histograms(unique_engine, a, pend.missing)  # type: ignore[arg-type]
    grouped = replace(a, unique_unit=False)
    assert "GROUP BY _dp_unit" in measure_bounds(grouped, pend.missing).sql("postgres")
    want = auto_bounds.histograms(unique_engine, grouped, pend.missing)  # type: ignore[arg-type]
    for it, h, w in zip(pend.missing, got, want, strict=True):
        assert h.sum() > 100 and np.count_nonzero(w) > 1, it.kind  # the data spreads
        assert h.tolist() == w.tolist(), (it.kind, it.column)


def test_unique_unit_histograms_refused_without_the_proof(unique_engine: Engine) -> None:
    """The twin: the same SQL over ``t`` (several rows per unit) under a claimed proof would
    count a unit once per row; the catalog is read again before it runs, and it is refused."""
    from dataclasses import replace

    from dpsql.errors import ObjectNotInPrerequisiteState

    s = SessionContext(analyst="analyst", epsilon=Fraction(1))
    prepared = unique_engine.prepare("SELECT COUNT(*), AVG(x) FROM t", "analyst")
    a = unique_engine.plan(prepared, s, []).analysis  # type: ignore[arg-type]
    assert not a.unique_unit
    claimed = replace(a, unique_unit=True)
    pend = auto_bounds.pending(unique_engine, prepared, s, claimed)  # type: ignore[arg-type]
    with pytest.raises(ObjectNotInPrerequisiteState):
        auto_bounds.histograms(unique_engine, claimed, pend.missing)  # type: ignore[arg-type]

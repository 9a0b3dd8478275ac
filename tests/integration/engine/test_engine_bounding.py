"""Contribution bounding on partial aggregates, checked exactly against a reference in Python.

A small table with NULLs, values outside the declared bounds, units above the row bound R and one
unit in more groups than G. With noise off, every measure the rewritten SQL returns must equal the
reference semantics of :mod:`dpsql.sql.rewrite.bound_partials` (per unit and group: counts
LEAST(n, R); sums of clamped values, scaled by R/n above R values, integer sums rounded), and
removing one unit must move each measure by at most its stated sensitivity.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from sqlglot import exp

from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute.bias import avg_targets, target_of
from dpsql.execute.noise import release
from dpsql.session import SessionContext
from dpsql.sql.analysis import Measure, decomposable
from dpsql.sql.grouping_sets import SetsPlan
from tests.helpers import EXACT, kept, line_of
from tests.policies import PolicyMaker, private_table

R, G = 3, 2
GROUPS = ("a", "b", "c", "d")
X_LO, X_HI, K_LO, K_HI = Fraction(-10), Fraction(10), Fraction(0), Fraction(5)
HOPPER = 2001  # one row in every group: G-bounding drops two of them


def _rows() -> list[tuple[int, str, int | None, int | None]]:
    out: list[tuple[int, str, int | None, int | None]] = []
    for u in range(1, 121):  # light units: 1-3 rows in one group, some in a second group
        for i in range(1 + u % 3):
            x = None if (u + i) % 6 == 0 else (u * 7 + i * 3) % 31 - 15
            k = None if (u + i) % 11 == 0 else (u + i) % 7
            out.append((u, GROUPS[u % 4], x, k))
        if u % 5 == 0:
            out.append((u, GROUPS[(u + 1) % 4], u % 13 - 6, u % 4))
    for j, u in enumerate(range(1001, 1005)):  # heavy units: 7-16 rows in group a
        for i in range(7 + 3 * j):
            out.append((u, "a", None if i % 4 == 3 else (i % 5) * 4 - 6, i % 6))
    out += [(1003, "b", 40, 9)] * 5  # and 5 rows far above the bounds in group b
    out += [(HOPPER, g, 1, 1) for g in GROUPS]
    return out


def _source(u: int) -> str:
    return "hop" if u == HOPPER else "heavy" if u > 1000 else "light"


@pytest.fixture(scope="module")
def partials_dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("partials")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer, g text, x numeric, k integer, s text)")
        with conn.cursor() as cur:
            rows = [(*r, _source(r[0])) for r in _rows()]
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s)", rows)
    return dsn


@pytest.fixture(scope="module")
def pengine(partials_dsn: str, make_policy: PolicyMaker) -> Iterator[Engine]:
    columns = {
        "g": {"type": "text", "keys": list(GROUPS)},
        "x": {"type": "numeric", "bounds": [int(X_LO), int(X_HI)]},
        "k": {"type": "integer", "bounds": [int(K_LO), int(K_HI)]},
        "s": {"type": "text", "keys": ["light", "heavy", "hop"]},
    }
    pf = make_policy(
        "partials",
        tables={"public.t": private_table("u", columns, rows=R, groups=G)},
        public_tables=[],
        fixed_bounds=True,
    )
    e = Engine(pf.policy, partials_dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def _clamp(v: Fraction, lo: Fraction, hi: Fraction) -> Fraction:
    return min(max(v, lo), hi)


def _round(v: Fraction) -> Fraction:  # PostgreSQL's round(numeric): half away from zero
    d = Decimal(v.numerator) / Decimal(v.denominator)
    return Fraction(d.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _partial(m: Measure, rows: list[tuple[Any, ...]]) -> Fraction:
    """The reference partial of one unit in one group (rows: (x, k))."""
    if m.kind == "count_units":
        return Fraction(1)
    if m.kind == "count_rows":
        return Fraction(min(len(rows), R))
    assert m.arg is not None
    column = m.arg.find(exp.Column)
    assert column is not None
    col = 0 if column.name == "x" else 1
    vals = [Fraction(r[col]) for r in rows if r[col] is not None]
    if m.kind == "count_values":
        return Fraction(min(len(vals), R))
    lo, hi = (X_LO, X_HI) if col == 0 else (K_LO, K_HI)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    clamped = [_clamp(v, lo, hi) for v in vals]
    if m.kind == "sum":
        body, a, c = clamped, lo, hi
    elif m.kind == "sum_centered":
        body, a, c = [v - mid for v in clamped], -half, half
    else:
        body, a, c = [(v - mid) ** 2 for v in clamped], Fraction(0), half * half
    s = sum(body, Fraction(0))
    if len(vals) > R:
        s = s * R / len(vals)
        if m.integral:
            s = _round(s)
    return _clamp(s, R * min(a, Fraction(0)), R * max(c, Fraction(0)))


def _reference(measures: tuple[Measure, ...], skip: set[int]) -> dict[str, list[Fraction]]:
    by: dict[tuple[int, str], list[tuple[Any, ...]]] = defaultdict(list)
    for u, g, x, k in _rows():
        if u not in skip:
            by[(u, g)].append((x, k))
    out = {g: [Fraction(0)] * len(measures) for g in GROUPS}
    for (_, g), rows in by.items():
        for i, m in enumerate(measures):
            out[g][i] += _partial(m, rows)
    return out


SQL = (
    "SELECT g, COUNT(*), COUNT(x), SUM(x), SUM(k), AVG(k), VAR_POP(x), COUNT(DISTINCT u) "
    "FROM t WHERE s <> 'hop' GROUP BY g"
)


def test_partials_equal_the_reference(pengine: Engine, partials_dsn: str) -> None:
    measures, got = _measures_direct(pengine, partials_dsn, SQL)
    want = _reference(measures, {HOPPER})
    assert {m.kind for m in measures} >= {"count_rows", "sum", "sum_centered", "sum_sq_centered"}
    for g in GROUPS:
        for i, m in enumerate(measures):
            tol = Fraction(0) if m.integral else Fraction(1, 10**12)  # NUMERIC division digits
            assert abs(got[g][i] - want[g][i]) <= tol, (g, m.key, got[g][i], want[g][i])


def test_end_to_end_exact(pengine: Engine) -> None:
    sql = "SELECT g, COUNT(*), SUM(k), COUNT(DISTINCT u) FROM t WHERE s <> 'hop' GROUP BY g"
    p = pengine.prepare(sql)
    assert p.analysis is not None
    want = _reference(p.analysis.measures, {HOPPER})
    rows = pengine.execute(p, SessionContext(analyst="analyst")).rows
    for g, *vals in rows:
        assert [Fraction(v) for v in vals] == want[g], g


def test_each_unit_keeps_at_most_g_groups(pengine: Engine, partials_dsn: str) -> None:
    sql = "SELECT g, COUNT(DISTINCT u), COUNT(*) FROM t GROUP BY g"
    measures, got = _measures_direct(pengine, partials_dsn, sql)
    base = _reference(measures, {HOPPER})
    extra = {g: [got[g][i] - base[g][i] for i in range(2)] for g in GROUPS}
    assert all(d in ([0, 0], [1, 1]) for d in extra.values()), extra
    assert sum(d[0] for d in extra.values()) == G


@pytest.mark.parametrize("unit", [1003, 1004, 10, HOPPER])
def test_removing_a_unit_moves_each_measure_by_at_most_its_sensitivity(
    pengine: Engine, partials_dsn: str, unit: int
) -> None:
    sql = "SELECT g, COUNT(*), COUNT(x), SUM(x), SUM(k), AVG(k), VAR_POP(x), COUNT(DISTINCT u) FROM t GROUP BY g"
    measures, full = _measures_direct(pengine, partials_dsn, sql)
    with psycopg.connect(partials_dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("DELETE FROM t WHERE u = %s", (unit,))
        text = _private_sql(pengine, sql)
        rows = conn.execute(text).fetchall()
        conn.execute("ROLLBACK")
    less = {r[0]: [Fraction(v) for v in r[1 : 1 + len(measures)]] for r in rows}
    for i, m in enumerate(measures):
        c = m.per_row() * (1 if m.kind == "count_units" else R)
        l1 = sum((abs(full[g][i] - less.get(g, [Fraction(0)] * len(measures))[i]) for g in full),
                 Fraction(0))  # fmt: skip
        assert l1 <= G * c, (unit, m.key, l1)
        assert max(abs(full[g][i] - less.get(g, [0] * len(measures))[i]) for g in full) <= c


def test_row_path_sorts_once_and_matches(pengine: Engine, partials_dsn: str) -> None:
    """COUNT(DISTINCT x) keeps rows (not decomposable); light units are all kept: exact. (x:
    numeric; k's few bounded values are counted per key, :func:`derived_keys.bounded_keys`.)"""
    sql = "SELECT g, COUNT(DISTINCT x) FROM t WHERE s = 'light' GROUP BY g"
    text = _private_sql(pengine, sql)
    with psycopg.connect(partials_dsn) as conn:
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + text).fetchall())
        got = dict(conn.execute(text).fetchall())
    sorts = [line for line in plan.splitlines() if "Sort Key: t.u" in line]  # by unit
    # one sort, by unit then the group's keyed hash (the one text key hashed by its own type's
    # function, seeded by the unit's keyed hash: 057de7a)
    assert len(sorts) == 1 and "t.u, (COALESCE(hashtextextended(t.g," in sorts[0], plan
    want: dict[str, set[int]] = defaultdict(set)
    for u, g, x, _ in _rows():
        if u < 1000 and x is not None:
            want[g].add(x)
    assert got == {g: len(v) for g, v in want.items()}


def test_partial_path_ranks_partials_not_rows(pengine: Engine, partials_dsn: str) -> None:
    """G-bounding needed (4 keys > G): the rows are aggregated into one partial per (unit, group)
    in (unit, keys) order (one sort of the rows by their plain columns, a sorted aggregation:
    no hash table of every (unit, group)); the ranking by the groups' keyed hash then sorts only
    each unit's few partials (an incremental sort, presorted by unit), not all of them."""
    text = _private_sql(pengine, "SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g")
    assert "_dp_parts" in text and "_dp_gr" in text and "RANDOM" not in text.upper()
    with psycopg.connect(partials_dsn) as conn:
        plan = [r[0] for r in conn.execute("EXPLAIN " + text).fetchall()]
    shown = "\n".join(plan)
    rows = [line for line in plan if "Sort Key: t.u" in line]
    assert [line.strip() for line in rows] == ["Sort Key: t.u, t.g"], shown  # rows sorted once
    assert any("GroupAggregate" in line for line in plan), shown  # partials in that order
    assert any("Group Key: t.u, t.g" in line for line in plan), shown
    key = "Sort Key: _dp_parts._dp_unit, (COALESCE(hashtextextended(_dp_parts."
    at = [i for i, line in enumerate(plan) if key in line]
    assert len(at) == 1, shown
    assert "Incremental Sort" in plan[at[0] - 1], shown  # each unit's partials only
    assert "Presorted Key: _dp_parts._dp_unit" in plan[at[0] + 1], shown


def _private_sql(engine: Engine, sql: str) -> str:
    p = engine.prepare(sql)
    assert p.analysis is not None
    return engine.private_sql(p, p.analysis)


def _measures_direct(
    engine: Engine, dsn: str, sql: str
) -> tuple[tuple[Measure, ...], dict[str, list[Fraction]]]:
    p = engine.prepare(sql)
    assert p.analysis is not None and decomposable(p.analysis)
    n = len(p.analysis.measures)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(engine.private_sql(p, p.analysis)).fetchall()
    return p.analysis.measures, {r[0]: [Fraction(v) for v in r[1 : 1 + n]] for r in rows}


def test_the_source_changes_neither_the_charge_nor_the_error_bars(
    pengine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zero-noise source takes the noise away and nothing else: the statement is planned and
    charged as on the product's source (same mechanisms, same epsilon spent), and the interval
    of SUM(x) (mixed-sign values: no removed-mass estimate) is as wide on either source: twice
    the mechanism's half-width at 0.95, up to the outward rounding of its ends (a step of about
    1/100 of it), around the exact sum on the zero-noise source. Deterministic."""
    sql = "SELECT g, SUM(x) FROM t GROUP BY g"
    s = SessionContext()
    noisy = Engine(pengine.policy, pengine.backend.dsn, pool_size=1)
    try:
        p, q = pengine.prepare(sql), noisy.prepare(sql)
        plan, other = pengine.plan(p, s), noisy.plan(q, s)
        assert not isinstance(plan, SetsPlan) and not isinstance(other, SetsPlan)
        assert [m.mechanism for m in plan.measures] == [m.mechanism for m in other.measures]
        assert (plan.epsilon, plan.delta) == (other.epsilon, other.delta)
        spent = [e.execute(e.prepare(sql), s).epsilon_spent for e in (pengine, noisy)]
        assert spent[0] == spent[1] > 0
    finally:
        noisy.close()
    a = plan.analysis
    (stat,) = a.statistics
    assert target_of(stat, plan) is None and avg_targets(stat, plan) is None
    rows = pengine.backend.run(pengine.private_sql(p, a), private=True).rows
    args = (plan, rows, pengine.group_types(p, a), pengine.declared_keys(a), 0.95)
    exact = release(*args, EXACT)
    # several rows a unit: the interval covers the noise only, and the notice disowns it
    # (NULL columns, issue 16); the noise's interval it states is read with it kept
    line = line_of(exact.notes, "SUM(x)")
    assert "covers the noise only" in line and "columns are NULL" in line, line
    assert all(iv == [None] for iv in exact.intervals), exact.intervals
    kept(monkeypatch)
    exact, drawn = release(*args, EXACT), release(*args, CSPRNG)
    w = plan.measure_plan(stat.measures[0]).mechanism.half_width(0.95)
    step = 10.0 ** (math.floor(math.log10(w)) - 2)
    assert len(exact.stats) == len(drawn.stats) == len(GROUPS)
    for value, (iv,), (div,) in zip(exact.stats, exact.intervals, drawn.intervals, strict=True):
        assert iv is not None and div is not None
        for lo, hi in (iv, div):
            assert 2 * w <= hi - lo <= 2 * w + 2 * step + 1e-9, (lo, hi, w)
        assert abs((iv[0] + iv[1]) / 2 - float(value[0])) <= step + 1e-9, (iv, value)

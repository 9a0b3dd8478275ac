"""Values outside a column's declared bounds under MEDIAN, percentiles, MIN and MAX: counted
privately, and said (issue 16), as for SUM, AVG, VARIANCE and STDDEV
(tests/integration/engine/test_outside_bounds.py, test_outside_spread.py).

A quantile's value is clamped into the declared range before it is bucketed, so its answer and
interval hold the quantile of the values so counted: right when the true quantile lies inside
the range (the clamp keeps the order), not when it lies among the values beyond it. The rows of
a quantile statement carry their bucket through the ranking, coded -1 / B for a value below /
above the range (``dpsql.sql.rewrite.buckets.pre_bucket``), and the plan releases, at
``ALARM_SHARE`` (1/80) of the statement's epsilon taken from the answer (the charge is
unchanged), the count of units whose first kept row (in their first kept group) has such a
code: each unit once (L1 sensitivity 1, ``dpsql.sql.alarms.quantile_alarms``).

The same two tables as test_outside_bounds (20,000 units, 1-3 rows each, 4 declared groups,
R = 3, G = 2: ranked), v declared [0, 100]: ``o`` with every 10th unit's values all at 150
(2,000 units, 10%), ``c`` with none outside.

Deterministic (no noise): the bounded SQL's count is exactly 2,000 on ``o`` (each outside unit's
first kept row is outside: all its rows are) and 0 on ``c``; the charge is the statement's
epsilon, the count's 1/80 of it. The broken twin (a count that tests only the code of values
below the range) counts 0 on ``o`` and does not warn: both tests catch it.

Statistical, at epsilon 2 (the count at 1/40: Laplace scale 40): the warning's threshold
40 ln(1 / 2e-6) = 525 is passed with probability <= 1e-6 when no unit is outside (one answer
per statement on ``c``: false warning <= 1e-6 each); on ``o`` the total is 2,000, missed only
if the noise is below -1,475: probability 0.5 exp(-36.9) < 1e-16 per answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from sqlglot import exp

from dpsql.engine import Engine
from dpsql.execute.bias import outside_plans
from dpsql.execute.grouping_sets import private_sqls
from dpsql.execute.private_sql import SALT_MARKER
from dpsql.session import SessionContext
from dpsql.sql.alarms import ALARM_SHARE
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan
from dpsql.sql.rewrite import buckets
from dpsql.sql.rewrite.rank_rows import packed_order
from tests.helpers import EXACT, ledgered_engine
from tests.integration.engine.test_outside_bounds import BASE, POLICY, TABLE, UNITS, WARNING
from tests.integration.engine.test_outside_bounds import dsn as dsn  # the same tables
from tests.policies import build_policy, private_table

EPS = Fraction(2)
SQLS = [
    "SELECT MEDIAN(v) FROM {t}",
    "SELECT g, MAX(v) FROM {t} GROUP BY g",
    "SELECT g, MIN(v), PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY v) FROM {t} GROUP BY g",
    # beside other measures (rows ranked by their text, no bucket codes): the count tests the
    # unclamped value, and speaks for the AVG of the same values too
    "SELECT MIN(v), MAX(v), AVG(v) FROM {t}",
    "SELECT g, MEDIAN(v), COUNT(DISTINCT v) FROM {t} GROUP BY g",
]
QUANTILES = (
    "MEDIAN(v): ",
    "MAX(v): ",
    "MIN(v): ",
    "PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY v): ",
)
HEADS = (*QUANTILES, "AVG(v): ")


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    with ledgered_engine(POLICY, dsn, "dpsql_outq") as e:
        yield e


def _plan(engine: Engine, sql: str) -> Plan:
    plan = engine.plan(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    assert isinstance(plan, Plan)
    return plan


def _alarm_total(engine: Engine, sql: str) -> int:
    """The bounded SQL's count column (after the measures) over its groups' rows (the rows of
    the grouping set of the groups alone: the others are bucket cells)."""
    plan = _plan(engine, sql)
    a = plan.analysis
    # (a quantile of all the rows also counts its rows past the bounds: dpsql.sql.bias, after)
    assert all(b.target.measure.kind == "quantile" for b in plan.bias), plan
    assert len(plan.alarms) == 1, plan
    rows = engine.backend.run(
        engine.private_sql(engine.prepare(sql, "analyst"), a), private=True
    ).rows
    x0 = len(a.group_keys) + len(a.measures) + (1 if a.needs_selection else 0)
    full = max(int(r[-1]) for r in rows)  # GROUPING(buckets) of the groups' own rows
    return sum(int(r[x0]) for r in rows if int(r[-1]) == full)


@pytest.mark.parametrize("sql", SQLS)
def test_the_sql_counts_each_unit_outside_once(engine: Engine, sql: str) -> None:
    assert _alarm_total(engine, sql.format(t="o")) == UNITS // 10
    assert _alarm_total(engine, sql.format(t="c")) == 0


@pytest.mark.parametrize("sql", SQLS)
def test_the_charge_is_unchanged(engine: Engine, sql: str) -> None:
    plan = _plan(engine, sql.format(t="o"))
    (x,) = plan.alarms  # one for MIN(v) and PERCENTILE_CONT(v): one bucketing
    assert plan.cost.epsilon == EPS and x.outside.epsilon == EPS * ALARM_SHARE
    assert x.outside.sensitivity == 1  # ungrouped, or ranked groups: each unit once
    quantiles = {m.key for m in plan.analysis.measures if m.kind == "quantile"}
    assert quantiles <= set(x.keys)
    answer = sum((c.epsilon for mp in plan.measures for c in mp.costs), Fraction(0))
    # a quantile of all the rows: its left-out count's share too (dpsql.sql.bias.BIAS_SHARE)
    answer += sum((b.cost.epsilon for b in plan.bias), Fraction(0))
    assert answer == EPS * (1 - ALARM_SHARE)


def _lines(engine: Engine, sql: str) -> list[str]:
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    return [n for n in r.notices if n.startswith(HEADS)]


@pytest.mark.parametrize("sql", SQLS)
def test_the_notice_warns_when_many_units_are_outside(engine: Engine, sql: str) -> None:
    lines = _lines(engine, sql.format(t="o"))
    warned = [n for n in lines if WARNING in n]
    stats = sum(1 for h in HEADS if h.split(":")[0] in sql)
    assert len(warned) == stats, lines  # one warning line per statistic
    assert all("NOT cover" in n for n in warned), warned
    assert all(n.count(WARNING) == 1 for n in warned), warned  # said once
    # a quantile's interval line says what it holds, no longer the premise the data breaks
    rest = [n for n in lines if WARNING not in n]
    assert len(rest) == sum(1 for h in QUANTILES if h.split(":")[0] in sql), rest
    assert not any("assumes every v" in n for n in rest), rest


@pytest.mark.parametrize("sql", SQLS)
def test_no_warning_when_no_unit_is_outside(engine: Engine, sql: str) -> None:
    """The clean twin: the same statement on ``c`` (false warning <= 1e-6)."""
    lines = _lines(engine, sql.format(t="c"))
    assert lines and all(WARNING not in n for n in lines), lines
    assert all("assumes every v lies in its declared range" in n for n in lines), lines


def test_a_free_repeat_says_the_same(engine: Engine) -> None:
    sql = SQLS[0].format(t="o")
    first = _lines(engine, sql)
    assert first == _lines(engine, sql)


def test_explain_lists_the_count_and_its_epsilon(engine: Engine) -> None:
    """EXPLAIN shows the count among the statement's releases, at its 1/80 (nothing spent)."""
    sql = "EXPLAIN " + SQLS[1].format(t="o")
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", EPS))
    text = "\n".join(str(row[0]) for row in r.rows)
    line = next((ln for ln in text.splitlines() if "outside declared range of" in ln), "")
    assert f"eps={float(EPS * ALARM_SHARE):g}" in line and "L1=1" in line, text


def _below_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken twin: the count tests only for a value below the range (its code, or its
    unclamped value)."""
    real = buckets.outside_counts

    def below_only(*args: object, **kwargs: object) -> list[exp.Expr]:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        for e in out:
            for o in list(e.find_all(exp.Or)):
                o.replace(o.this.copy())
        return out

    monkeypatch.setattr(buckets, "outside_counts", below_only)
    # the module (the package exports its function of the same name)
    module = sys.modules["dpsql.sql.rewrite.bound_contributions"]
    monkeypatch.setattr(module, "outside_counts", below_only)


@pytest.mark.parametrize("sql", [SQLS[1], SQLS[3]], ids=["pre-bucketed", "row path"])
def test_the_below_only_twin_is_caught(dsn: str, monkeypatch: pytest.MonkeyPatch, sql: str) -> None:
    _below_only(monkeypatch)
    with ledgered_engine(POLICY, dsn, "dpsql_outq_twin") as e:
        sql = sql.format(t="o")
        assert _alarm_total(e, sql) == 0  # != 2,000: the SQL count test fails
        lines = _lines(e, sql)
        assert lines and not any(WARNING in n for n in lines)  # the warning test fails


# -- the packed order key's width (review19) ---------------------------------------------------
# One bucketing of B buckets is packed into the order hash's low bits (rank_rows.
# packed_order): the clamped value's bucket (0 .. B - 1, NULL as B) without an outside count,
# its code + 1 (0 .. B + 1, NULL as B + 2) with one. Both keys must mask the same hash bits, the
# width B + 2 needs, so that the rows of a unit sort the same wherever their buckets differ:
# then the kept rows hold the same buckets with or without the count. Checked in PostgreSQL on
# pairs of rows whose hashes differ in one bit only, at every bit up to the width, for bucket
# counts where B + 2 needs one more bit than B (6, 7, 14, 15, 1022, 1023, 4094, 4095) and where it doesn't.
# Deterministic. The broken twin (the key without codes masking B's own bit length, as before
# session 20) orders the pair differently at bit k for B = 2^k - 2 and 2^k - 1.
WIDTHS = (6, 7, 8, 14, 15, 126, 127, 1022, 1023, 1024, 4094, 4095, 4096)


def _pairs(size: int) -> list[tuple[int, int | None, int | None]]:
    """(hash, clamped bucket, code) rows, two by two: hashes equal but for one bit, buckets
    (and codes: a value in the range, or one beyond it) apart, in both orders."""
    base = 0x2B5E_9C31_7A40_0000  # no low bits set: each pair differs in bit j only
    cells = [((size - 1, size - 1), (0, 0)), ((size - 1, size), (0, -1)), ((None, None), (0, -1))]
    out: list[tuple[int, int | None, int | None]] = []
    for j in range((size + 2).bit_length() + 1):
        for hi, lo in cells:
            for first, second in ((hi, lo), (lo, hi)):
                out += [(base, *first), (base | (1 << j), *second)]
    return out


def _keys(dsn: str, size: int, narrow: bool) -> list[tuple[Any, ...]]:
    """The two packed keys (without, with codes) of each row of :func:`_pairs`, and the
    bucket and code each reads back; ``narrow``: the broken twin's key without codes."""
    hv = exp.column("hv")
    plain = packed_order(hv, exp.alias_(exp.column("c"), "_dp_q0"), size)
    coded = packed_order(hv, exp.alias_(exp.column("code"), "_dp_q0"), size, coded=True)
    assert plain is not None and coded is not None
    key = plain[0]
    if narrow:
        bits = (size + 2).bit_length()
        for lit in key.find_all(exp.Literal):
            if lit.this == str(2**bits):  # -2^b: a negated literal
                lit.replace(exp.Literal.number(2 ** size.bit_length()))
    rows = ", ".join(
        f"({n}, {h}::bigint, {'NULL' if c is None else c}, {'NULL' if d is None else d})"
        for n, (h, c, d) in enumerate(_pairs(size))
    )
    k0, k1 = key.sql("postgres"), coded[0].sql("postgres")
    keyed = f"SELECT n, {k0} AS k0, {k1} AS k1 FROM (VALUES {rows}) AS t(n, hv, c, code)"
    back0 = plain[1].sql("postgres").replace("_dp_o", "k0")
    back1 = coded[1].sql("postgres").replace("_dp_o", "k1")
    with psycopg.connect(dsn) as conn:
        sql = f"SELECT k0, k1, {back0}, {back1} FROM ({keyed}) AS s ORDER BY n"
        return list(conn.execute(sql).fetchall())


def _disagreements(dsn: str, size: int, narrow: bool = False) -> int:
    """Pairs whose two keys sort them differently (their buckets differ in every pair)."""
    got = _keys(dsn, size, narrow)
    if not narrow:  # each key reads its bucket / code back
        assert [(r[2], r[3]) for r in got] == [(c, d) for _, c, d in _pairs(size)]
    return sum(
        (got[i][0] < got[i + 1][0]) != (got[i][1] < got[i + 1][1]) for i in range(0, len(got), 2)
    )


@pytest.mark.parametrize("narrow", [False, True], ids=["key", "narrow twin"])
def test_both_keys_mask_the_same_hash_bits(dsn: str, narrow: bool) -> None:
    wrong = {size: _disagreements(dsn, size, narrow) for size in WIDTHS}
    if narrow:  # the twin: caught exactly where B + 2 needs one more bit than B
        crossing = {s for s in WIDTHS if (s + 2).bit_length() > s.bit_length()}
        assert crossing == {6, 7, 14, 15, 126, 127, 1022, 1023, 4094, 4095}
        assert {s for s, n in wrong.items() if n} == crossing, wrong
    else:
        assert not any(wrong.values()), wrong


# -- the other shapes: one row per unit, row privacy, grouping sets, joins ---------------------
# Rows not ranked per unit (a unique unit: ``uo``/``uc``, uid a primary key, one row each with
# o's/c's first value; ``privacy_unit: row``: ``ro``/``rc``, copies of o/c) count every row
# outside, each unit's one row in its one group: L1 sensitivity 1, the exact number. Grouping
# sets: each set's own plan counts, as the single GROUP BY over its keys. Joins (of o or c with
# o on their unit, each capped at R before the join; of o or c with a public table): the joined
# rows are ranked per unit as one table's rows are, each unit counted once by its first kept
# row. One statement per shape, deterministic: the SQL's count (each grouping set's) is the
# exact number on o and 0 on c, and the answer on the zero-noise source (tests.helpers.EXACT:
# the count released as it is) warns on o and states the premise on c, never both (the
# threshold's false-warning rate is the statistical tests' above).
SHAPE_POLICY = build_policy(
    base=BASE,
    tables={
        "public.o": TABLE,
        "public.c": TABLE,
        **{f"public.u{t}": TABLE for t in "oc"},
        **{
            f"public.r{t}": private_table(
                "row",
                {
                    "g": {"type": "text", "keys": ["a", "b", "c", "d"]},
                    "v": {"type": "numeric", "bounds": [0, 100], "clamp": "bounds"},
                },
                rows=None,
                groups=None,
            )
            for t in "oc"
        },
    },
    public_tables=["public.names"],
)
SHAPES = {  # (statement over {t} = o or c, what its count counts on o)
    "unique unit": ("SELECT g, MAX(v) FROM u{t} GROUP BY g", "SELECT count(*) FROM uo WHERE v > 100"),
    "row privacy": ("SELECT MEDIAN(v), AVG(v) FROM r{t}", "SELECT count(*) FROM ro WHERE v > 100"),
    "rollup": ("SELECT g, MIN(v) FROM {t} GROUP BY ROLLUP (g)", None),
    "private join": ("SELECT MEDIAN(x.v) FROM {t} AS x JOIN o AS y ON x.uid = y.uid", None),
    "public join": ("SELECT n.name, MAX(x.v) FROM {t} AS x JOIN names AS n ON x.g = n.g GROUP BY n.name", None),
    # SUM, AVG, VARIANCE, STDDEV where no bias target counts (rows not ranked per unit, no
    # clamp: auto): each its own count, every row outside (dpsql.sql.alarms.alarm_measures)
    "unique unit SUM": ("SELECT g, SUM(v) FROM u{t} GROUP BY g", "SELECT count(*) FROM uo WHERE v > 100"),
    "unique unit AVG": ("SELECT AVG(v) FROM u{t}", "SELECT count(*) FROM uo WHERE v > 100"),
    "unique unit VARIANCE": ("SELECT g, VARIANCE(v) FROM u{t} GROUP BY g", "SELECT count(*) FROM uo WHERE v > 100"),
    "row privacy SUM": ("SELECT g, SUM(v) FROM r{t} GROUP BY g", "SELECT count(*) FROM ro WHERE v > 100"),
    "row privacy STDDEV": ("SELECT STDDEV(v) FROM r{t}", "SELECT count(*) FROM ro WHERE v > 100"),
    "private join SUM": ("SELECT x.g, SUM(x.v) FROM {t} AS x JOIN o AS y ON x.uid = y.uid GROUP BY x.g", None),
    "private join AVG": ("SELECT AVG(x.v) FROM {t} AS x JOIN o AS y ON x.uid = y.uid", None),
    "rollup SUM": ("SELECT g, SUM(v) FROM {t} GROUP BY ROLLUP (g)", None),
    "rollup VARIANCE": ("SELECT g, VARIANCE(v) FROM {t} GROUP BY ROLLUP (g)", None),
}  # fmt: skip
SHAPE_EPS = Fraction(4)


@pytest.fixture(scope="module")
def shapes(dsn: str) -> Iterator[Engine]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in "oc":
            conn.execute(f"CREATE TABLE u{t} (uid integer PRIMARY KEY, g text NOT NULL, v numeric)")
            conn.execute(f"INSERT INTO u{t} SELECT DISTINCT ON (uid) * FROM {t} ORDER BY uid")
            conn.execute(f"CREATE TABLE r{t} AS SELECT * FROM {t}")
        conn.execute("CREATE TABLE names (g text, name text)")
        conn.execute("INSERT INTO names VALUES ('a', 'A'), ('b', 'B'), ('c', 'C'), ('d', 'D')")
    e = Engine(SHAPE_POLICY, dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def _set_totals(engine: Engine, sql: str) -> list[int]:
    """Each measurement's count over its groups (one per grouping set; one without)."""
    p = engine.prepare(sql, "analyst")
    plan = engine.plan(p, SessionContext("analyst", SHAPE_EPS))
    subs = [s.plan for s in plan.sets] if isinstance(plan, SetsPlan) else [plan]
    texts = private_sqls(engine, p, plan.analysis)
    out = []
    for sub, text in zip(subs, texts, strict=True):
        # the bias targets' outside counts (a SUM, AVG on the ranked path), then the alarms'
        mechs = [b.outside for b in outside_plans(sub)] + [x.outside for x in sub.alarms]
        assert mechs and all(m is not None and m.sensitivity == 1 for m in mechs)
        if sub.alarms:
            share = sub.cost.epsilon * ALARM_SHARE / len(sub.alarms)
            assert all(x.outside.epsilon == share for x in sub.alarms)
        a = sub.analysis
        rows = engine.backend.run(text.replace(SALT_MARKER, "s"), private=True).rows
        x0 = len(a.group_keys) + len(a.measures) + (1 if a.needs_selection else 0)
        if any(m.kind == "quantile" for m in a.measures):  # GROUPING(buckets) last
            full = max(int(r[-1]) for r in rows)
            rows = [r for r in rows if int(r[-1]) == full]
        out += [sum(int(r[x0 + j]) for r in rows) for j in range(len(mechs))]
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_counts_and_says_it(shapes: Engine, dsn: str, shape: str) -> None:
    sql, truth = SHAPES[shape]
    want = UNITS // 10
    if truth is not None:
        with psycopg.connect(dsn) as conn:
            want = int(conn.execute(truth).fetchone()[0])  # type: ignore[index]
    got = _set_totals(shapes, sql.format(t="o"))
    assert got and all(n == want for n in got), (got, want)
    assert not any(_set_totals(shapes, sql.format(t="c")))
    s = SessionContext("analyst", SHAPE_EPS)
    explain = shapes.execute(shapes.prepare(f"EXPLAIN {sql.format(t='o')}", "analyst"), s)
    listed = [str(r[0]) for r in explain.rows if "outside declared range" in str(r[0])]
    assert len(listed) == len(got), (listed, got)  # EXPLAIN lists each count
    for t, outside in (("o", True), ("c", False)):
        notes = shapes.execute(shapes.prepare(sql.format(t=t), "analyst"), s).notices
        warned = [n for n in notes if WARNING in n]
        assert bool(warned) is outside, notes
        assert all("NOT cover" in n for n in warned), warned
        # the premise, or the warning that the data breaks it: never both
        assert any("assumes every v" in n for n in notes) is not outside, notes
        if outside and shape == "row privacy":  # each row its own unit
            assert all(" rows have values of v" in n for n in warned), warned
        quantile = [
            n
            for n in warned
            if any(f"{f}(" in n.split(WARNING)[0] for f in ("MEDIAN", "MIN", "MAX"))
        ]
        if outside and shape in ("unique unit", "row privacy"):
            # nothing ranked: every row outside is counted, not a lower bound: no 'or more'
            assert quantile and not any(" or more " in n for n in quantile), quantile
        elif outside and shape in ("rollup", "private join", "public join"):
            # ranked: each unit counted by its first kept row, a lower bound
            assert quantile and all(" or more " in n for n in quantile), quantile

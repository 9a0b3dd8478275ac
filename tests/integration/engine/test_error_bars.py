"""Error bars that hold the truth when contribution bounding removes rows (issue 16 item 2).

Data: 3,000 units with 1-4 rows each (unit u has 1 + u % 4 rows, value 1 + u % 50, group 'a' or
'b' by u % 3 != 0), policy max_rows_per_unit 1: bounding keeps one row per unit, so COUNT(*)
and SUM(v) are about 40% below the truth -- a biased case. The truth is the query run as written
on PostgreSQL.

Property: for a statistic whose removed mass is estimated, the 95% interval covers the truth in
at least 95% of independent releases (every unit loses at most 3 rows, below the cap 4·R). The
bounded SQL runs once; its row is released ``DRAWS`` times as independent groups of one release
(the engine's own ``release``: fresh noise for the statistic and for the removed mass each time).
With coverage p >= 0.95, fewer than ``binom_min_successes(DRAWS, 0.95)`` covered draws has
probability <= 1e-6: the test's false-failure rate. The broken twin -- the same plan without the
removed-mass estimate, i.e. today's noise-only interval -- covers in none of the draws and must
fail the same check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute.noise import release
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from tests.helpers import DISOWNING, Coverage, Tally, release_coverage
from tests.policies import build_policy, private_table

DRAWS = 400
UNITS = 3000
BASE = {
    "version": 1,
    "dataset": "bars",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
}
POLICY = build_policy(
    base=BASE,
    tables={
        "public.t": private_table(
            "uid",
            {
                "g": {"type": "text", "keys": ["a", "b"]},
                "v": {"type": "numeric", "bounds": [0, 50]},
                "w": {"type": "integer", "bounds": [-5, 5]},
            },
        )
    },
)
QUERIES = {
    "count": "SELECT COUNT(*) FROM t",
    "sum": "SELECT SUM(v) FROM t",
    "count_by_g": "SELECT g, COUNT(*) FROM t GROUP BY g",
    "sum_by_g": "SELECT g, SUM(v) FROM t GROUP BY g",
    "avg": "SELECT AVG(v) FROM t",
    "avg_by_g": "SELECT g, AVG(v) FROM t GROUP BY g",
}


def _load(dsn: str, rows_of: Callable[[int], int] = lambda u: 1 + u % 4) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text NOT NULL, v numeric, w int)")
        rows = [
            (u, "a" if u % 3 else "b", 1 + u % 50, u % 11 - 5)
            for u in range(UNITS)
            for _ in range(rows_of(u))
        ]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s)", rows)


@pytest.fixture(scope="module")
def engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("bars")
    _load(dsn)
    e = Engine(POLICY, dsn, pool_size=2)
    yield e
    e.close()


def _coverage(engine: Engine, name: str, broken: bool = False) -> Tally:
    """How many of DRAWS releases' 95% intervals hold the truth (of the first group, or of the
    only row): grouped, the group's row is released as DRAWS independent groups of one release;
    ungrouped, DRAWS releases of the row (:func:`tests.helpers.release_coverage`)."""
    sql = QUERIES[name]
    plan = engine.plan(engine.prepare(sql), SessionContext(analyst="a", epsilon=Fraction(1)))
    assert isinstance(plan, Plan) and plan.bias, "COUNT and SUM estimate what bounding removed"
    return release_coverage(engine, sql, plan, DRAWS, broken)


COVERAGE = Coverage(DRAWS)


@pytest.mark.parametrize("name", list(QUERIES))
def test_interval_covers_the_truth_on_a_biased_case(engine: Engine, name: str) -> None:
    COVERAGE.holds(_coverage(engine, name), name)


@pytest.mark.parametrize("name", ["count", "sum_by_g"])
def test_noise_only_interval_fails_the_same_check(engine: Engine, name: str) -> None:
    COVERAGE.caught(_coverage(engine, name, broken=True), name)


def test_every_answer_says_how_accurate_it_is(engine: Engine) -> None:
    """The notice: level, noise half-width, estimated removed mass, the assumption; AVG says
    plainly when its interval covers noise only (values of both signs: not estimated)."""
    s = SessionContext(analyst="a", epsilon=Fraction(1))
    r = engine.execute(engine.prepare("SELECT COUNT(*), AVG(v) FROM t"), s)
    count = next(n for n in r.notices if n.startswith("COUNT(*)"))
    assert "95% interval: noise ±" in count, count
    # what the bounds keep and left out, in the user's terms
    assert "plus what the bounds left out (they keep at most 1 row per uid): about " in count
    assert " rows" in count and "so it reaches further above the answer" in count, count
    # no unit lost more than the cap (3 rows at most), so the interval's assumption is stated;
    # the over-cap alarm ("does NOT cover") is a noisy test that fires falsely with probability
    # <= dpsql.execute.bias.ALARM = 1e-3 per answer (asserting its absence failed that often)
    assumption = (
        "It assumes no uid lost more than 4 rows (4x the 1 row the bounds keep of one uid)."
    )
    false_alarm = "But it does NOT cover the truth: about"
    assert assumption in count or false_alarm in count, count
    avg = next(n for n in r.notices if n.startswith("AVG(v)"))
    assert "what the bounds left out (they keep at most 1 row per uid): about " in avg, avg
    assert isinstance(r.rows[0][0], int)
    r = engine.execute(engine.prepare("SELECT AVG(w) FROM t"), s)  # w in [-5, 5]: not estimated
    assert any(n.startswith("AVG(w)") and "noise only" in n and "NOT" in n for n in r.notices)


@pytest.mark.parametrize("group", ["", " GROUP BY g"])
def test_every_statistic_states_its_half_width(engine: Engine, group: str) -> None:
    """A statistic of several noisy parts whose bias is not estimated (VARIANCE, STDDEV, AVG of
    values of both signs) still states how far its interval reaches in its notice, not only that
    it covers the noise: '±w' when both sides reach about as far, else each side's reach (an
    interval clipped at 0 or at the declared range is not centred; which form depends on the
    noise). Deterministic (one of the two wordings, whatever the noise)."""
    s = SessionContext(analyst="a", epsilon=Fraction(1))
    keys = "g, " if group else ""
    sql = f"SELECT {keys}VARIANCE(v), STDDEV(v), AVG(w) FROM t{group}"
    r = engine.execute(engine.prepare(sql), s)
    for head in ("VARIANCE(v)", "STDDEV(v)", "AVG(w)"):
        (line,) = [n for n in r.notices if n.startswith(head)]
        reach = "±" in line or ("below the answer and" in line and "above it" in line)
        assert "95% interval: noise" in line and reach, line
        assert "noise only" in line and "NOT" in line, line


def test_interval_ends_are_rounded_outwards(engine: Engine) -> None:
    s = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
    r = engine.execute(engine.prepare("SELECT COUNT(*) AS n, SUM(v) AS s FROM t"), s)
    _, _, n_lo, n_hi, s_lo, s_hi = r.rows[0]
    assert type(n_lo) is int and type(n_hi) is int  # a count's interval: whole numbers
    # about 3 significant digits of the noise's half-width, not 17
    assert len(repr(s_lo).rstrip("0").rstrip(".")) <= 9 and len(repr(s_hi)) <= 11


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(v), COUNT(*) FROM t",  # one flat statement
        "WITH x AS (SELECT COUNT(v) AS n, COUNT(*) AS m FROM t) SELECT n AS c, m AS c FROM x",
    ],
)
def test_interval_columns_say_which_column_they_belong_to(engine: Engine, sql: str) -> None:
    """Two outputs of one name (``count``, ``count``) got ``count_low, count_high`` twice: no
    way to tell which interval was whose. Then the position was in the name (``count_1_low``,
    ``avg_3_low`` for the 3rd column); now the second of the name is ``count_2`` as BI tools
    number a repeated name (newcomer22 #31), the first keeps it."""
    s = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
    r = engine.execute(engine.prepare(sql), s)
    names = [c.name for c in r.columns]
    base = names[0]
    ends = ("low", "high")
    assert names == [base, base] + [f"{b}_{e}" for b in (base, f"{base}_2") for e in ends]


def test_interval_ends_of_expressions_are_rounded_outwards(engine: Engine) -> None:
    """An output computed from several statistics (``SUM(v) / COUNT(*)``) gets its interval by
    interval arithmetic (dpsql.sql.intervals); its ends are rounded like a statistic's: to a
    multiple of a power of ten about 1/100 of the interval's half-width, not 17 digits.
    Deterministic: a property of the rounding, whatever the noise."""
    s = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
    r = engine.execute(engine.prepare("SELECT SUM(v) / COUNT(*) AS r, 2 * AVG(v) AS a FROM t"), s)
    got = dict(zip([c.name for c in r.columns], r.rows[0], strict=True))
    for name in ("r", "a"):
        if got[f"{name}_low"] is None or got[f"{name}_high"] is None:
            # disowned: AVG's over-cap alarm fired falsely (at most 1e-3 a release) and the
            # notice says the interval does NOT hold (issue 16): no ends to round
            assert any(w in n for n in r.notices for w in DISOWNING), r.notices
            continue
        lo, hi = float(got[f"{name}_low"]), float(got[f"{name}_high"])
        assert lo < hi, (name, lo, hi)
        step = 10.0 ** (math.floor(math.log10((hi - lo) / 2)) - 3)  # one digit of slack
        for end in (lo, hi):
            assert abs(end / step - round(end / step)) < 1e-6, (name, end, step)


def test_plainly_says_when_the_interval_does_not_cover(make_db: Callable[[str], str]) -> None:
    """Every unit has 40 rows: each loses 39 > the cap 4, so the notice must say NOT (the
    over-cap count, 3,000 units, is far beyond its noise)."""
    dsn = make_db("bars_over")
    _load(dsn, rows_of=lambda u: 40 if u < 1000 else 0)
    e = Engine(POLICY, dsn, pool_size=1)
    try:
        r = e.execute(e.prepare("SELECT COUNT(*) FROM t"), SessionContext(analyst="a"))
        assert any("does NOT cover the truth" in n for n in r.notices), r.notices
        # fixed bounds: what to change is the policy's numbers (with auto: dpsql.epsilon first)
        assert any(
            "Raise max_rows_per_unit / max_groups_per_unit in the policy" in n for n in r.notices
        )
    finally:
        e.close()


# -- COUNT(DISTINCT x) over a column with declared keys -------------------------------------------
# Keys a..e: a, b, c have 300 units each, d one unit with one row, e none: 4 distinct values.
# The mechanism counts a key when its noisy row count passes the noise level, so d is usually
# missed (answer 3); the interval [surely present, possibly present] must still hold 4 in >= 95%
# of releases. Broken twin: the answer as its own interval (no allowance for missed keys).
KEYS_POLICY = build_policy(
    base=BASE,
    tables={
        "public.k": private_table(
            "uid", {"c": {"type": "text", "keys": ["a", "b", "c", "d", "e"]}}, rows=2
        )
    },
)


@pytest.fixture(scope="module")
def keys_engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("bars_keys")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE k (uid integer NOT NULL, c text)")
        rows = [(u, "abc"[u % 3]) for u in range(900) for _ in range(2)] + [(5000, "d")]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO k VALUES (%s, %s)", rows)
    e = Engine(KEYS_POLICY, dsn, pool_size=2)
    yield e
    e.close()


def _distinct_coverage(engine: Engine, broken: bool) -> int:
    sql = "SELECT COUNT(DISTINCT c) FROM k"
    truth = engine.backend.run(sql, private=False).rows[0][0]
    assert truth == 4
    prepared = engine.prepare(sql)
    plan = engine.plan(prepared, SessionContext(analyst="a", epsilon=Fraction(1)))
    assert isinstance(plan, Plan) and plan.measures[0].measure.kind == "count_keys"
    rows = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows
    covered = 0
    for _ in range(DRAWS):
        rel = release(plan, list(rows), [], None, 0.95, CSPRNG)
        lo, hi = rel.intervals[0][0] or (math.nan, math.nan)
        if broken:
            lo = hi = rel.stats[0][0]
        covered += lo <= truth <= hi
    return covered


def test_count_distinct_over_keys_interval_covers(keys_engine: Engine) -> None:
    got = _distinct_coverage(keys_engine, broken=False)
    COVERAGE.holds(got, "COUNT(DISTINCT) over declared keys")


def test_count_distinct_over_keys_point_interval_fails(keys_engine: Engine) -> None:
    got = _distinct_coverage(keys_engine, broken=True)
    COVERAGE.caught(got, "a point interval at the answer")


def test_count_distinct_over_keys_answers_the_keys_present(keys_engine: Engine) -> None:
    """The three well-populated keys are always found, the absent one almost never (was: a
    count with noise of scale R/epsilon, answering 0 to 10 where 3-4 are true)."""
    s = SessionContext(analyst="a", epsilon=Fraction(1))
    answers = [
        keys_engine.execute(keys_engine.prepare("SELECT COUNT(DISTINCT c) FROM k"), s).rows[0][0]
        for _ in range(5)
    ]
    assert all(a in (3, 4, 5) for a in answers), answers


# -- MEDIAN / MIN / MAX intervals ------------------------------------------------------------------
# 300 units with v = u % 60 and one unit at 95 (bounds [0, 100], R = 1): MAX is 95, but the rows
# say little about it (one row above 59), so the answer is often far below. The interval's ends
# are the same selection aimed past the target (dpsql.dp.quantiles.Quantile.end_utilities): it
# must hold the true MAX and MEDIAN in >= 95% of releases. Broken twin: the answer's own bucket as
# its interval (no allowance for the selection's error). uid is the primary key: the catalog
# proves one row per unit, so the bounds keep every row and the interval is of the truth (with
# rows left out it is not, and its columns say so: test_quantile_truth.py).
Q_POLICY = build_policy(
    base=BASE,
    tables={"public.q": private_table("uid", {"v": {"type": "integer", "bounds": [0, 100]}})},
)


@pytest.fixture(scope="module")
def q_engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("bars_q")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE q (uid integer PRIMARY KEY, v integer)")
        conn.execute("INSERT INTO q SELECT u, u % 60 FROM generate_series(1, 300) u")
        conn.execute("INSERT INTO q VALUES (1000, 95)")
    e = Engine(Q_POLICY, dsn, pool_size=2)
    yield e
    e.close()


def _quantile_coverage(engine: Engine, agg: str, broken: bool) -> int:
    sql = f"SELECT {agg} FROM q"
    exact = f"SELECT {agg.replace('MEDIAN(v)', 'percentile_cont(0.5) WITHIN GROUP (ORDER BY v)')} FROM q"
    truth = float(engine.backend.run(exact, private=False).rows[0][0])
    prepared = engine.prepare(sql)
    plan = engine.plan(prepared, SessionContext(analyst="a", epsilon=Fraction(1)))
    assert isinstance(plan, Plan) and plan.measures[0].bounds is not None
    rows = list(engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows)
    mech = plan.measures[0].mechanism
    covered = 0
    for _ in range(DRAWS):
        rel = release(plan, rows, [], None, 0.95, CSPRNG)
        lo, hi = rel.intervals[0][0] or (math.nan, math.nan)
        if broken:  # the answer's bucket
            v = float(rel.stats[0][0])
            lo, hi = v - float(mech.width), v + float(mech.width)  # type: ignore[union-attr]
        covered += lo <= truth <= hi
    return covered


@pytest.mark.parametrize("agg", ["MAX(v)", "MEDIAN(v)", "MIN(v)"])
def test_quantile_interval_covers(q_engine: Engine, agg: str) -> None:
    got = _quantile_coverage(q_engine, agg, broken=False)
    COVERAGE.holds(got, agg)


def test_quantile_answer_bucket_as_interval_fails(q_engine: Engine) -> None:
    got = _quantile_coverage(q_engine, "MAX(v)", broken=True)
    COVERAGE.caught(got, "a point interval at the answer")


def test_removed_mass_counts_what_a_narrower_clamp_cut_off(engine: Engine) -> None:
    """With a clamp narrower than the declared bounds (as ``clamp: auto`` chooses), the raw
    partials read values clamped into the declared bounds: the removed mass is exactly, per
    unit, ceil((raw - kept) / grid) counted up to the cap (R = 1, no GROUP BY), summed."""
    from dataclasses import replace

    from dpsql.execute.private_sql import bounded_sql
    from dpsql.sql.apply_bounds import _restat
    from dpsql.sql.bias import bias_targets

    prepared = engine.prepare("SELECT SUM(v) FROM t")
    a = prepared.analysis
    assert a is not None
    narrow = tuple(replace(m, hi=Fraction(20)) for m in a.measures)
    renamed = {o.key: n for o, n in zip(a.measures, narrow, strict=True)}
    a2 = replace(a, measures=narrow, statistics=tuple(_restat(s, renamed) for s in a.statistics))
    (t,) = bias_targets(a2)
    assert t.raw_clamp and (t.raw_lo, t.raw_hi) == (0, 50)
    got = engine.backend.run(bounded_sql(prepared, a2), private=True).rows[0]
    want = engine.backend.run(
        "SELECT SUM(LEAST(CEIL((raw - kept) / %(grid)s), %(cap)s)) FROM (SELECT uid, "
        "SUM(LEAST(GREATEST(v, 0), 50)) AS raw, LEAST(GREATEST(CASE WHEN COUNT(v) <= 1 THEN "
        "SUM(LEAST(GREATEST(v, 0), 20)) ELSE SUM(LEAST(GREATEST(v, 0), 20)) / COUNT(v) END, 0), "
        "20) AS kept FROM t GROUP BY uid) AS u",
        {"grid": float(t.grid), "cap": t.cap_steps},
        private=False,
    ).rows[0][0]
    assert int(got[-2]) == int(want) > 0


def test_a_wide_average_says_why(engine: Engine) -> None:
    """An AVG whose interval spans half its declared range or more says so, why and what to do,
    exactly in the groups where it does (a deterministic property of each release: the notice
    reads the intervals the answer carries). Small groups (WHERE w = k: about 270 units, 680
    rows, split over two groups) of a [0, 50] value make it wide: the estimate of the value
    mass the bounds left out has a half-width of about 40,000 at epsilon 1 (cap 4 R c = 200 per
    unit, a tenth of epsilon), against a kept sum under 10,000 per group, so every release here
    is wide in practice; the test needs one in ten."""
    s = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
    seen = 0
    for k in range(-5, 5):  # distinct statements: fresh releases, not free repeats
        sql = f"SELECT g, AVG(v) FROM t WHERE w = {k} GROUP BY g"
        r = engine.execute(engine.prepare(sql), s)
        wide = sum(1 for row in r.rows if row[3] - row[2] >= 25)
        note = next(x for x in r.notices if x.startswith("AVG(v)"))
        if wide:
            seen += 1
            says = (
                f"In {wide} of {len(r.rows)} groups it spans most of v's declared range (0 to 50)"
            )
            assert says in note, note
            assert "Raise dpsql.epsilon, or group less finely." in note, note
        else:
            assert "spans most" not in note, (r.rows, note)
    assert seen, "no release was wide"


def test_the_notice_states_the_level_asked_for(engine: Engine) -> None:
    """SET dpsql.confidence = 0.998: the notice says '99.8% interval', not '100%' (a claim of
    certainty: '{:.0%}' rounded it). Deterministic (the text, not the noise)."""
    s = SessionContext(analyst="a", epsilon=Fraction(1), confidence=0.998)
    notes = list(engine.execute(engine.prepare(QUERIES["count_by_g"]), s).notices)
    line = next(n for n in notes if n.startswith("COUNT(*): "))
    assert line.startswith("COUNT(*): 99.8% interval"), line
    avg = list(engine.execute(engine.prepare(QUERIES["avg"]), s).notices)
    assert any(n.startswith("AVG(v): 99.8% interval") for n in avg), avg

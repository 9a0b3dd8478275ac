"""MEDIAN / PERCENTILE of all the rows: the interval allows for the rows the bounds left out
(issue 16; dpsql.sql.bias.quantile_targets, dpsql.execute.selected_measures.quantile_ends).

Table ``m`` (R = 1 fixed, epsilon 1): 2,000 light units with one row each, v = u % 100 (20 rows
at each of 0..99), and 200 heavy units with 5 rows at v = 20. All 3,000 rows: the median is
24.5 (positions 1,499 and 1,500 hold 24 and 25); the rows kept (one a unit: 2,000 light, 200 at
20): about 44.5. The interval's ends rank E = 4R = 4 rows of a unit, and each heavy unit's fifth
row is counted past them (cap C = 4E = 16): the assumption (no unit has more than E + C = 20
rows) holds.

Coverage: in DRAWS releases of the same bounded rows (one run of the bounded SQL:
tests/integration/engine/test_quantile_truth.py's way), the interval holds the true median with
probability at least its stated level (quantile_level: both ends' miss bounds and the left-out
count's reach); fewer than binom_min_successes(DRAWS, level, 1e-6) holds has probability <=
1e-6. Broken twin: the ends aimed past the kept rows' median only (as before, with the columns
kept) hold it in none: caught. The left-out count's sensitivity is audited on the data: one
unit added moves it by at most C, and the over-cap count by at most 1, whatever its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute import noise as noise_module
from dpsql.execute.noise import release
from dpsql.execute.selected_measures import quantile_level
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from tests.helpers import binom_min_successes, interval_columns, line_of
from tests.policies import build_policy

DRAWS = 200
TRUTH = 24.5
POLICY = build_policy(
    base={},
    version=1,
    dataset="median_left_out",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        f"public.{t}": {
            "privacy_unit": "uid",
            "max_rows_per_unit": 1,
            "max_groups_per_unit": 1,
            "columns": {
                "uid": {"type": "integer", "identifier": True},
                "v": {"type": "integer", "bounds": [0, 100]},
            },
        }
        for t in ("m", "w")
    },
)


@pytest.fixture(scope="module")
def m_engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("medleft")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE m (uid integer NOT NULL, v integer)")
        conn.execute("INSERT INTO m SELECT u, u % 100 FROM generate_series(1, 2000) u")
        conn.execute(
            "INSERT INTO m SELECT u, 20 FROM generate_series(3001, 3200) u, generate_series(1, 5)"
        )
        # w: 2,000 units with 25 rows each, past E + C = 20
        conn.execute("CREATE TABLE w (uid integer NOT NULL, v integer)")
        conn.execute(
            "INSERT INTO w SELECT u, (u * i) % 100 FROM generate_series(1, 2000) u, "
            "generate_series(1, 25) i"
        )
    e = Engine(POLICY, dsn, pool_size=2)
    yield e
    e.close()


def _plan_rows(engine: Engine, sql: str) -> tuple[Plan, list[tuple[Any, ...]]]:
    prepared = engine.prepare(sql)
    plan = engine.plan(prepared, SessionContext(analyst="a", epsilon=Fraction(1)))
    assert isinstance(plan, Plan)
    rows = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows
    return plan, list(rows)


def _held(engine: Engine) -> tuple[int, float]:
    """In how many of DRAWS releases the interval holds the true median, and its level."""
    plan, rows = _plan_rows(engine, "SELECT MEDIAN(v) FROM m")
    held = 0
    for _ in range(DRAWS):
        iv = release(plan, rows, [], None, 0.95, CSPRNG).intervals[0][0]
        held += iv is not None and iv[0] <= TRUTH <= iv[1]
    return held, quantile_level(plan.measures[0])


def test_the_interval_holds_the_median_of_all_the_rows(m_engine: Engine) -> None:
    held, level = _held(m_engine)
    need = binom_min_successes(DRAWS, level, 1e-6)
    assert level > 0.99
    assert held >= need, f"held in {held} of {DRAWS}, need {need} (level {level})"


def test_ends_aimed_past_the_kept_rows_only_are_caught(
    m_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken twin: the ends of the kept rows' median (the left-out count ignored) hold the
    true median in (nearly) none of the releases: the coverage check rejects them."""
    honest = noise_module.quantile_ends

    def kept_only(mp: Any, hists: Any, noise: Any, *_: Any) -> Any:
        return honest(mp, hists, noise)

    monkeypatch.setattr(noise_module, "quantile_ends", kept_only)
    held, level = _held(m_engine)
    assert held < binom_min_successes(DRAWS, level, 1e-6), held


def _left_out(engine: Engine) -> tuple[int, int]:
    """The bounded SQL's left-out count and over-cap count for MEDIAN(v) (no noise)."""
    plan, rows = _plan_rows(engine, "SELECT MEDIAN(v) FROM m")
    assert len(plan.bias) == 1 and plan.bias[0].target.cap_steps == 16
    main = [r for r in rows if r[-1] == 1]  # (GROUPING(_dp_b0) = 1: the total's row)
    assert len(main) == 1, rows[:3]
    b0 = len(plan.analysis.measures) + len(plan.alarms)
    return int(main[0][b0]), int(main[0][b0 + 1])


def test_one_unit_moves_the_counts_by_at_most_their_sensitivity(m_engine: Engine) -> None:
    """The left-out count is the rows past E = 4 of each unit, up to C = 16 (200 heavy units
    have one each: 200); a unit with 50 rows adds 16 to it and 1 to the over-cap count, one
    with 10 rows adds 6 and 0. Neighbouring data sets differ by one unit: the Laplace releases'
    sensitivities (C and 1, dpsql.sql.bias.BiasPlan) hold on the data, not by the mechanism's
    claim."""
    assert _left_out(m_engine) == (200, 0)
    with psycopg.connect(m_engine.backend.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO m SELECT 9001, 50 FROM generate_series(1, 50)")
        try:
            assert _left_out(m_engine) == (216, 1)
            conn.execute("DELETE FROM m WHERE uid = 9001")
            conn.execute("INSERT INTO m SELECT 9002, 50 FROM generate_series(1, 10)")
            assert _left_out(m_engine) == (206, 0)
        finally:
            conn.execute("DELETE FROM m WHERE uid >= 9000")


def test_cost_and_words(m_engine: Engine) -> None:
    """The statement costs its epsilon (a tenth of it counts the left-out rows), and the notice
    says what the interval allows for and assumes."""
    plan, _ = _plan_rows(m_engine, "SELECT MEDIAN(v) FROM m")
    assert plan.cost.epsilon == Fraction(1)
    assert plan.bias[0].cost.epsilon == Fraction(1, 10)
    s = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
    r = m_engine.execute(m_engine.prepare("SELECT MEDIAN(v) FROM m"), s)
    line = line_of(r.notices, "MEDIAN(v)")
    assert "its ends rank up to 4 rows per uid and are moved past the rows a noisy count" in line
    assert "assuming no uid has more than 20 rows" in line, line
    names = [c.name for c in r.columns]
    row = r.rows[0]
    lo, hi = row[names.index("median_low")], row[names.index("median_high")]
    assert lo is not None and hi is not None and lo <= hi


def test_units_past_the_cap_null_the_columns(m_engine: Engine) -> None:
    """2,000 units have 25 rows each, past the 20 the interval allows for: the over-cap count
    says so (2,000 against a threshold of about 276 at its noise, scale 40: a miss has
    probability below 1e-17), the notice says the interval does NOT cover the median, and its columns are
    NULL (interval_columns: exactly as the notice says). Broken twin: the columns kept."""
    s = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
    r = m_engine.execute(m_engine.prepare("SELECT MEDIAN(v) FROM w"), s)
    assert interval_columns(r, {"median": "MEDIAN(v)"}) == {"median": [(True, True)]}
    alarm = [n for n in r.notices if n.startswith("MEDIAN(v): But it does NOT cover the truth")]
    assert len(alarm) == 1 and "uid have more than 20 rows (each)" in alarm[0], r.notices


def test_kept_columns_past_the_cap_are_caught(
    m_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken twin: the interval columns kept where the over-cap count retracts them."""
    from tests.helpers import kept

    kept(monkeypatch)
    s = SessionContext(analyst="a", epsilon=Fraction(1), show_intervals=True)
    r = m_engine.execute(m_engine.prepare("SELECT MEDIAN(v) FROM w"), s)
    with pytest.raises(AssertionError):
        interval_columns(r, {"median": "MEDIAN(v)"})

"""A few units beyond the cap that no release can see: the notice says the interval cannot be
checked (issue 16; :mod:`dpsql.execute.accuracy_few`).

Table ``w``: 2,000 units with 1-3 rows of q <= 5, 3 of them with one more row of q = 9, and 5
"whales" with 200 rows of q = 9 (the demo's ``WHERE quantity > 5``: 1,003 rows, 1,000 of them
the whales'); R = 1 row per unit, fixed. ``SELECT COUNT(*) FROM w WHERE q > 5`` keeps about 8
rows (one a unit) and its interval, resting on "no uid lost more than 4 rows", misses the truth
by about 1,000 rows. Table ``c``: 20,000 units with 1-3 rows, R = 3: nothing is removed.

Statistical, epsilon 1, false failure <= 1e-6 in all:

* on ``w`` the rule speaks up whenever the answer is below k K (K = 1 row), and k is at least
  k0 = min(the over-cap count's reach, the removed-mass estimate's reach / C) whatever the noise
  (the released values enter clipped at 0): a public number of the plan, asserted >= 30 below.
  The answer is 8 plus discrete Laplace noise of scale b = 1 / 0.9; it stays silent only if
  that noise exceeds k0 - 8 >= 22: probability below exp(-22 / b) < 1e-8 per answer, 5
  answers. (The
  over-cap alarm, "does NOT cover", is the other honest outcome: accepted.)
* on ``c`` it speaks up only if k >= A / 3, about 13,000 units: the over-cap count (20,000 x 0
  beyond the cap) would need noise above 12,000 at scale 40: below 1e-100.

Broken twins: without the rule (``unseen`` returning nothing) the whale answers carry neither
sentence except when the alarm fires (about 1e-3 each), so the first check fails with
probability > 1 - 1e-15 over 5 answers; with a rule that always speaks (share 0) the clean
answer carries it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute import accuracy_few, accuracy_text
from dpsql.execute.bias import target_widths
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from tests.helpers import ledgered_engine
from tests.policies import build_policy

SAYS = "The released values cannot check it here"
ALARM = "does NOT cover the truth"
WHALES = "SELECT COUNT(*) FROM w WHERE q > 5"
CLEAN = "SELECT COUNT(*) FROM c"
RUNS = 5


def _table(rows: int) -> dict[str, Any]:
    return {
        "privacy_unit": "uid",
        "max_rows_per_unit": rows,
        "max_groups_per_unit": 1,
        "columns": {
            "uid": {"type": "integer", "identifier": True},
            "q": {"type": "integer", "bounds": [0, 100]},
        },
    }


POLICY = build_policy(
    base={},
    version=1,
    dataset="unseen",
    defaults={"epsilon": 1.0, "max_epsilon": 100.0, "delta": 1e-6},
    tables={"public.w": _table(1), "public.c": _table(3)},
    analysts={"analyst": {"budget": {"epsilon": 10000, "delta": 0.1}}},
)


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("unseen")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in ("w", "c"):
            conn.execute(f"CREATE TABLE {t} (uid integer NOT NULL, q integer NOT NULL)")
        conn.execute(
            "INSERT INTO w SELECT u, (u + r) % 6 FROM generate_series(6, 2005) u, "
            "generate_series(0, u % 3) r"
        )
        conn.execute("INSERT INTO w SELECT u, 9 FROM generate_series(6, 8) u")
        conn.execute(
            "INSERT INTO w SELECT u, 9 FROM generate_series(1, 5) u, generate_series(1, 200)"
        )
        conn.execute(
            "INSERT INTO c SELECT u, u % 6 FROM generate_series(1, 20000) u, "
            "generate_series(0, u % 3) r"
        )
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    with ledgered_engine(POLICY, dsn, "dpsql_unseen") as e:
        yield e


def _line(engine: Engine, sql: str) -> str:
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    (line,) = [n for n in r.notices if n.startswith("COUNT(*): ")]
    return line


def test_the_data(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.execute(WHALES).fetchone() == (1003,)
        (big,) = conn.execute("SELECT count(*) FROM w GROUP BY uid ORDER BY 1 DESC").fetchone()
        assert big == 200


def test_the_rule_is_certain_to_speak_on_the_whales(engine: Engine) -> None:
    """k0 (no noise can lower it) and the answer's tail: the false-failure bound above."""
    plan = engine.plan(engine.prepare(WHALES, "analyst"), SessionContext("analyst", Fraction(1)))
    assert isinstance(plan, Plan)
    (b,) = plan.bias
    answer = plan.measure_plan(b.target.measure.key).mechanism
    tw = target_widths(answer, b, 0.95)  # type: ignore[arg-type]
    k0 = min(b.over_cap.half_width(0.95), tw.d_hi / float(b.target.cap))
    assert float(b.target.cap) == 4 and k0 >= 30, k0
    # discrete Laplace (grid 1): P(noise > m) = r**(m+1) / (1 + r), r = exp(-1 / scale)
    r = math.exp(-float(answer.epsilon / answer.sensitivity))  # type: ignore[union-attr]
    assert r ** (math.floor(k0 - 8) + 1) / (1 + r) * RUNS < 1e-6


def _whale_answers(engine: Engine, tag: int) -> list[str]:
    """RUNS fresh releases (a repeated statement reads its stored answer: each run filters on
    a condition no row fails, ``q <> -N``, to be a statement of its own)."""
    return [_line(engine, f"{WHALES} AND q <> -{tag * RUNS + i}") for i in range(RUNS)]


def test_the_notice_says_it_cannot_check_the_whales(engine: Engine) -> None:
    for line in _whale_answers(engine, 1):
        assert SAYS in line or ALARM in line, line
        if SAYS in line:
            assert "could all come from" in line and "could each have lost more than 4 rows" in line
            assert "max_rows_per_unit" in line and "raise dpsql.epsilon" in line


def _unalarmed(engine: Engine, sql: str, tag: int, head: str = "COUNT(*): ") -> str:
    """The first of up to 3 fresh releases of ``sql`` (``WHERE q <> -N``: statements of their
    own) whose line has no over-cap alarm. On ``c`` (nothing beyond the cap) the alarm fires
    falsely with probability 5.0e-4 a release (the over-cap count: discrete Laplace, scale 40,
    past its half-width 276.5 at 1 - 1e-3; dpsql.execute.accuracy_words.alarmed; an AVG's at
    most 1e-3), and then the line says neither the assumption's reach nor the rule: asserting
    on one release failed that often. All 3 alarmed: below 1e-9."""
    for i in range(3):
        q = f"{sql} WHERE q <> -{tag + i}"
        r = engine.execute(engine.prepare(q, "analyst"), SessionContext("analyst", Fraction(1)))
        (line,) = [n for n in r.notices if n.startswith(head)]
        if ALARM not in line:
            return line
    raise AssertionError(f"3 releases of {sql} raised the over-cap alarm: {line}")


def test_no_notice_on_a_clean_table(engine: Engine) -> None:
    line = _unalarmed(engine, CLEAN, 100)
    assert SAYS not in line, line
    assert "It assumes no uid lost more than 12 rows" in line
    # how many units beyond the cap the releases could miss: at least min(the over-cap count's
    # reach, the estimate's reach / 12) >= 1 whatever the noise (deterministic), so always said
    m = re.search(r"Up to ([\d,]+) uid could have lost more than that without the estimates", line)
    assert m and int(m[1].replace(",", "")) >= 1, line


def test_broken_twin_without_the_rule(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accuracy_text, "unseen", lambda *a, **k: [])
    lines = _whale_answers(engine, 2)
    assert not all(SAYS in n or ALARM in n for n in lines), lines


def test_broken_twin_that_always_speaks(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accuracy_few, "SHARE", 0.0)
    assert SAYS in _unalarmed(engine, CLEAN, 200)


def test_broken_twin_without_the_reach(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accuracy_text, "reach_text", lambda *a, **k: "")
    assert "could have lost more than that" not in _line(engine, f"{CLEAN} WHERE q <> -2")


def test_an_average_says_its_reach_too(engine: Engine) -> None:
    """AVG's line: how many units beyond the value-mass cap could hide (k >= 1 whatever the
    noise, as for the count: deterministic)."""
    line = _unalarmed(engine, "SELECT AVG(q) FROM c", 300, "AVG(q): ")
    assert re.search(r"Up to [\d,]+ uid could have lost more than that without the", line), line

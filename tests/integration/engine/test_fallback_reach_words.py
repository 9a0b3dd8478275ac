"""The words of a fixed-default fallback say what its interval columns do (newcomer26 #4, #3).

Deterministic facts read from the released columns and the notice (the demo data, shipped
``auto`` policy; pums aged 53-60 has about 150 pid, far below the ~537 a choice needs at epsilon
1, so the fallback is taken but with probability below 1e-9):

* a SUM's left-out estimate is an upper bound only (each unit's left-out value rounded up):
  the notice says its interval reaches at most U *above* the answer and, below, stops at the
  kept answer less its noise B, and the ``_low`` column is at least B below the answer (never
  "±U from it", which ``_low`` 43M below a 54.8M answer contradicted beside "±22.8M");
* a COUNT's estimate is exact in steps: its words keep "at most ±X from it", and ``_low`` is
  within X of the answer;
* where a filtered statement falls back to the table's own rows per pid (a whole-table COUNT
  stored them; both far from their guards' limits, a miss below 1e-9), the epsilon its count spent is said to have been spent trying to choose them
  for these rows, not "on a count ... that was too small" beside the bound reused free.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine, with_intervals


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_fbw") as e:
        yield e


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_a_fallback_sums_words_say_its_low_end_is_the_kept_answers(engine: Engine) -> None:
    r = with_intervals(engine, "SELECT SUM(income) FROM pums WHERE age >= 53 AND age < 61")
    (line,) = [n for n in r.notices if n.startswith("SUM(income): ")]
    assert "the fixed defaults" in line, line  # the fallback (see the module doc)
    up = re.search(r"the interval reaches at most ([\d,.]+) above it", line)
    below = re.search(r"below, it stops at the kept answer less its noise \(([\d,.]+)\)", line)
    assert up is not None and below is not None, line
    assert "from it" not in line.split("It assumes")[0], line
    value, low, high = (float(x) if x is not None else None for x in r.rows[0])
    assert value is not None and low is not None
    step = max(1.0, abs(value) * 1e-3)  # the columns' presentation rounding
    # (a SUM of values >= 0 never goes below 0: _low stops there first)
    assert value - low >= min(value, _num(below.group(1))) - step, (r.rows, line)
    if high is not None:
        assert high - value <= _num(up.group(1)) + step, (r.rows, line)


def test_a_fallback_counts_words_keep_their_reach_both_ways(engine: Engine) -> None:
    r = with_intervals(engine, "SELECT COUNT(*) FROM pums WHERE age >= 53 AND age < 61")
    (line,) = [n for n in r.notices if n.startswith("COUNT(*): ")]
    assert "the fixed defaults" in line, line
    m = re.search(r"the interval reaches at most ±([\d,.]+) from it", line)
    assert m is not None and "below, it stops" not in line, line
    value, low = float(r.rows[0][0]), float(r.rows[0][1])
    assert value - low <= _num(m.group(1)) + 1, (r.rows, line)


def test_a_fallback_to_the_tables_rows_says_why_it_spent(
    demo_dsn: str, demo_policy_auto: Any
) -> None:
    """The whole-table count at epsilon 2 chooses pums' rows per pid (1,000 pid against the
    ~270 its guard needs there); the filtered count at 0.25 cannot choose its own (549 pid
    against ~2,100), so it keeps the stored one. A ledger of its own: in the module's, the
    stored R turned the other tests' fixed-default fallbacks into this one when it ran first."""
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_fbw_r") as engine:
        _says_why_it_spent(engine)


def _says_why_it_spent(engine: Engine) -> None:
    whole = engine.execute(
        engine.prepare("SELECT COUNT(*) FROM pums", "analyst"),
        SessionContext("analyst", Fraction(2)),
    )
    assert not any("too few pid values to choose" in n for n in whole.notices), whole.notices
    sql = "SELECT COUNT(*) FROM pums WHERE married = 1 AND age < 95"
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1, 4)))
    bounds = next(n for n in r.notices if n.startswith("contribution bounds: "))
    assert "the table's own rows per pid over all its rows" in bounds, bounds
    assert "spent trying to choose them for these rows" in bounds, bounds
    assert "spent on a count of pid values that was too small" not in bounds, bounds

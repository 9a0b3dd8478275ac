"""What read dpsql's clock does not outlive the day it read (closing-note24, Addendum).

The date-range verdict (dpsql.sql.date_range_empty: a WHERE range that leaves nothing of a
date's declared range answers no rows, free) reads ``current_date`` as dpsql's clock. Before,
Engine.prepare cached the analysis with no day in its key, so a range that grows with time
(``purchased_at <= current_date - INTERVAL '700 days'``, the demo's dates declared 2025-01-01 to
2025-12-31) kept answering 0, free, after it came to meet the declared range; a wire session's
named statement held it as long as the session lived; and a stored answer of a statement that
reads the clock was repeated, free, on later days (the upstream's ``current_date`` had moved: the
rows it counts are others). Property (deterministic, through the engine's injectable clock,
dpsql.clock.FixedClock): the same text answers 0 free on day D and is measured and charged on
day D + 30 when its range meets the bounds, through the engine (prepare, and a Prepared held
across the change) and through a wire-level prepared statement reused across the change; a
statement reading the clock is charged again on the next day, not answered from yesterday's
store. Each failed before (free, or the stored answer, on the later day).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.clock import FixedClock
from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, served_engine

# 2026-11-27 - 700 days = 2024-12-28 (two days' margin: 2024-12-30): before 2025-01-01, no row.
# 2026-12-27 - 700 days = 2025-01-27 (margin: 2025-01-25): inside the declared range.
GROWS = "SELECT COUNT(*) FROM purchases WHERE purchased_at <= current_date - INTERVAL '700 days'"
DAY_D = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
LATER = 30  # days


@pytest.fixture
def ledger(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Ledger]:
    import uuid

    led = Ledger.open(demo_dsn, demo_policy_auto, schema=f"dpsql_clk{uuid.uuid4().hex[:8]}")
    yield led
    led.close()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(DAY_D)


@pytest.fixture
def engine(
    demo_dsn: str, demo_policy_auto: Any, ledger: Ledger, clock: FixedClock
) -> Iterator[Engine]:
    e = Engine(demo_policy_auto, demo_dsn, ledger, pool_size=2, clock=clock)
    yield e
    e.close()


def run(engine: Engine, prepared: Any) -> Any:
    return engine.execute(prepared, SessionContext("analyst", Fraction(1)))


def charges(ledger: Ledger) -> int:
    """The analyst's charged releases (a free repeat is in the history too, not charged)."""
    return sum(1 for h in ledger.history("analyst") if not h.cached and h.epsilon > 0)


def free(got: Any) -> bool:
    return got.epsilon_spent == 0 and any(
        "leaves nothing of purchased_at" in n for n in got.notices
    )


def test_the_same_text_is_measured_once_its_range_meets_the_bounds(
    engine: Engine, ledger: Ledger, clock: FixedClock
) -> None:
    held = engine.prepare(GROWS, "analyst")
    first = run(engine, held)
    assert free(first) and first.rows == [(0,)], (first.rows, first.notices)
    assert ledger.history("analyst") == []
    clock.advance(days=LATER)
    again = run(engine, engine.prepare(GROWS, "analyst"))  # the cache's entry: read again
    assert again.epsilon_spent > 0 and not free(again), again.notices
    charged = charges(ledger)  # (its bounds' measurement too: auto)
    assert charged > 0
    kept = run(engine, held)  # a Prepared held from day D (a session's named statement)
    assert kept.epsilon_spent == 0 and kept.cached, kept.notices  # the same release: a repeat
    assert not free(kept), kept.notices
    assert charges(ledger) == charged


def test_a_stored_answer_of_a_clock_reading_statement_is_not_repeated_the_next_day(
    engine: Engine, ledger: Ledger, clock: FixedClock
) -> None:
    meets = GROWS.replace("<=", ">=")  # meets the range on every day here: measured
    first = run(engine, engine.prepare(meets, "analyst"))
    same_day = run(engine, engine.prepare(meets, "analyst"))
    assert first.epsilon_spent > 0 and same_day.cached and same_day.epsilon_spent == 0
    charged = charges(ledger)
    clock.advance(days=1)
    next_day = run(engine, engine.prepare(meets, "analyst"))
    assert next_day.epsilon_spent > 0 and not next_day.cached, next_day.notices
    assert charges(ledger) > charged


def test_a_wire_prepared_statement_reused_across_the_change(
    demo_dsn: str, demo_policy_auto: Any, ledger: Ledger, clock: FixedClock
) -> None:
    with served_engine(demo_policy_auto, demo_dsn, ledger=ledger, clock=clock) as srv:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as c:
            notices: list[str] = []
            c.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            assert c.pgconn.prepare(b"grows", GROWS.encode()).status == 1  # COMMAND_OK
            res = c.pgconn.exec_prepared(b"grows", [])
            assert res.get_value(0, 0) == b"0", res.error_message
            assert ledger.history("analyst") == []
            assert any("leaves nothing of purchased_at" in n for n in notices), notices
            clock.advance(days=LATER)
            notices.clear()
            res = c.pgconn.exec_prepared(b"grows", [])  # the same named statement, day D + 30
            assert res.error_message == b"", res.error_message
            assert charges(ledger) > 0, notices
            assert not any("leaves nothing of purchased_at" in n for n in notices), notices


def test_a_zone_python_cannot_read_repeats_nothing_across_its_midnight(
    engine: Engine, ledger: Ledger, clock: FixedClock
) -> None:
    """A session in a POSIX zone with daylight rules (PostgreSQL reads it, Python's zoneinfo
    does not: dpsql.upstream.zone.tzinfo_of is None) keyed a clock-reading statement's repeat on
    the UTC day. At 03:30 and 05:30 UTC of 27 November it is 22:30 on the 26th and 00:30 on the
    27th in that zone: the upstream's current_date moved, the UTC day did not, and the second run
    got the first's answer (the other day's rows), free. With the zone's day unknown, each run
    is a release of its own."""
    clock.at = datetime(2026, 11, 27, 3, 30, tzinfo=UTC)
    zone = {"TimeZone": "EST5EDT4,M3.2.0,M11.1.0"}
    meets = GROWS.replace("<=", ">=")
    session = SessionContext("analyst", Fraction(1), settings=zone)
    first = engine.execute(engine.prepare(meets, "analyst"), session)
    assert first.epsilon_spent > 0, first.notices
    clock.advance(seconds=2 * 3600)  # 00:30 of the 27th in the zone, still the 27th in UTC
    after = engine.execute(engine.prepare(meets, "analyst"), session)
    assert after.epsilon_spent > 0 and not after.cached, after.notices

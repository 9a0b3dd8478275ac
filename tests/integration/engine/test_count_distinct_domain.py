"""COUNT(DISTINCT x) of a bounded column uses what the policy says of x (newcomer21 #21).

* ``COUNT(DISTINCT quantity)``, bounds [1, 10]: counted per key (``count_keys``, the method of
  ``COUNT(DISTINCT category)``) over the 10 whole numbers. Values 1-5 have ~24,000 rows each
  on the demo (thousands of users), so each passes the per-key threshold (about
  G·R·ln(10)/epsilon ~ 60 rows at epsilon 1) except with probability below e^-300: the answer is
  at least 5 (was 0 [0, 10]: one noisy count of distinct values, ±150).
* ``COUNT(DISTINCT purchased_at)``, bounds 2025-01-01..2025-12-31: value and interval capped at
  the 365 days (was 413 [293, NULL]), and the notice says so in days.
"""

from __future__ import annotations

from fractions import Fraction

from dpsql.engine import Engine
from dpsql.session import SessionContext


def _answer(engine: Engine, sql: str) -> tuple[tuple[object, ...], list[str]]:
    """The one row (value, _low, _high) and the notices."""
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
    r = engine.execute(engine.prepare(sql), s)
    (row,) = r.rows
    return row, list(r.notices)


def test_a_small_bounded_domain_is_counted_per_key(engine: Engine) -> None:
    sql = "SELECT COUNT(DISTINCT quantity) FROM purchases"
    a = engine.prepare(sql).analysis  # type: ignore[union-attr]
    (m,) = a.measures
    assert m.kind == "count_keys" and m.candidates == tuple(str(i) for i in range(1, 11))
    (value, _, high), notices = _answer(engine, sql)
    assert 5 <= int(str(value)) <= 10, value  # false failure < 1e-100 (module docstring)
    assert high is not None and int(str(high)) <= 10
    assert any("interval over the 10 values its bounds allow" in n for n in notices), notices


def test_a_bounded_date_is_capped_at_its_days(engine: Engine) -> None:
    sql = "SELECT COUNT(DISTINCT purchased_at) FROM purchases"
    a = engine.prepare(sql).analysis  # type: ignore[union-attr]
    assert a.statistics[0].at_most == 365
    (value, _, high), notices = _answer(engine, sql)
    v, h = int(str(value)), None if high is None else int(str(high))
    assert v <= 365 and (h is None or h <= 365), (v, h)
    if 365 in (v, h):  # clamped: said in days
        assert any(
            "the number of days within the declared range 2025-01-01 to 2025-12-31" in n
            for n in notices
        ), notices

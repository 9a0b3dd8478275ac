"""A group's released text must not be the text of whichever of its rows PostgreSQL kept.

Equal values can print differently, and GROUP BY prints a group's key from one of its rows: an
interval's ``'24:00:00'`` and ``'1 day'`` are one value (``'1 mon'`` and ``'30 days'`` too:
PostgreSQL compares intervals by their span, months of 30 days, days of 24 hours). So
``GROUP BY CASE WHEN <condition on one row> THEN INTERVAL '24 hours' ELSE INTERVAL '1 day' END``
released ``'1 day'`` when no row met the condition and ``'24:00:00'`` when one did: an exact
bit about one person, no noise, whatever epsilon (review22; NUMERIC scales, float -0 and bpchar
padding were canonical already, dpsql.execute.key_texts). Now an interval key selected from the
data is released as one text per value (days and time), and declared interval keys that are
one value are refused as 1.0 and 1.00 are.

Deterministic: the neighbouring databases of test_data_gated_errors (unit 1's x is 10 or 90),
zero noise; the released rows must be the same on both.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import FeatureNotSupported
from dpsql.execute.key_texts import canonical_interval, check_declared
from dpsql.session import SessionContext
from tests.redteam.test_data_gated_errors import neighbours  # noqa: F401 (the fixture)

GATED = "CASE WHEN x > 50 THEN INTERVAL '{}' ELSE INTERVAL '{}' END"
PROBES = {
    "24 hours or 1 day": f"SELECT {GATED.format('24 hours', '1 day')} AS k, COUNT(*) FROM t "
    "GROUP BY 1",
    "1 day or 24 hours": f"SELECT {GATED.format('1 day', '24 hours')} AS k, COUNT(*) FROM t "
    "GROUP BY 1",
    "30 days or 1 month": f"SELECT {GATED.format('30 days', '1 month')} AS k, COUNT(*) FROM t "
    "GROUP BY 1",
    "rollup": f"SELECT {GATED.format('24 hours', '1 day')} AS k, COUNT(*) FROM t GROUP BY "
    "ROLLUP (1)",
    "a derived table": f"SELECT k, SUM(c) FROM (SELECT {GATED.format('24 hours', '1 day')} AS k, "
    "COUNT(*) AS c FROM t GROUP BY 1) s GROUP BY k",
}


def _released(engine: Engine, sql: str) -> list[tuple[object, ...]]:
    return sorted(engine.execute(engine.prepare(sql), SessionContext(analyst="analyst")).rows,
                  key=repr)  # fmt: skip


@pytest.mark.parametrize("name", sorted(PROBES))
def test_a_key_text_does_not_tell_which_row_printed_it(
    neighbours: tuple[Engine, Engine],  # noqa: F811
    name: str,
) -> None:
    low, high = neighbours
    assert _released(low, PROBES[name]) == _released(high, PROBES[name])


def test_declared_interval_keys_that_are_one_value_are_refused() -> None:
    """As ``CASE ... THEN 1.0 ELSE 1.00 END``: the two declared texts would share one group."""
    with pytest.raises(FeatureNotSupported, match="same interval value"):
        check_declared([["1 day", "24:00:00"]], ["interval"], ["k"])
    check_declared([["1 day", "2 days"]], ["interval"], ["k"])


def test_canonical_interval_is_one_text_per_postgresql_value(
    make_db: Callable[[str], str],
) -> None:
    """Against PostgreSQL: for 300 random intervals, each printed in several equal forms
    (justify_hours, justify_days, justify_interval, months as days), the canonical text is the
    same for every form, and reads back as an equal value; unequal values get unequal texts."""
    rng = random.Random(22)
    values = [
        f"{rng.randint(-30, 30)} mons {rng.randint(-400, 400)} days "
        f"{rng.randint(-200, 200)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        f".{rng.randint(0, 999999):06d}"
        for _ in range(300)
    ] + ["00:00:00", "1 day", "-1 days", "24:00:00", "1 year", "-00:00:00.5"]
    with psycopg.connect(make_db("ivcanon"), autocommit=True) as conn:
        conn.execute("SET IntervalStyle = postgres")
        rows = conn.execute(
            "SELECT v::interval::text, justify_hours(v::interval)::text, "
            "justify_days(v::interval)::text, justify_interval(v::interval)::text, "
            "(v::interval - date_trunc('month', v::interval) "
            "+ make_interval(days => 30 * extract(month FROM v::interval)::int "
            "+ 360 * extract(year FROM v::interval)::int))::text "
            "FROM unnest(%s::text[]) AS v",
            (values,),
        ).fetchall()
        forms = [[str(t) for t in r] for r in rows]
        texts = [canonical_interval(f[0]) for f in forms]
        for f, text in zip(forms, texts, strict=True):
            assert {canonical_interval(t) for t in f} == {text}, f
        same = conn.execute(
            "SELECT bool_and(a::interval = b::interval) FROM unnest(%s::text[], %s::text[]) "
            "AS p(a, b)",
            ([f[0] for f in forms], texts),
        ).fetchone()
        assert same == (True,)
        distinct = conn.execute(
            "SELECT count(DISTINCT v::interval) FROM unnest(%s::text[]) AS v",
            ([f[0] for f in forms],),
        ).fetchone()
        assert distinct == (len(set(texts)),)

"""GROUP BY a timestamp column without declared keys: the refusal at delta = 0 (and
partition selection's notice, tests/integration/engine/test_repeat_union_words.py's neighbour
below) suggests its months, in the user's own column name, when the policy bounds the column:
``date_trunc('month', purchased_at)`` has public keys (every month between the bounds), so it
needs no delta and drops no group. Before, the hint said only 'declare keys:' or 'SET
dpsql.delta' (session 20's newcomer)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.demo import POLICY
from dpsql.errors import DpsqlError
from dpsql.policy import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.parse import parse_statement
from dpsql.sql.plan import make_plan


def _refusal(sql: str) -> DpsqlError:
    tree = parse_statement(sql).tree
    assert tree is not None
    a = analyze(tree, load_policy(POLICY))
    with pytest.raises(DpsqlError) as e:
        make_plan(a, Fraction(1), Fraction(0))
    return e.value


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        (
            "SELECT CAST(p.purchased_at AS timestamp) AS d, COUNT(*) FROM purchases p GROUP BY 1",
            "p.purchased_at",
        ),
        (
            "SELECT CAST(purchased_at AS timestamp), COUNT(*) FROM purchases GROUP BY 1",
            "purchased_at",
        ),
    ],
)
def test_the_refusal_suggests_months_in_the_users_words(sql: str, name: str) -> None:
    e = _refusal(sql)
    assert e.sqlstate == "22023"
    assert f"GROUP BY date_trunc('month', {name}) instead" in (e.hint or ""), e.hint
    assert "2025-01-01 to 2025-12-31" in (e.hint or "")
    assert "SET dpsql.delta" in (e.hint or "")  # the other ways stay


def test_a_bare_bounded_date_needs_no_hint() -> None:
    """A bare date column with bounds (and CAST(d AS date)) takes its days from the bounds
    (981062e): it plans at delta = 0, one key per day of 2025, with no refusal to hint in."""
    for sql in (
        "SELECT purchased_at, COUNT(*) FROM purchases GROUP BY purchased_at",
        "SELECT p.purchased_at AS d, COUNT(*) FROM purchases p GROUP BY 1",
    ):
        tree = parse_statement(sql).tree
        assert tree is not None
        make_plan(analyze(tree, load_policy(POLICY)), Fraction(1), Fraction(0))


def test_a_key_without_bounds_gets_no_month_hint() -> None:
    e = _refusal("SELECT amount, COUNT(*) FROM purchases GROUP BY amount")
    assert "date_trunc" not in (e.hint or "") and "SET dpsql.delta" in (e.hint or "")

"""Numbers in notices a user reads: an AVG that is NULL says why; a selection's margin is a
whole number of rows; a date/timestamp SUM/AVG is refused in PostgreSQL's terms (42883)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.demo import POLICY
from dpsql.errors import DpsqlError
from dpsql.execute.accuracy_avg import avg_nulls
from dpsql.policy import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.parse import parse_statement

policy = load_policy(POLICY)


def _analysis(sql: str):  # type: ignore[no-untyped-def]
    tree = parse_statement(sql).tree
    assert tree is not None
    return analyze(tree, policy)


def test_a_null_average_says_why() -> None:
    a = _analysis("SELECT educ, AVG(income) FROM pums GROUP BY educ")
    s = a.statistics[0]
    noisy = {s.measures[0]: np.array([10.0, 5.0, 7.0]), s.measures[1]: np.array([3.0, 0.4, -2])}
    text = avg_nulls(a, s, noisy)
    assert "NULL in 2 of 3 groups" in text and "below 1" in text
    noisy[s.measures[1]] = np.array([3.0, 1.0, 2.0])
    assert avg_nulls(a, s, noisy) == ""


@pytest.mark.parametrize("func", ["AVG", "SUM", "variance", "stddev"])
def test_arithmetic_of_a_date_is_refused_as_postgresql_does(func: str) -> None:
    with pytest.raises(DpsqlError) as e:
        _analysis(f"SELECT {func}(purchased_at) FROM purchases")
    assert e.value.sqlstate == "42883"
    assert f"{func}(purchased_at): PostgreSQL has no {func} of a date" in e.value.message
    assert "MEDIAN(purchased_at)" in (e.value.hint or "")


def test_two_fallen_back_caps_say_which() -> None:
    """A COUNT's and a SUM's caps over all groups fell back: each names what it caps (was 'cap
    per user_id over all its groups' twice)."""
    from fractions import Fraction

    from dpsql.execute.auto_bounds_text import _label
    from dpsql.sql.auto_bound_types import ChosenBound

    rows = ChosenBound("total", "count_rows", Fraction(1), Fraction(0), 0, 0, fallback=True)
    amount = ChosenBound("total", 'sum("p"."amount")', Fraction(500), Fraction(0), 0, 0)
    assert _label(rows) == "cap of rows per unit over all its groups"
    assert _label(amount) == "cap of amount summed per unit over all its groups"


def test_one_unit_outside_its_range_has_a_value() -> None:
    """Number agreement (words28): the premise-false warning reads "about 1 pid has values",
    "about 3 pid have" (was "about 1 pid have"); with "or more" the plural stays."""
    from dpsql.execute.declared_text import outside_warning

    a = _analysis("SELECT SUM(income) FROM pums")
    s = a.statistics[0]
    assert "But about 1 pid has values of income outside" in outside_warning(a, s, 1.0)
    assert "But about 3 pid have values of income outside" in outside_warning(a, s, 3.0)
    q = _analysis("SELECT MEDIAN(income) FROM pums")
    assert "But about 1 or more pid have values of" in outside_warning(q, q.statistics[0], 1.0)

"""A quantile's notice says where its answer is noise (newcomer22 #11): medians by diagnosis at
epsilon 0.3 answered 2,609.9 against a truth of 181.4 (above the table's 99th percentile) in
groups of about 2,850 rows with a rank error of 2,414 rows, and the notice blamed its NULL
columns on the bounds alone. The words hold whatever the data: the q quantile's answer is
informative only when its rank error t is below the rows on its nearer side, so a group of
fewer than t / min(q, 1 - q) rows gets no clear estimate; MIN and MAX can land anywhere
between the extreme and the declared bound (every value beyond it ranks the same)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from dpsql.dp.quantiles import Quantile
from dpsql.execute.notices import quantile_note
from dpsql.sql.plan import make_plan
from tests.unit.sql.test_quantile_analysis import analysis


def _note(sql: str, epsilon: Fraction) -> tuple[str, Quantile]:
    a = analysis(sql)
    plan = make_plan(a, epsilon, Fraction(0))
    (s,) = a.statistics
    mech = plan.measure_plan(s.measures[0]).mechanism
    assert isinstance(mech, Quantile)
    return quantile_note(plan, s, 0.95), mech


def test_a_median_states_the_group_size_below_which_it_is_noise() -> None:
    for q, sql in (
        (0.5, "SELECT u.g, MEDIAN(u.x) FROM u GROUP BY u.g"),
        (0.9, "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY y) FROM t"),
    ):
        for eps in (Fraction(3, 10), Fraction(3)):
            note, mech = _note(sql, eps)
            m = re.search(
                r"A group of fewer than ([\d,]+) rows kept by the contribution bounds \(at most "
                r"\d+ rows? per \w+(?: in a group)?; a COUNT\(\*\) of the group counts all its "
                r"rows, more where a \w+ has more, so it can pass this number while the kept rows "
                r"do not\) gets no clear estimate",
                note,
            )
            assert m, note  # in kept rows, and said so (nullmed24: readers compare COUNT(*))
            # the threshold follows the stated rank error: t / min(q, 1 - q)
            t = mech.rank_error(0.95)
            assert int(m[1].replace(",", "")) == math.ceil(t / min(q, 1 - q)), (note, t)
            assert "the noise of the selection" in note and "raise dpsql.epsilon" in note


def test_max_and_min_say_they_may_land_anywhere_up_to_the_bound() -> None:
    for sql, far in (("SELECT MAX(y) FROM t", "largest"), ("SELECT MIN(y) FROM t", "smallest")):
        note, _ = _note(sql, Fraction(1))
        assert f"anywhere between the {far} value and the column's declared bound" in note, note
        assert "A group of fewer than" not in note

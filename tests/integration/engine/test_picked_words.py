"""Rows picked by a noisy value say so (newcomer25 #17, #2, #13): an ORDER BY of a released
statistic with LIMIT / OFFSET, and a HAVING threshold on one, choose groups by their noisy
answers; where the rows at the cut are within each other's noise (of the threshold), a notice
says which, that the data may pick other groups, that the picked answers lean past the cut (the
winner's curse, said once) and what sharpens the cut. Where the cut is clear of the noise,
nothing is said. Decided from the released values and their noise alone: on the zero-noise
source the released values are the data's (the demo's, below), the noise intervals the
mechanism's, so the words are deterministic.

Demo truths: purchases per category books 24,216, clothing 24,040, electronics 24,247,
groceries 23,672, travel 23,950 (COUNT(*) noise ±416 at 95%); pums people aged 20-29 per educ
42, 40, 28, 12, 11, ... (COUNT(DISTINCT pid) noise ±3.5).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.execute.accuracy_avg import few_rows
from dpsql.session import SessionContext
from tests.helpers import EXACT


@pytest.fixture(scope="module")
def exact(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, pool_size=1, noise=EXACT)
    yield e
    e.close()


def _run(e: Engine, sql: str) -> tuple[list[tuple[Any, ...]], list[str]]:
    r = e.execute(e.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    return list(r.rows), list(r.notices)


def _picked(notices: list[str]) -> list[str]:
    return [n for n in notices if " picks rows by " in n or " picks groups" in n]


CURSE = "(the winner's curse)"


def test_a_top_n_inside_the_noise_says_so(exact: Engine) -> None:
    """Property: ORDER BY COUNT(*) DESC LIMIT 2 over categories whose counts are within ±416 of
    each other names the cut (the 2nd row and the row left out after it), says the rows shown may
    be other groups, that they read high, and what to do. Fails before (no such notice)."""
    rows, notices = _run(
        exact, "SELECT category, COUNT(*) FROM purchases GROUP BY category ORDER BY 2 DESC LIMIT 2"
    )
    assert rows == [("electronics", 24247), ("books", 24216)]
    (line,) = _picked(notices)
    assert line.startswith(
        "ORDER BY COUNT(*) DESC LIMIT 2 picks rows by a noisy value: the 2nd row's, 24,216, is "
        "within the noise of all 3 rows it left out after it (the next: 24,040; each ±416 "
        "at 95%, so their noise intervals overlap): other groups may belong among the rows "
        "shown. The order of the 2 rows shown is within the noise too. The rows it picks read "
        "high"
    ), line
    assert CURSE in line and "raise dpsql.epsilon" in line, line


def test_two_rows_left_out_are_both_rows(exact: Engine) -> None:
    """Property: LIMIT 3 of the five categories leaves 2 rows out, both within the noise of the
    3rd: "both rows", not "all 2 rows" (newcomer26 #6, newcomer27 #7). Fails before."""
    _, notices = _run(
        exact, "SELECT category, COUNT(*) FROM purchases GROUP BY category ORDER BY 2 DESC LIMIT 3"
    )
    (line,) = _picked(notices)
    assert (
        "the 3rd row's, 24,040, is within the noise of both rows it left out after it (the "
        "next: 23,950" in line
    ), line
    assert "all 2 rows" not in line, line


def test_a_clear_cut_says_nothing(exact: Engine) -> None:
    """Property: LIMIT 2 over 42, 40 | 28, 12, ... (±3.5): the cut is clear of the noise (the
    order of the two shown is not: no words for that alone, as ORDER BY without LIMIT); LIMIT 3
    is clear too (28 | 12). OFFSET 1 LIMIT 1: 40 is within the noise of 42, skipped before it."""
    base = "SELECT educ, COUNT(DISTINCT pid) FROM pums WHERE age BETWEEN 20 AND 29 GROUP BY educ"
    for limit in ("LIMIT 2", "LIMIT 3"):
        rows, notices = _run(exact, f"{base} ORDER BY 2 DESC {limit}")
        assert [r[1] for r in rows][:2] == [42, 40]
        assert _picked(notices) == [], notices
    rows, notices = _run(exact, f"{base} ORDER BY 2 DESC LIMIT 1 OFFSET 1")
    assert rows == [(11, 40)]
    (line,) = _picked(notices)
    assert (
        "the first row's, 40, is within the noise of the row its OFFSET skipped before it (the "
        "last: 42; each ±3.5 at 95%, so their noise intervals overlap)"
    ) in line, line


def test_having_near_its_threshold_says_which_and_the_curse_once(exact: Engine) -> None:
    """Property: HAVING COUNT(*) > 24000 over counts within ±416 of 24,000 names the groups kept
    near it and how many were left out near it, says the kept ones read high once (not again in
    the ORDER BY ... LIMIT words beside it); a threshold far from every answer says nothing."""
    sql = (
        "SELECT category, COUNT(*) FROM purchases GROUP BY category HAVING COUNT(*) > 24000 "
        "ORDER BY 2 DESC LIMIT 2"
    )
    rows, notices = _run(exact, sql)
    assert rows == [("electronics", 24247), ("books", 24216)]
    having, top = _picked(notices)
    assert having.startswith(
        "HAVING COUNT(*) > 24,000 picks groups by a noisy value: 3 groups kept (books: 24,216; "
        "clothing: 24,040; electronics: 24,247) and 2 groups left out lie within the noise of "
        "24,000 (±416 at 95%): in the data each may be on the other side of it. The groups it "
        "keeps read high"
    ), having
    assert CURSE in having and CURSE not in top, (having, top)
    assert top.startswith("ORDER BY COUNT(*) DESC LIMIT 2 picks rows"), top
    _, far = _run(
        exact, "SELECT category, COUNT(*) FROM purchases GROUP BY category HAVING COUNT(*) > 10000"
    )
    assert _picked(far) == [], far
    _, below = _run(
        exact,
        "SELECT category, COUNT(*) FROM purchases GROUP BY category HAVING 23900 > COUNT(*)",
    )
    (low,) = _picked(below)
    assert low.startswith(
        "HAVING COUNT(*) < 23,900 picks groups by a noisy value: 1 group kept (groceries: "
        "23,672) and 4 groups left out lie within the noise of 23,900"
    ), low
    assert "The groups it keeps read low" in low, low


def test_a_wide_average_says_its_small_group_honestly(exact: Engine) -> None:
    """Property (newcomer25 #4): where an AVG's interval spans most of the declared range and
    the smallest such group's noisy count is within its noise, the words give the bound the
    noise allows, not 'about 1 rows'. educ 15 has one person aged 20-29 (exact: count 1)."""
    _, notices = _run(
        exact, "SELECT educ, AVG(income) FROM pums WHERE age BETWEEN 20 AND 29 GROUP BY educ"
    )
    line = next(n for n in notices if n.startswith("AVG(income):"))
    assert "about 1 rows" not in line and "1 rows" not in line, line
    # since session 27 that group is NULL (its count, 1, is below the AVG's clear count: the
    # noise alone leaves its average anywhere in the range), and the line says so
    assert re.search(r"It is NULL in \d+ of 16 groups, with its _low/_high interval columns: "
                     r"(in \d+ of them )?its noisy count of rows came out below [\d,]+", line), line  # fmt: skip
    # the words of a count within its noise, where a wide group's is
    assert few_rows(1, 17.5) == "at most 19 rows: its noisy count, 1, is within its noise, ±17.5"


def test_an_average_top_n_reads_its_noise_intervals(exact: Engine) -> None:
    """Property: an AVG's noise is no one number (its sum's and count's): the words state the
    two noise intervals that overlap (purchases by category: 77.1, 75.9 | 75.2, ...); NULL
    averages (dpsql.execute.avg_unclear) at the cut are not compared: pums aged 20-40 by educ,
    every group NULL since session 28 (6 of them printed a value with the interval [0, 500,000]
    before, 7 before session 27), which PostgreSQL sorts first for DESC: LIMIT 3 shows three
    NULLs, nothing to compare."""
    rows, notices = _run(
        exact,
        "SELECT category, AVG(amount) AS a FROM purchases GROUP BY category "
        "ORDER BY a DESC NULLS LAST LIMIT 2",
    )
    assert [r[0] for r in rows] == ["travel", "clothing"], rows
    (line,) = _picked(notices)
    assert line.startswith(
        "ORDER BY AVG(amount) DESC NULLS LAST LIMIT 2 picks rows by a noisy value: the 2nd row's, "
        "75.9, is within the noise of all 3 rows it left out after it (the next: 75.2; their "
        "noise intervals at 95%, [56.9921, 93.2286] and [56.469, 92.4511], overlap)"
    ), line
    base = "SELECT educ, AVG(income) AS a FROM pums WHERE age BETWEEN 20 AND 40 GROUP BY educ"
    rows, notices = _run(exact, f"{base} ORDER BY a DESC LIMIT 3")
    assert [r[1] for r in rows] == [None, None, None], rows
    assert _picked(notices) == [], notices


def test_a_having_with_a_limit_counts_every_group_it_kept(exact: Engine) -> None:
    """Property: HAVING ... LIMIT 1 without an ORDER BY of a statistic: the groups the HAVING kept
    near its threshold are counted from every row it kept, not the one row the LIMIT shows
    (books 24,216, clothing 24,040, electronics 24,247 within ±832 of 24,000; travel 23,950 and
    groceries 23,672 left out near it: its whole HAVING is not one comparison, so those are
    not counted)."""
    _, notices = _run(
        exact,
        "SELECT category, COUNT(*) FROM purchases GROUP BY category "
        "HAVING COUNT(*) > 24000 AND SUM(amount) > 0 LIMIT 1",
    )
    (line,) = _picked(notices)
    assert line.startswith(
        "HAVING COUNT(*) > 24,000 picks groups by a noisy value: 3 groups kept (books: 24,216; "
        "clothing: 24,040; electronics: 24,247) lie within the noise of 24,000 (±832 at 95%)"
    ), line


def test_groups_from_the_data_are_told_to_declare_keys(exact: Engine) -> None:
    """Property: where partition selection chooses the groups (income / 100000 has no declared
    keys), a share of epsilon goes to choosing them: the advice names declaring the keys. And
    with hundreds of groups tied at 1 (the ranked run may order ties otherwise than the LIMIT's
    top-N), no OFFSET the statement does not have is spoken of."""
    _, notices = _run(
        exact, "SELECT income / 100000 AS b, COUNT(*) FROM pums GROUP BY 1 ORDER BY 2 LIMIT 1"
    )
    (line,) = _picked(notices)
    assert line.startswith(
        "ORDER BY COUNT(*) ASC LIMIT 1 picks rows by a noisy value: the 1st row's, 1, is within "
        "the noise of "
    ), line
    assert "OFFSET" not in line and "The rows it picks read low" in line, line
    assert line.endswith(
        "For a sharper cut: raise dpsql.epsilon (the noise shrinks as it grows), or ask the data "
        "owner to declare the keys of income / 100000 (keys: in the policy: then no share of "
        "epsilon goes to choosing which groups to show)."
    ), line


def test_a_wrapper_or_cte_of_released_values_says_so_too(exact: Engine) -> None:
    """Property: a top-N or a HAVING over a derived table or CTE of released values (a BI
    tool's wrapper, `WITH c AS (...) SELECT ... FROM c ORDER BY n DESC LIMIT 2`) is the same cut
    as the flat statement's and gets the same words; the flattened query orders by the
    statistic in parentheses. Fails before (no notice: `ORDER BY (n)` was not read as the
    statistic)."""
    flat = "SELECT category, COUNT(*) FROM purchases GROUP BY category ORDER BY 2 DESC LIMIT 2"
    inner = "SELECT category, COUNT(*) AS n FROM purchases GROUP BY category"
    _, want = _run(exact, flat)
    for sql in (
        f"SELECT category, n FROM ({inner}) t ORDER BY n DESC LIMIT 2",
        f"WITH c AS ({inner}) SELECT * FROM c ORDER BY n DESC LIMIT 2",
    ):
        rows, notices = _run(exact, sql)
        assert rows == [("electronics", 24247), ("books", 24216)]
        assert _picked(notices) == _picked(want), (sql, notices)
    rows, notices = _run(exact, f"WITH c AS ({inner}) SELECT category, n FROM c WHERE n > 24000")
    assert len(rows) == 3
    (having,) = _picked(notices)
    assert having.startswith(
        "HAVING COUNT(*) > 24,000 picks groups by a noisy value: 3 groups kept (books: 24,216; "
        "clothing: 24,040; electronics: 24,247) and 2 groups left out lie within the noise"
    ), having
    _, far = _run(exact, f"SELECT * FROM ({inner}) t WHERE n > 10000")
    assert _picked(far) == [], far


def test_an_expression_of_statistics_cuts_by_its_noise_range(exact: Engine) -> None:
    """Property: ORDER BY / HAVING an expression of statistics (arithmetic, a CASE, ln, sqrt)
    decides the cut on the expression's range over its statistics' noise intervals: within the
    noise it says so, naming the expression as written; clear of it, nothing. Fails before
    (ORDER BY an expression was never read: no words)."""
    base = "SELECT category, COUNT(*) FROM purchases GROUP BY category ORDER BY"
    for order, text, nxt in (
        ("-COUNT(*) LIMIT 2", "-COUNT(*) ASC LIMIT 2", "-24,040"),
        ("COUNT(*) * 2 + 1 DESC LIMIT 2", "COUNT(*) * 2 + 1 DESC LIMIT 2", "48,081"),
        ("ln(COUNT(*)) DESC LIMIT 2", "LN(COUNT(*)) DESC LIMIT 2", "10.0875"),
        (
            "CASE WHEN COUNT(*) > 0 THEN COUNT(*) END DESC LIMIT 2",
            "CASE WHEN COUNT(*) > 0 THEN COUNT(*) END DESC LIMIT 2",
            "24,040",
        ),
        # clothing's 24,040 is NULL (sorted last), but its noise reaches past 24,100
        (
            "CASE WHEN COUNT(*) > 24100 THEN COUNT(*) END DESC NULLS LAST LIMIT 2",
            "CASE WHEN COUNT(*) > 24100 THEN COUNT(*) END DESC NULLS LAST LIMIT 2",
            "NULL",
        ),
    ):
        rows, notices = _run(exact, f"{base} {order}")
        assert rows == [("electronics", 24247), ("books", 24216)], order
        (line,) = _picked(notices)
        assert line.startswith(f"ORDER BY {text} picks rows by a noisy value: the 2nd row's, "), (
            line
        )
        assert f"is within the noise of all 3 rows it left out after it (the next: {nxt}; " in line
        # no one ± says an expression's noise: the two intervals compared, as they are (not
        # where one reaches a NULL: the CASE's ELSE)
        if nxt == "NULL":
            assert "their noise intervals at 95% overlap" in line, line
            continue
        assert re.search(r"their noise intervals at 95%, \[[-\d,.]+, [-\d,.]+\] and "
                         r"\[[-\d,.]+, [-\d,.]+\], overlap\)", line), line  # fmt: skip
    pums = "SELECT educ, COUNT(DISTINCT pid) FROM pums WHERE age BETWEEN 20 AND 29 GROUP BY educ"
    for order in ("-COUNT(DISTINCT pid) LIMIT 3", "sqrt(COUNT(DISTINCT pid)) DESC LIMIT 3"):
        rows, notices = _run(exact, f"{pums} ORDER BY {order}")  # 42, 40, 28 | 12: clear
        assert [r[1] for r in rows] == [42, 40, 28] and _picked(notices) == [], notices
    _, notices = _run(exact, f"{pums} ORDER BY power(COUNT(DISTINCT pid), 2) DESC LIMIT 3")
    (line,) = _picked(notices)  # a function whose noise range dpsql does not know
    assert line.startswith(
        "ORDER BY POWER(COUNT(DISTINCT pid), 2) DESC LIMIT 3 picks rows by noisy values through "
        "an expression whose noise dpsql cannot bound"
    ), line
    rows, notices = _run(
        exact,
        "SELECT category, SUM(amount) / COUNT(*) FROM purchases GROUP BY category "
        "HAVING SUM(amount) / COUNT(*) > 76",
    )
    assert [r[0] for r in rows] == ["travel"], rows
    (line,) = _picked(notices)
    assert line.startswith(
        "HAVING SUM(amount) / COUNT(*) > 76 picks groups by a noisy value: 1 group kept (travel: "
    ), line
    assert "and 4 groups left out lie within the noise of 76 (their noise intervals at 95%)" in line


def test_grouping_sets_cut_by_noisy_values_say_so(exact: Engine) -> None:
    """Property: a top-N or a HAVING over GROUPING SETS / ROLLUP reads each set's rows at their
    own noise: the ROLLUP's total (120,125) is clear of the categories below it (LIMIT 1: no
    words), the next two are not (OFFSET 1 LIMIT 2); a HAVING names the groups it kept near its
    threshold by their keys as the rows show them. Fails before (grouping sets' releases kept no
    noise intervals: no words)."""
    base = "SELECT category, COUNT(*) FROM purchases GROUP BY ROLLUP (category) ORDER BY 2 DESC"
    rows, notices = _run(exact, f"{base} LIMIT 1")
    assert rows == [(None, 120125)] and _picked(notices) == [], notices
    rows, notices = _run(exact, f"{base} LIMIT 2 OFFSET 1")
    assert rows == [("electronics", 24247), ("books", 24216)]
    (line,) = _picked(notices)
    assert line.startswith(
        "ORDER BY COUNT(*) DESC LIMIT 2 OFFSET 1 picks rows by a noisy value: the last row's (3rd "
        "in order), 24,216, is within the noise of all 3 rows it left out after it (the next: "
        "24,040; their noise intervals at 95%, [23,383.5, 25,048.5] and [23,207.5, 24,872.5], "
        "overlap)"
    ), line
    rows, notices = _run(
        exact,
        "SELECT category, region, COUNT(*) FROM purchases "
        "GROUP BY GROUPING SETS ((category), (region)) HAVING COUNT(*) > 24000",
    )
    (having,) = _picked(notices)
    assert having.startswith(
        "HAVING COUNT(*) > 24,000 picks groups by a noisy value: 5 groups kept (books, NULL: "
        "24,216; clothing, NULL: 24,040; electronics, NULL: 24,247 and 2 more) and 5 groups left "
        "out lie within the noise of 24,000"
    ), having

"""Every private answer says how accurate it is, in every statement shape (issue 16 item 2).

On the shipped demo policy (``auto`` bounds) each shape a psql user may send -- a plain
aggregate, GROUP BY, quantiles, MIN/MAX, COUNT(DISTINCT) over keys and over the unit, VARIANCE,
an expression of aggregates, a join with a public table, a join of two private tables, a CTE, a
window over aggregates, scalar subqueries, a per-person derived table, ROLLUP -- gets a notice
for each of its statistics naming the level and a half-width (``±``) or, for a quantile, the
probability its interval holds; a statistic whose bias is not estimated says so (``NOT``).
Deterministic: the notices' wording, whatever the noise.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.engine import Engine
from tests.helpers import ledgered_engine, notices_of

PER_UNIT = "(SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t"
# (statement, the heads of the statistics' notice lines)
SHAPES: list[tuple[str, tuple[str, ...]]] = [
    ("SELECT COUNT(*), SUM(amount), AVG(amount) FROM purchases", ("COUNT(*)", "SUM(amount)", "AVG(amount)")),
    ("SELECT category, COUNT(*) FROM purchases GROUP BY category", ("COUNT(*)",)),
    ("SELECT region, COUNT(DISTINCT user_id) FROM purchases GROUP BY region", ("COUNT(DISTINCT user_id)",)),
    ("SELECT COUNT(DISTINCT category) FROM purchases", ("COUNT(DISTINCT category)",)),
    ("SELECT category, VARIANCE(quantity), STDDEV(quantity) FROM purchases GROUP BY category", ("VARIANCE(quantity)", "STDDEV(quantity)")),
    ("SELECT SUM(amount) / COUNT(*) AS r FROM purchases", ("SUM(amount)", "COUNT(*)")),
    ("SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON p.region = r.code GROUP BY r.name", ("COUNT(*)",)),
    ("SELECT COUNT(*) FROM purchases p JOIN pums u ON p.user_id = u.pid", ("COUNT(*)",)),
    ("WITH c AS (SELECT category, SUM(amount) AS s FROM purchases GROUP BY category) SELECT category, s / 1000 FROM c", ("SUM(amount)",)),
    ("SELECT category, COUNT(*), RANK() OVER (ORDER BY COUNT(*) DESC) FROM purchases GROUP BY category", ("COUNT(*)",)),
    ("SELECT (SELECT COUNT(*) FROM purchases) AS a, (SELECT AVG(income) FROM pums) AS b", ("COUNT(*)", "AVG(income)")),
    (f"SELECT AVG(n), SUM(n) FROM {PER_UNIT}", ("AVG(n)", "SUM(n)")),
    ("SELECT category, region, COUNT(*) FROM purchases GROUP BY ROLLUP (category, region)", ("COUNT(*)",)),
]  # fmt: skip
QUANTILES = [  # (statement, its quantiles)
    ("SELECT MEDIAN(income) FROM pums", 1),
    # (a grouped quantile with an answer: pums' sexes' 0.9 quantiles of income are NULL, too few
    # rows for a clear one, and a quantile NULL in every row describes no interval, words28;
    # each category keeps about 12,000 rows against the 2,555 a clear one needs here)
    (
        "SELECT category, percentile_cont(0.9) WITHIN GROUP (ORDER BY amount) FROM purchases "
        "GROUP BY category",
        1,
    ),
    ("SELECT MIN(purchased_at), MAX(purchased_at) FROM purchases", 2),
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_an") as e:
        yield e


def _stat(line: str) -> str:
    """A notice line's statistic: its text before ': 95% interval' (a tree leaf's line starts
    with the leaf's name and ': ')."""
    return line.split(": 95% interval")[0].split(": ")[-1]


@pytest.mark.parametrize(("sql", "heads"), SHAPES, ids=[s for s, _ in SHAPES])
def test_every_statistic_has_a_level_and_a_half_width(
    engine: Engine, sql: str, heads: tuple[str, ...]
) -> None:
    lines = [n for n in notices_of(engine, sql) if ": 95% interval" in n]
    for head in heads:
        mine = [n for n in lines if _stat(n) == head]
        assert mine, (head, lines)
        for line in mine:
            assert "±" in line, line


@pytest.mark.parametrize(("sql", "count"), QUANTILES)
def test_every_quantile_says_how_likely_its_interval_holds(
    engine: Engine, sql: str, count: int
) -> None:
    notes = [n for n in notices_of(engine, sql) if not n.startswith("contribution bounds")]
    holds = [n for n in notes if "the interval holds" in n and "with probability" in n]
    assert len(holds) == count, notes


# Words a new user never wrote and should never read (issue 16: notices in the user's terms):
# sqlglot's renderings (VAR_SAMP for variance(x), PERCENTILE_CONT for MEDIAN(x), DECIMAL for
# numeric), the analysis' qualified columns ("purchases"."amount"), doubled brackets, and
# "1 rows"-style plurals.
_FOREIGN = re.compile(
    r'VAR_SAMP|PERCENTILE_CONT|DECIMAL|"\w+"\."|\(\(|\b1 (rows|groups|values|keys)\b', re.I
)


@pytest.mark.parametrize(("sql", "heads"), SHAPES, ids=[s for s, _ in SHAPES])
def test_notices_use_only_the_users_words(engine: Engine, sql: str, heads: object) -> None:
    for line in notices_of(engine, sql):
        assert not _FOREIGN.search(line), line


@pytest.mark.parametrize(
    ("sql", "heads"),
    [
        ("SELECT MEDIAN(amount), variance(amount), stddev(amount) FROM purchases", ("variance(amount)", "stddev(amount)")),
        ("WITH t AS (SELECT amount * quantity AS v FROM purchases WHERE amount > 10) SELECT SUM(v) FROM t", ("SUM(v)",)),
        ("SELECT SUM(amount::numeric(10,2)) FROM purchases", ("SUM(amount::numeric(10,2))",)),
        ("SELECT category, sum( (amount) ) FROM purchases GROUP BY category", ("sum( (amount) )",)),
    ],
)  # fmt: skip
def test_a_statistic_is_named_as_written(engine: Engine, sql: str, heads: tuple[str, ...]) -> None:
    """The notice names each statistic by its text in the statement (whitespace collapsed),
    and a removed amount by its expression without internals: ``of amount * quantity``."""
    notes = notices_of(engine, sql)
    for head in heads:
        assert any(n.startswith(f"{head}: 95% interval") for n in notes), (head, notes)
    for line in notes:
        assert not _FOREIGN.search(line), line
    if "SUM(v)" in heads:
        (line,) = [n for n in notes if n.startswith("SUM(v): ")]
        assert " of amount * quantity" in line, line


_SPLIT = re.compile(
    r"lost more than ([\d,.]+) rows? in one group \(its share of ([\d,.]+) rows? in all, 4x the "
    r"([\d,.]+) rows? the bounds keep of one user_id (?:over all groups|in a group), split over "
    r"the (\d+) groups a user_id can reach(, at least 1 row in each)?\)"
)
_WHOLE = re.compile(
    r"lost more than ([\d,.]+) rows? \(4x the ([\d,.]+) rows? the bounds keep of one user_id\)"
)


def _num(x: str) -> float:
    return float(x.replace(",", ""))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT category, COUNT(*) FROM purchases GROUP BY category",
        "SELECT region, category, COUNT(*) FROM purchases GROUP BY region, category",
    ],
)
def test_the_assumed_cap_agrees_with_its_words_per_group(engine: Engine, sql: str) -> None:
    """Split over K declared groups, the assumption's figure is 4x what the bounds keep of one
    user, shared over the K groups (at least one row in each): the figure and its words agree
    (it said "(4x what the bounds keep)" beside 4x / K of it; then "(4x the 8 rows ..., 32
    rows, shared over the 5 groups ...)" beside 6, read as 32 in each group, newcomer24 #11: the
    total now comes first, "its share of 32 rows in all"). Deterministic given the bounds
    chosen (whatever they are)."""
    (line,) = [n for n in notices_of(engine, sql) if n.startswith("COUNT(*): ")]
    if "does NOT cover" in line:  # the over-cap alarm (a noisy test): no assumption stated
        return
    m = _SPLIT.search(line)
    assert m, line
    cap, total, kept, k = _num(m[1]), _num(m[2]), _num(m[3]), int(m[4])
    assert total == 4 * kept, line
    assert cap == max(1, (4 * kept) // k), line
    assert (m[5] is not None) == (4 * kept < k), line


def test_the_assumed_cap_agrees_with_its_words(engine: Engine) -> None:
    (line,) = [
        n
        for n in notices_of(engine, "SELECT COUNT(*) FROM purchases")
        if n.startswith("COUNT(*): ")
    ]
    if "does NOT cover" in line:
        return
    m = _WHOLE.search(line)
    assert m, line
    assert _num(m[1]) == 4 * _num(m[2]), line


def test_explain_names_the_statistics_as_written(engine: Engine) -> None:
    from dpsql.session import SessionContext

    sql = "EXPLAIN SELECT MEDIAN(amount), variance(amount) FROM purchases"
    r = engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
    text = "\n".join(str(row[0]) for row in r.rows)
    assert "MEDIAN(amount)" in text and "variance(amount)" in text, text
    assert "PERCENTILE_CONT" not in text and "VAR_SAMP" not in text, text
    # measures name their column as written, counts agree with their nouns (was
    # quantile("purchases"."amount") and "<= 1 rows per group"); and by the aggregates they
    # serve, not dpsql's measure names (newcomer30 W4: was quantile(amount)[0,500]...)
    assert "Measure MEDIAN(amount) (amount in [0, 500])" in text, text
    assert "Measure the sum of squares part of variance(amount)" in text, text
    assert "quantile(" not in text and not _FOREIGN.search(text), text


@pytest.mark.parametrize(
    ("sql", "names"),
    [
        ("SELECT category, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share, variance(amount) "
         "FROM purchases GROUP BY category",
         ["category", "share", "variance", "share_low", "share_high", "variance_low", "variance_high"]),
        ("SELECT AVG(n), variance(n) FROM (SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ) t",
         ["avg", "variance", "avg_low", "avg_high", "variance_low", "variance_high"]),
    ],
)  # fmt: skip
def test_a_tree_statement_names_columns_as_postgresql_does(
    engine: Engine, sql: str, names: list[str]
) -> None:
    """``variance(x)`` over a tree's leaf is a column ``variance`` (PostgreSQL's label), its
    interval columns ``variance_low``/``_high``, and a NULL interval says why under that name
    (the post-processing SQL was rendered as VAR_SAMP: a column ``var_samp``, and its NULL
    reason was missing)."""
    from dpsql.session import SessionContext

    s = SessionContext("analyst", Fraction(1), show_intervals=True)
    r = engine.execute(engine.prepare(sql, "analyst"), s)
    assert [c.name for c in r.columns] == names
    for line in r.notices:
        assert not _FOREIGN.search(line), line
    if "FROM (SELECT educ" in sql:
        assert any(
            "variance_low, variance_high are NULL: VARIANCE of noisy values" in n for n in r.notices
        ), r.notices


def test_a_date_quantile_states_its_bucket_in_days(engine: Engine) -> None:
    """MIN/MAX of a date: the bucket the rank error rounds to is in days (was "(1 wide)")."""
    notes = notices_of(engine, "SELECT MIN(purchased_at), MAX(purchased_at) FROM purchases")
    widths = [m.group(0) for n in notes if (m := re.search(r"nearest bucket \([^)]*\)", n))]
    assert len(widths) == 2, notes
    assert all(re.fullmatch(r"nearest bucket \([\d,]+ days? wide\)", w) for w in widths), widths


QUANTILE_HEADS = [
    ("SELECT MEDIAN(income) FROM pums", "MEDIAN(income): the interval holds"),
    (
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY income) FROM pums",
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY income): the interval holds",
    ),
    (
        "SELECT category, percentile_cont(0.9) WITHIN GROUP (ORDER BY amount) AS p90 FROM "
        "purchases GROUP BY category",
        "percentile_cont(0.9) WITHIN GROUP (ORDER BY amount) (column p90): the interval holds",
    ),
    (
        "SELECT MODE() WITHIN GROUP (ORDER BY educ) FROM pums",
        "MODE() WITHIN GROUP (ORDER BY educ): no value interval",
    ),
]


@pytest.mark.parametrize(("sql", "head"), QUANTILE_HEADS, ids=[s for s, _ in QUANTILE_HEADS])
def test_quantile_notices_name_the_aggregate_as_written(
    engine: Engine, sql: str, head: str
) -> None:
    """A quantile's or mode's notice starts with the aggregate in the user's words, as the other
    statistics' do (before: the column label, 'median: ...', 'percentile_cont: ...')."""
    notes = notices_of(engine, sql)
    assert any(n.startswith(head) for n in notes), notes

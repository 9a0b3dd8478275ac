"""The accuracy notice names the premise the policy makes: a column's declared bounds hold its
values (issue 16). The demo's 5 whales have amounts of 250,000 to 1,250,000 against the declared
``amount: bounds [0, 500]``: they count as 500, and no interval includes what they add beyond
it, so every statistic that clamps amount says so in the analyst's words. With ``clamp:
auto`` the clamp in force may be narrower than the declared range (chosen with noise): the
premise then says a value outside the range counts as that clamp's ends (not "larger values
count as 500", which the clamp at 354 said beside it contradicts), so each line must state one
of the two forms, and the second only with the clamp its own line names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dpsql.engine import Engine
from tests.helpers import ledgered_engine, notices_of

AMOUNT = "every amount lies in its declared range 0 to 500 (larger values count as 500, smaller ones as 0)"
# (statement, the start of each notice line that must state the premise)
CLAMPING: list[tuple[str, tuple[str, ...]]] = [
    ("SELECT SUM(amount) / COUNT(*) AS r FROM purchases", ("SUM(amount): ",)),
    ("SELECT category, AVG(amount) FROM purchases GROUP BY category", ("AVG(amount): ",)),
    ("SELECT category, VARIANCE(amount) FROM purchases GROUP BY category", ("VARIANCE(amount): ",)),
    ("SELECT MAX(amount) AS m FROM purchases", ("MAX(amount) (column m): ",)),
    ("WITH c AS (SELECT category, SUM(amount) AS s FROM purchases GROUP BY category) SELECT category, s / 1000 FROM c", ("SUM(amount): ",)),
    ("SELECT r.name, AVG(p.amount) FROM purchases p JOIN regions r ON p.region = r.code GROUP BY r.name", ("AVG(p.amount): ",)),
]  # fmt: skip
OTHERS = [  # (statement, the line's start, the premise it states)
    ("SELECT (SELECT AVG(income) FROM pums) AS b", "AVG(income): ", "every income lies in its declared range 0 to 500,000 (larger values count as 500,000, smaller ones as 0)"),
    ("SELECT MIN(purchased_at) AS first FROM purchases", "MIN(purchased_at) (column first): ", "every purchased_at lies in its declared range 2025-01-01 to 2025-12-31 (later values count as 2025-12-31, earlier ones as 2025-01-01)"),
    ("SELECT category, STDDEV(quantity) FROM purchases GROUP BY category", "STDDEV(quantity): ", "every quantity lies in its declared range 1 to 10 (larger values count as 10, smaller ones as 1)"),
]  # fmt: skip


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_dr") as e:
        yield e


def _states(premise: str, line: str) -> bool:
    """``line`` states ``premise``, or its form for a clamp narrower than the declared range:
    '(a value outside it counts as HI or LO, the clamp's ends)' with the HI its line says values
    above count as."""
    if premise in line:
        return True
    head = premise.split(" (", 1)[0] + " (a value outside it counts as "
    if head not in line:
        return False
    hi = line.split(head, 1)[1].split(" or ", 1)[0]
    return f"count as {hi})" in line or f"count as {hi};" in line or f"count as {hi}:" in line


@pytest.mark.parametrize(("sql", "heads"), CLAMPING, ids=[s for s, _ in CLAMPING])
def test_a_clamping_statistic_names_the_declared_range(
    engine: Engine, sql: str, heads: tuple[str, ...]
) -> None:
    notes = notices_of(engine, sql)
    for head in heads:
        mine = [n for n in notes if n.startswith(head)]
        assert mine, (head, notes)
        for line in mine:
            assert _states(AMOUNT, line), line
            if "values of amount above " in line:  # a narrower clamp in force (clamp: auto)
                clamp = line.split("values of amount above ", 1)[1].split(" ", 1)[0]
                # never "larger values count as 500" beside "above 354 count as 354"
                assert clamp == "500" or AMOUNT not in line, line


def test_a_count_names_no_range(engine: Engine) -> None:
    """COUNT clamps nothing: its line names no declared range."""
    notes = notices_of(engine, "SELECT COUNT(*), COUNT(amount) FROM purchases")
    assert notes and not any("declared range" in n for n in notes), notes


@pytest.mark.parametrize(("sql", "head", "premise"), OTHERS, ids=[s for s, _, _ in OTHERS])
def test_other_columns_and_shapes_name_their_range(
    engine: Engine, sql: str, head: str, premise: str
) -> None:
    notes = notices_of(engine, sql)
    mine = [n for n in notes if head in n]
    assert mine and all(_states(premise, n) for n in mine), (head, notes)

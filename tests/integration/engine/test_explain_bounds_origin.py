"""EXPLAIN says the contribution bounds the statement then runs with, and where each comes from
(newcomer26 #14).

Deterministic properties, on the demo data with the shipped policy (``auto`` bounds), for
statement shapes of every kind (ungrouped and grouped AVG, SUM, COUNT, a quantile, a join, CTEs,
a table with few groups, a filter that falls back to the table's own rows per unit), each read
from what the executed statement itself reports (its notice, the ledger's history):

* before it runs, every bound EXPLAIN gives a value (set by a rule, from declared keys) is one
  the executed statement's notice names; the bounds EXPLAIN says are "chosen from the data when
  the statement runs" are exactly the ``auto_bound`` releases the ledger then records, at the
  epsilon EXPLAIN states; the offline ``dpsql explain`` (no upstream) says the same;
* a bound set by dpsql's rule is named as a rule ("set without the data"), never as stored or
  declared (the README's own line said "1 row per user_id per group (stored or declared: free)"
  for a rule of dpsql's);
* after it ran, EXPLAIN's bounds are the notice's, each named as stored by an earlier statement
  (or set by its rule), and a statement asked again at another epsilon runs with them, charging
  no ``auto_bound`` release;
* where the table's own rows per unit are stored (a whole-table COUNT), EXPLAIN names what a
  choice that finds too few units keeps, and a statement that fell back keeps exactly that.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.explain.report import explain as offline_explain
from dpsql.session import SessionContext
from tests.helpers import ledgered_engine

SHAPES = (
    "SELECT AVG(amount) FROM purchases WHERE quantity > 1",
    "SELECT category, AVG(amount) FROM purchases GROUP BY 1",
    "SELECT SUM(amount) FROM purchases WHERE quantity > 2",
    "SELECT category, SUM(amount) FROM purchases WHERE quantity > 1 GROUP BY 1",
    "SELECT COUNT(*) FROM purchases WHERE region = 'N'",
    "SELECT region, COUNT(*) FROM purchases GROUP BY region",
    "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases WHERE quantity > 3",
    "SELECT r.name, COUNT(*) FROM purchases p JOIN regions r ON p.region = r.code GROUP BY 1",
    "WITH t AS (SELECT * FROM purchases WHERE quantity > 4) "
    "SELECT category, AVG(amount) FROM t GROUP BY 1",
    "WITH u AS (SELECT user_id, SUM(amount) AS s FROM purchases GROUP BY user_id) "
    "SELECT AVG(s) FROM u",
    "SELECT sex, AVG(income) FROM pums GROUP BY sex",
)


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy_auto: Any) -> Iterator[Engine]:
    with ledgered_engine(demo_policy_auto, demo_dsn, "dpsql_exo") as e:
        yield e


def run(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> Any:
    return engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", epsilon))


def auto_text(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> str:
    doc = run(engine, f"EXPLAIN (FORMAT JSON) {sql}", epsilon).rows[0][0][0]
    return str(doc["Plan"].get("Auto Contribution Bounds", ""))


def releases(engine: Engine) -> list[tuple[str, Fraction]]:
    assert isinstance(engine.ledger, Ledger)
    history = engine.ledger.history("analyst", limit=10_000)  # newest first
    return [(h.mechanism, Fraction(h.epsilon)) for h in reversed(history)]


def parts(text: str) -> list[str]:
    """``text`` split at "; " outside parentheses (EXPLAIN's parts: one per origin)."""
    out, depth, cur = [], 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and text.startswith("; ", i):
            out.append(cur)
            cur, i = "", i + 2
            continue
        cur += ch
        i += 1
    return [*out, cur] if cur else out


def explained(text: str) -> tuple[dict[str, str], list[str], str]:
    """(each bound EXPLAIN gives a value -> its origin's words, the labels it says are chosen
    when the statement runs, that part's words)."""
    known: dict[str, str] = {}
    missing: list[str] = []
    when = ""
    for p in parts(text):
        if ": chosen from the data when the statement runs" in p:
            labels, _, when = p.partition(": chosen from the data when the statement runs")
            missing = labels.split(", ")
            continue
        m = re.fullmatch(r"(.+?) \((.+)\)", p)
        if m is None:
            continue  # a fallback note (joins, a tiny epsilon), or the offline note
        for bound in bounds_of(m.group(1)):
            known[bound] = m.group(2)
    return known, missing, when


def bounds_of(text: str) -> list[str]:
    """The bounds of a describe() text, one phrase each ("8 rows per user_id per group")."""
    return [b for b in text.split(", ") if re.match(r"^(\d|at most|amount|income)", b)]


def notice_bounds(notices: list[str]) -> list[str]:
    n = next((n for n in notices if n.startswith("contribution bounds: ")), None)
    if n is None:
        return []
    return bounds_of(n.removeprefix("contribution bounds: ").split(" (")[0])


@pytest.mark.parametrize("sql", SHAPES)
def test_explain_names_the_bounds_the_statement_runs_with(engine: Engine, sql: str) -> None:
    before = auto_text(engine, sql)
    known, missing, when = explained(before)
    if not sql.startswith("WITH"):  # (offline, a CTE's parts are explained one by one)
        offline = offline_explain(engine.policy, sql, SessionContext("analyst", Fraction(1)))
        if "GROUP BY region" in sql or "JOIN regions" in sql:  # keys_from: read when it runs
            assert "are read from their table when the statement runs" in str(offline.auto)
        else:
            assert explained(offline.auto or "")[:2] == (known, missing), (offline.auto, before)
    for origin in known.values():  # the rules: never "stored" before anything is stored
        assert "stored" not in origin and "set without the data, free" in origin, before
    n = len(releases(engine))
    r = run(engine, sql)
    ran = notice_bounds(list(r.notices))
    new = releases(engine)[n:]
    chosen = [e for mech, e in new if mech == "auto_bound"]
    assert len(chosen) == len(missing), (before, new)  # one release per bound EXPLAIN named
    if chosen:
        total = sum(chosen, Fraction(0))
        assert f"with epsilon {float(total):.4g} of its 1 " in when, (before, new)
    assert set(known) <= set(ran), (before, r.notices)  # what EXPLAIN gave, the statement used
    if not missing and not known:
        assert not ran and not before  # nothing to bound (one row per user_id): no words
        return
    # after: EXPLAIN's bounds are the notice's, none left to choose
    after_known, after_missing, _ = explained(auto_text(engine, sql))
    assert after_missing == [] and set(after_known) == set(ran), (after_known, ran)
    for bound, origin in after_known.items():
        if bound not in known:  # measured by this run: stored now, free
            assert "reused free" in origin and "earlier statement" in origin, origin
    # asked at another epsilon (not a free repeat): it runs with the stored bounds EXPLAIN
    # names, and chooses what EXPLAIN says it chooses (a choice that found too few units is
    # stored for its own epsilon only)
    half = Fraction(1, 2)
    known, missing, _ = explained(auto_text(engine, sql, half))
    n = len(releases(engine))
    again = notice_bounds(list(run(engine, sql, half).notices))
    assert set(known) <= set(again) and len(again) == len(ran), (known, again)
    if not missing:
        assert set(again) == set(ran)
    assert len([m for m, _ in releases(engine)[n:] if m == "auto_bound"]) == len(missing)


def test_a_rule_is_not_called_stored_or_declared(engine: Engine) -> None:
    """The README's line: R = 1 per group for an AVG over 5 categories is dpsql's rule."""
    text = offline_explain(engine.policy, SHAPES[1], SessionContext("analyst", Fraction(1))).auto
    known, missing, _ = explained(text or "")
    assert "rule for per-group averages" in known["1 row per user_id per group"]
    assert "declared keys" in known["5 groups per user_id"]
    assert missing == ["upper clamp of amount"]
    assert "stored or declared" not in (text or "")


def test_a_fallback_keeps_what_explain_said(engine: Engine) -> None:
    """A whole-table COUNT stores pums' rows per pid; a filtered COUNT at a small epsilon then
    says that too few pid values keep that number, and, when its count does find too few,
    runs with it."""
    whole = list(run(engine, "SELECT COUNT(*) FROM pums").notices)  # R chosen (or fell back)
    chosen = not any("too few pid values to choose" in n for n in whole)
    sql = "SELECT COUNT(*) FROM pums WHERE married = 1 AND age < 97"
    eps = Fraction(1, 2)
    _, missing, when = explained(auto_text(engine, sql, eps))
    assert missing == ["rows per pid"]
    stored = re.search(r"the table's own ([\d,]+) rows? per pid", when)
    r = run(engine, sql, eps)
    if not chosen:
        assert stored is None and "it keeps its default" in when
        return
    assert stored is not None and notice_bounds(whole) == [f"{stored.group(1)} rows per pid"]
    if any("the table's own rows per pid over all its rows" in n for n in r.notices):
        assert notice_bounds(list(r.notices)) == [f"{stored.group(1)} rows per pid"], when

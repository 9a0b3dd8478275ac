"""Canonical forms for the repeat cache: trivial rewrites share a key, anything else does not."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
import sqlglot

from dpsql.errors import SqlSyntaxError
from dpsql.sql.canonical import cache_key, canonical

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "canonical.sql"


def _groups() -> list[list[str]]:
    groups: list[list[str]] = [[]]
    for line in FIXTURE.read_text().splitlines():
        if line.startswith("--"):
            continue
        if not line.strip():
            if groups[-1]:
                groups.append([])
            continue
        groups[-1].append(line)
    return [g for g in groups if g]


GROUPS = _groups()


@pytest.mark.parametrize("group", GROUPS, ids=[g[0][:60] for g in GROUPS])
def test_group_shares_one_form(group: list[str]) -> None:
    forms = {canonical(q).form for q in group}
    assert len(forms) == 1, [canonical(q).sql for q in group]


def test_groups_are_distinct() -> None:
    seen: dict[str, str] = {}
    for group in GROUPS:
        form = canonical(group[0]).form
        assert form not in seen, f"{group[0]!r} collides with {seen.get(form)!r}"
        seen[form] = group[0]
    assert len(seen) == len(GROUPS) >= 20


def test_the_tree_passed_in_is_not_mutated() -> None:
    tree = sqlglot.parse_one("SELECT count(*) AS n FROM people p WHERE (1 = 1) AND p.a > 3")
    before = tree.sql()
    canonical(tree)
    assert tree.sql() == before


def test_readable_sql_keeps_grouping() -> None:
    c = canonical("SELECT count(*) FROM t WHERE (a OR b) AND c")
    assert c.sql == "SELECT COUNT(*) AS _c1 FROM t WHERE c AND (a OR b)"
    assert sqlglot.parse_one(c.sql, read="postgres") is not None


def test_cache_key_covers_params_epsilon_delta_mechanism() -> None:
    q = "SELECT count(*) FROM people WHERE age > $1"
    base = cache_key(q, [30], Fraction(1, 2), Fraction(0), "laplace")
    same = cache_key("select COUNT(*) from people where $1 < age", [30], 0.5, 0, "laplace")
    assert base == same
    assert base != cache_key(q, [31], Fraction(1, 2), 0, "laplace")
    assert base != cache_key(q, ["30"], Fraction(1, 2), 0, "laplace")
    assert base != cache_key(q, [30.0], Fraction(1, 2), 0, "laplace")
    assert base != cache_key(q, [30], Fraction(1, 4), 0, "laplace")
    assert base != cache_key(q, [30], Fraction(1, 2), Fraction(1, 10**6), "laplace")
    assert base != cache_key(q, [30], Fraction(1, 2), 0, "gaussian")
    assert base != cache_key(q, [30], Fraction(1, 2), 0, "laplace", extra="policy-v2")
    assert base != cache_key(q, [], Fraction(1, 2), 0, "laplace")
    assert base == cache_key(canonical(q), [30], Fraction(1, 2), 0, "laplace")


def test_params_of_every_type_are_distinguished() -> None:
    values = [
        None,
        True,
        1,
        1.0,
        Decimal("1"),
        "1",
        b"1",
        dt.date(2026, 1, 1),
        dt.datetime(2026, 1, 1),
        dt.timedelta(days=1),
    ]
    keys = {cache_key("SELECT count(*) FROM t WHERE a = $1", [v], 1) for v in values}
    assert len(keys) == len(values)
    # ... and one parameter list can't be spliced into another
    assert cache_key("SELECT 1", ["a", "b"], 1) != cache_key("SELECT 1", ["a,b"], 1)


def test_digest_is_stable_across_spellings() -> None:
    digest = canonical("SELECT count(*) FROM people").digest
    assert digest == canonical("select count(*) from PEOPLE").digest


def test_syntax_error() -> None:
    with pytest.raises(SqlSyntaxError):
        canonical("SELECT FROM WHERE (")

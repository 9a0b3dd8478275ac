"""The removed-mass columns computed with the partials give what the ranked partials gave.

``bound_partials`` computes a bias target's removed steps once per (unit, group), with the
partials (``measure_dropped.removed_steps``: if the group is kept and if it is dropped, capped at
C + 1, as integers), instead of from the raw and bounded partials after the group ranking
(``steps_with_partials=False``, the earlier SQL, kept for this comparison). The claim: every
column of the private SQL -- the bounded measures, ``dropped``, ``over_cap``, ``outside`` --
is the same, on data where units pass the cap C (heavy units), lose groups to the ranking,
hold NULLs and values outside the declared bounds, for the same salt. Deterministic: no noise
is drawn (the SQL's own rows are compared). A kept group's steps are 0 without computing them
where the partial held at most R values (``bound_partials.kept_whole``): the comparison checks
that too (a condition one value too wide is caught).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Iterator

import psycopg
import pytest
import sqlglot

from dpsql.policy.load import parse_policy
from dpsql.policy.model import Policy
from dpsql.sql.analyze import analyze
from dpsql.sql.rewrite import private_query
from dpsql.sql.rewrite.bound_partials import bound_partials
from dpsql.sql.rewrite.measure_dropped import fixed_before, removed_steps

POLICY_TEXT = """
version: 1
tables:
  public.p:
    privacy_unit: uid
    max_rows_per_unit: 3
    max_groups_per_unit: 2
    columns:
      uid: {type: integer, identifier: true}
      x: {type: integer, bounds: [1, 10]}
      y: {type: numeric, bounds: [-2, 4]}
      z: {type: numeric, bounds: [-5, 0]}
      g: {type: integer, keys: [1, 2]}
      c: {type: text, keys: [a, b, c]}
      f: {type: text}
"""
POLICY = parse_policy(POLICY_TEXT)

# G = 1: a unit keeps its first group; ``before`` comes from the rank's own window
# (first_kept_window), the outside flags need no ``seen`` (no kept group before the first)
ONE_GROUP = parse_policy(POLICY_TEXT.replace("max_groups_per_unit: 2", "max_groups_per_unit: 1"))

QUERIES = [
    # ranked groups (3 declared keys > G = 2): counts, sums, AVG, COUNT(DISTINCT unit)
    "SELECT c, COUNT(*), SUM(x), AVG(y), COUNT(DISTINCT uid) FROM p GROUP BY c",
    # two keys, a non-positive SUM (bounding only raises it)
    "SELECT g, c, COUNT(x), SUM(z) FROM p GROUP BY g, c",
    # partition selection
    "SELECT f, COUNT(*), SUM(y) FROM p GROUP BY f",
    "SELECT f, AVG(x), SUM(z) FROM p WHERE x > 2 OR x IS NULL GROUP BY f",
    # no ranking: no GROUP BY, and declared keys <= G (the cap split over the groups)
    "SELECT COUNT(*), SUM(x), AVG(y), SUM(z), COUNT(DISTINCT uid) FROM p",
    "SELECT g, COUNT(*), SUM(y) FROM p GROUP BY g",
]
# COUNT(DISTINCT unit) alone: constant steps (0 kept, 1 dropped), ``before`` from the rank, no
# window; (f, c) and y have many groups, so heavy units drop more than C = 8 of them (x, a bounded
# integer, has its 10 whole numbers for keys since bi26: f is selected from the data)
FIXED = [
    "SELECT f, c, COUNT(DISTINCT uid) FROM p GROUP BY f, c",
    "SELECT y, COUNT(DISTINCT uid) FROM p WHERE f <> 'f1' GROUP BY y",
]


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("steps")
    rnd = random.Random(19)
    rows = []
    for uid in range(80):
        # most units light; every eighth heavy (80-120 rows): its removed mass passes C, in
        # some groups on its own
        n = rnd.randint(80, 120) if uid % 8 == 0 else rnd.randint(1, 12)
        for _ in range(n):
            rows.append(
                (
                    uid,
                    rnd.choice([None, *range(-3, 15)]),
                    rnd.choice([None, round(rnd.uniform(-4, 7), rnd.randint(0, 3))]),
                    rnd.choice([None, round(rnd.uniform(-8, 2), 2)]),
                    rnd.choice([None, 1, 2, 3]),
                    rnd.choice([None, "a", "b", "c", "d"]),
                    rnd.choice(["f0", "f1", "f2", "f3", "f4", "f5", "f6", None]),
                )
            )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE p (uid integer NOT NULL, x integer, y numeric, z numeric,"
            " g integer, c text, f text)"
        )
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO p VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)
    return dsn


@pytest.fixture
def earlier(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], str]]:
    """The private SQL with every target's removed steps computed after the ranking."""

    def make(sql: str, salt: str, policy: Policy = POLICY) -> str:
        with monkeypatch.context() as m:
            m.setattr(
                importlib.import_module("dpsql.sql.rewrite.bound_contributions"),
                "bound_partials",
                lambda *a, **k: bound_partials(*a, **k, steps_with_partials=False),
            )
            return _sql(sql, salt, policy)

    yield make


def _sql(sql: str, salt: str, policy: Policy = POLICY) -> str:
    a = analyze(sqlglot.parse_one(sql, read="postgres"), policy)
    return private_query(a, salt).sql("postgres")


@pytest.mark.parametrize("query", QUERIES + FIXED)
def test_same_columns_as_after_the_ranking(
    dsn: str, earlier: Callable[[str, str], str], query: str
) -> None:
    over_cap = 0
    with psycopg.connect(dsn) as conn:
        for salt in ("s1", "s2", "s3"):
            new, old = _sql(query, salt), earlier(query, salt)
            assert "_dp_ek" in new and "_dp_ek" not in old  # the two paths differ
            got = conn.execute(new)
            names = [d.name for d in got.description or ()]
            got_rows = sorted(got.fetchall(), key=repr)
            want_rows = sorted(conn.execute(old).fetchall(), key=repr)
            assert got_rows == want_rows
            ks = [i for i, n in enumerate(names) if n.startswith("_dp_k")]
            over_cap += sum(int(r[i]) for r in got_rows for i in ks)
    assert over_cap > 0  # the data exercises the cap: some unit passes C


def test_the_comparison_catches_a_wrong_cap(
    dsn: str, earlier: Callable[[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken twin: steps capped at C instead of C + 1 (a unit whose removed mass is just past
    C in one group would no longer pass it there) gives other ``over_cap`` columns."""
    real = removed_steps
    monkeypatch.setattr(
        importlib.import_module("dpsql.sql.rewrite.bound_partials"),
        "removed_steps",
        lambda t, raw, kept, cap, whole=None: real(t, raw, kept, cap - 1, whole),
    )
    differ = 0
    with psycopg.connect(dsn) as conn:
        for query in QUERIES:
            new, old = _sql(query, "s1"), earlier(query, "s1")
            got = sorted(conn.execute(new).fetchall(), key=repr)
            differ += got != sorted(conn.execute(old).fetchall(), key=repr)
    assert differ > 0


def test_the_comparison_catches_a_wrong_whole(
    dsn: str, earlier: Callable[[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken twin: a kept group's steps taken as 0 up to R + 1 values (``kept_whole`` one
    value too wide: a partial of R + 1 rows did lose one) gives other ``dropped`` columns."""
    mod = importlib.import_module("dpsql.sql.rewrite.bound_partials")
    real = mod.kept_whole

    def wide(*args, **kw):  # type: ignore[no-untyped-def]
        got = real(*args, **kw)
        if got is not None:
            got.set("expression", sqlglot.exp.Literal.number(int(got.expression.this) + 1))
        return got

    monkeypatch.setattr(mod, "kept_whole", wide)
    differ = 0
    with psycopg.connect(dsn) as conn:
        for query in QUERIES:
            new, old = _sql(query, "s1"), earlier(query, "s1")
            assert "THEN 0 ELSE" in new or "_dp_ek" not in new
            got = sorted(conn.execute(new).fetchall(), key=repr)
            differ += got != sorted(conn.execute(old).fetchall(), key=repr)
    assert differ > 0


@pytest.mark.parametrize("query", FIXED)
def test_constant_steps_need_no_window(query: str) -> None:
    """COUNT(DISTINCT unit)'s steps are constants (0 kept, 1 dropped): its ``before`` is written
    from the rank, so the statement ranks with one window (the comparison above shows the same
    columns as the running sum's)."""
    new = _sql(query, "s1")
    assert new.count(" OVER ") == 1 and "_dp_gr - 1" in new and "OFFSET 0" not in new


def test_the_comparison_catches_a_wrong_fixed_before(
    dsn: str, earlier: Callable[[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken twin: ``before`` counting the current group too (r instead of r - 1 earlier
    groups) gives other ``dropped`` / ``over_cap`` columns."""
    mod = importlib.import_module("dpsql.sql.rewrite.measure_dropped")

    def wrong(steps, keep):  # type: ignore[no-untyped-def]
        got = fixed_before(steps, keep)
        for sub in got.find_all(sqlglot.exp.Sub):
            if sub.this.name == "_dp_gr":
                sub.set("expression", sqlglot.exp.Literal.number(0))
        return got

    monkeypatch.setattr(mod, "fixed_before", wrong)
    differ = 0
    with psycopg.connect(dsn) as conn:
        for query in FIXED:
            new, old = _sql(query, "s1"), earlier(query, "s1")
            assert "_dp_gr - 0" in new
            got = sorted(conn.execute(new).fetchall(), key=repr)
            differ += got != sorted(conn.execute(old).fetchall(), key=repr)
    assert differ == len(FIXED)


ONE_GROUP_QUERIES = [
    "SELECT c, COUNT(*), SUM(x), AVG(y), COUNT(DISTINCT uid) FROM p GROUP BY c",
    "SELECT g, c, COUNT(x), SUM(z) FROM p GROUP BY g, c",
    "SELECT f, AVG(x), SUM(z) FROM p WHERE x > 2 OR x IS NULL GROUP BY f",
    "SELECT x, COUNT(*), SUM(y) FROM p GROUP BY x",
]


@pytest.mark.parametrize("query", ONE_GROUP_QUERIES)
def test_one_group_in_the_ranks_window(dsn: str, earlier: Callable[..., str], query: str) -> None:
    """With G = 1 every column equals the running sums' after the ranking (3 salts, some unit
    passing C), and the statement has no window but the rank's (its frame on every function)."""
    over_cap = 0
    with psycopg.connect(dsn) as conn:
        for salt in ("s1", "s2", "s3"):
            new, old = _sql(query, salt, ONE_GROUP), earlier(query, salt, ONE_GROUP)
            assert "FIRST_VALUE" in new and "ORDER BY _dp_gr" not in new
            got = conn.execute(new)
            names = [d.name for d in got.description or ()]
            got_rows = sorted(got.fetchall(), key=repr)
            assert got_rows == sorted(conn.execute(old).fetchall(), key=repr)
            ks = [i for i, n in enumerate(names) if n.startswith("_dp_k")]
            over_cap += sum(int(r[i]) for r in got_rows for i in ks)
    assert over_cap > 0


def test_the_comparison_catches_a_wrong_first_group(
    dsn: str, earlier: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken twin: the first group's lost steps taken as all of it (d_1 - 0 instead of
    d_1 - k_1: ``before`` too small after a kept group that lost rows) gives other columns."""
    mod = importlib.import_module("dpsql.sql.rewrite.bound_partials")
    real = mod.first_kept_window

    def wrong(steps, order, index):  # type: ignore[no-untyped-def]
        got = real(steps, order, index)
        for sub in got.find_all(sqlglot.exp.Sub):
            if sub.expression.name == steps[0]:
                sub.set("expression", sqlglot.exp.Literal.number(0))
        return got

    monkeypatch.setattr(mod, "first_kept_window", wrong)
    differ = 0
    with psycopg.connect(dsn) as conn:
        for query in ONE_GROUP_QUERIES:
            new, old = _sql(query, "s1", ONE_GROUP), earlier(query, "s1", ONE_GROUP)
            got = sorted(conn.execute(new).fetchall(), key=repr)
            differ += got != sorted(conn.execute(old).fetchall(), key=repr)
    assert differ > 0

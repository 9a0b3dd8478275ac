"""Every additive release of a statement moves between neighbours by at most its sensitivity.

A recording noise source (:class:`Recorder`: the exact values, each additive release's mechanism
and input kept) runs the same statements on D (60 units, 3 rows each) and on D' = D plus one
person with 60 rows in every group and key, at the ends of every declared range (x = 10, y = +-10):
the neighbour that moves a count, a sum, a removed-mass estimate or an over-cap count the most.
For each additive release of the statement, in order, the difference of its inputs on D and D'
must be at most the mechanism's sensitivity (L1 for Laplace, L2 for Gaussian): the sensitivity
the charge was computed from is one no person exceeds. ``auto`` contribution bounds either fall
back to the fixed defaults (the guard, where the fallback's column adds a left-out estimate) or
take the exact best bucket; the releases cover answers, removed-mass estimates, over-cap and
outside counts, the noisy counts of AVG / STDDEV, quantile row counts and the tree's leaves.

Each quantile choice (the value and, for a quantile of all rows, its interval ends: acc26's
ee01d54) is judged the same way: its utilities (d x u for a quantile a / d) may move by at most
d R in a group, in at most max_groups groups. D' answers each additive release with D's released
value (the coupling adaptive composition is argued under: the ends' offsets are functions of the
released left-out count, the same on both sides), and both run with one salt.

The same records judged against half of each sensitivity must flag some release and some
quantile choice (the neighbour reaches the bound: else this comparison could not fail).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.dp import rng
from dpsql.dp.bounds import Selection
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.quantiles import Quantile
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.helpers import ExactNoise
from tests.policies import PolicyMaker, private_table


class Recorder(ExactNoise):
    """The exact values, each additive release recorded; ``auto`` bounds at the guard's
    fallback (``fallback``) or the exact best bucket."""

    def __init__(self, fallback: bool) -> None:
        self.fallback = fallback
        self.seen: list[tuple[Laplace | Gaussian, np.ndarray]] = []
        self.picks: list[tuple[Quantile, np.ndarray]] = []  # each quantile choice's utilities
        # D's released values, answered again on D' (the coupling: what a statement does after a
        # release, e.g. a quantile's interval ends offset by its released left-out count, is
        # then the same function of the same released value on both sides)
        self.replay: list[np.ndarray] | None = None

    def add(self, mech: Laplace | Gaussian, values: np.ndarray) -> np.ndarray:
        self.seen.append((mech, np.asarray(values, dtype=np.float64).copy()))
        out = super().add(mech, values)
        i = len(self.seen) - 1
        if self.replay is not None and i < len(self.replay):
            if self.replay[i].shape == out.shape:
                return self.replay[i].copy()
        return out

    def bound(self, selection: Selection, counts: np.ndarray) -> int:
        return len(counts) if self.fallback else super().bound(selection, counts)

    def pick(self, mech: Quantile, utilities: np.ndarray) -> np.ndarray:
        self.picks.append((mech, np.asarray(utilities, dtype=np.float64).copy()))
        return super().pick(mech, utilities)


SETUP = """
CREATE TABLE t (u integer NOT NULL, region text, x numeric, y numeric, k integer, q integer,
  d date, ts timestamp);
INSERT INTO t SELECT u % 60, CASE WHEN u % 2 = 0 THEN 'N' ELSE 'S' END, u % 7, (u % 5) - 2, u % 5,
  1 + u % 4, DATE '2025-01-01' + u % 9, TIMESTAMP '2025-01-01 06:00' + (u % 40) * INTERVAL '1 day'
  FROM generate_series(1, 180) u;
"""
PERSON = (  # (q over all 10 whole numbers of its bounds, d over the 9 days, ts over 6 weeks)
    "INSERT INTO t SELECT 999, (ARRAY['N', 'S', 'E'])[1 + i % 3], 10, "
    "CASE WHEN i % 2 = 0 THEN 10 ELSE -10 END, i % 5, 1 + i % 10, DATE '2025-01-01' + i % 9, "
    "TIMESTAMP '2025-01-01 23:00' + (i % 42) * INTERVAL '1 day' FROM generate_series(1, 60) i"
)
STATEMENTS = [
    "SELECT COUNT(*) FROM t",
    "SELECT SUM(x) FROM t",
    "SELECT region, COUNT(*), SUM(y), AVG(x) FROM t GROUP BY region",
    "SELECT region, k, COUNT(*), SUM(x) FROM t GROUP BY region, k",
    "SELECT AVG(y), STDDEV(x) FROM t",
    "SELECT region, COUNT(DISTINCT u) FROM t GROUP BY region",
    "SELECT region, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t GROUP BY region",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY y) FROM t",
    "SELECT 'a', COUNT(*) FROM t UNION ALL SELECT region, SUM(x) FROM t GROUP BY region",
    "SELECT region, COUNT(*) FROM t GROUP BY ROLLUP (region)",
    # keys from the declared bounds (bi26 f79d4bc), MEDIAN by them (acc26 ee01d54)
    "SELECT q, COUNT(*), SUM(y), AVG(x) FROM t GROUP BY q",
    "SELECT date(d), COUNT(*), SUM(x) FROM t WHERE d < '2025-01-10' GROUP BY 1",
    "SELECT date_trunc('week', ts + interval '1 day') - interval '1 day' AS w, COUNT(*), SUM(y) "
    "FROM t WHERE ts < '2025-02-15' GROUP BY 1",
    "SELECT q, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t WHERE q <= 3 GROUP BY q",
    "SELECT region, k, MEDIAN(y) FROM t GROUP BY region, k",
    # integer quotients and remainders clamped into the integers PostgreSQL computes (intdiv27)
    "SELECT region, SUM(COALESCE(q, 0) / 3), SUM(q % 3), AVG((q - 6) / 4) FROM t GROUP BY region",
]
CASES = (
    [(sql, True, "laplace") for sql in STATEMENTS]
    + [
        (STATEMENTS[i], False, "laplace")
        for i in (0, 2, 4, 8, 10, 12, 13)  # a bucket chosen
    ]
    + [(STATEMENTS[i], True, "gaussian") for i in (2, 3, 10)]
)


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[dict[bool, list[tuple[Engine, Recorder]]]]:
    """Per bound rule (True: the fallback), the engines on D and D' with their recorders."""
    columns: dict[str, dict[str, Any]] = {
        "region": {"type": "text", "keys": ["N", "S", "E"]},
        "x": {"type": "numeric", "bounds": [0, 10]},
        "y": {"type": "numeric", "bounds": [-10, 10]},
        "k": {"type": "integer", "keys": [0, 1, 2, 3, 4]},
        "q": {"type": "integer", "bounds": [1, 10]},
        "d": {"type": "date", "bounds": ["2025-01-01", "2025-12-31"]},
        "ts": {"type": "timestamp", "bounds": ["2025-01-01 00:00:00", "2025-12-31 00:00:00"]},
    }
    pf = make_policy(
        "sensitivity", tables={"public.t": private_table("u", columns, rows=None, groups=None)}
    )
    made: dict[bool, list[tuple[Engine, Recorder]]] = {True: [], False: []}
    ledgers = []
    for person in (False, True):
        dsn = make_db("sensitivity")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SETUP)
            if person:
                conn.execute(PERSON)
            conn.execute("ANALYZE")
        for fallback in (True, False):
            led = Ledger.open(dsn, pf.policy, schema=f"dpsql_sens{uuid.uuid4().hex[:8]}")
            ledgers.append(led)
            rec = Recorder(fallback)
            made[fallback].append((Engine(pf.policy, dsn, led, noise=rec, pool_size=1), rec))
    yield made
    for pair in made.values():
        for engine, _ in pair:
            engine.close()
    for led in ledgers:
        led.close()


def releases(
    pair: list[tuple[Engine, Recorder]], sql: str, mechanism: str
) -> list[list[tuple[Laplace | Gaussian, np.ndarray]]]:
    """The additive releases ``sql`` made on D and on D' (each answered, never refused), with
    one salt: the rows and groups a unit keeps are a function of its own rows and the salt, which
    is drawn independently of the data (the coupling the sensitivity argument is made under;
    with a fresh salt on each side, a unit with rows in several groups could keep another row)."""
    out = []
    replay = None
    for engine, rec in pair:
        rec.seen.clear()
        rec.picks.clear()
        rec.replay = replay
        session = SessionContext("analyst", Fraction(1), mechanism=mechanism)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(rng, "token_hex", lambda nbytes=16: "5a" * nbytes)
            try:
                engine.execute(engine.prepare(sql, "analyst"), session)
            except DpsqlError as e:  # pragma: no cover - a refusal is a failure of this test
                pytest.fail(f"{sql}: {e.sqlstate} {e.message}")
        out.append(list(rec.seen))
        replay = [v for _, v in rec.seen]  # (exact: D's released values are its inputs)
    return out


def beyond(d: list[Any], d2: list[Any], factor: float = 1.0) -> list[str]:
    """The releases whose inputs on D and D' differ by more than ``factor`` x sensitivity."""
    assert [str(m) for m, _ in d] == [str(m) for m, _ in d2], "the plans differ"
    out = []
    for (mech, a), (_, b) in zip(d, d2, strict=True):
        diff = np.nan_to_num(a - b)
        norm = np.abs(diff).sum() if isinstance(mech, Laplace) else np.sqrt((diff**2).sum())
        if norm > factor * float(mech.sensitivity) + 1e-9:
            out.append(f"{mech}: moved {norm} ({a.tolist()[:6]} vs {b.tolist()[:6]})")
    return out


def picked_beyond(
    d: list[tuple[Quantile, np.ndarray]], d2: list[tuple[Quantile, np.ndarray]], factor: float = 1.0
) -> list[str]:
    """The quantile choices whose utilities on D and D' differ by more than ``factor`` x the
    mechanism's utility sensitivity (its contribution bound R) in a group, or in more groups
    than its max_groups (each group's choice is charged epsilon / max_groups)."""
    assert [str(m) for m, _ in d] == [str(m) for m, _ in d2], "the plans differ"
    out = []
    for (mech, a), (_, b) in zip(d, d2, strict=True):
        assert a.shape == b.shape, (mech, a.shape, b.shape)
        per_group = np.abs(a - b).max(axis=1)
        moved = int((per_group > 0).sum())
        scale = mech.target.denominator  # (the utilities are d x u for a quantile a / d)
        if (
            per_group.max() > factor * scale * mech.contribution_bound + 1e-9
            or moved > mech.max_groups
        ):
            out.append(f"{mech}: moved {per_group.tolist()} in {moved} groups")
    return out


@pytest.mark.parametrize(("sql", "fallback", "mechanism"), CASES)
def test_no_release_moves_more_than_its_sensitivity(
    neighbours: dict[bool, list[tuple[Engine, Recorder]]], sql: str, fallback: bool, mechanism: str
) -> None:
    d, d2 = releases(neighbours[fallback], sql, mechanism)
    assert d, "no additive release recorded"
    assert beyond(d, d2) == []
    p, p2 = (rec.picks for _, rec in neighbours[fallback])  # (a quantile's choices)
    assert picked_beyond(p, p2) == []


def test_the_neighbour_reaches_the_bounds(
    neighbours: dict[bool, list[tuple[Engine, Recorder]]],
) -> None:
    """Judged against half of each sensitivity, the extreme neighbour is flagged: the
    comparison above can fail."""
    fresh = [  # not run before (a repeat releases nothing)
        "SELECT COUNT(*) FROM t WHERE x >= 0",
        "SELECT SUM(x) FROM t WHERE x >= 0",
        "SELECT region, COUNT(*), SUM(y), AVG(x) FROM t WHERE x >= 0 GROUP BY region",
    ]
    flagged = []
    for sql in fresh:
        d, d2 = releases(neighbours[True], sql, "laplace")
        if beyond(d, d2, 0.5):
            flagged.append(sql)
    assert flagged == fresh
    sql = "SELECT region, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t WHERE x >= 0 GROUP BY region"
    releases(neighbours[True], sql, "laplace")
    p, p2 = (rec.picks for _, rec in neighbours[True])
    assert p and picked_beyond(p, p2) == [] and picked_beyond(p, p2, 0.5) != []

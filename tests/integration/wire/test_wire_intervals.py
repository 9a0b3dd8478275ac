"""In-band accuracy through the real wire server: ``SET dpsql.confidence`` and
``SET dpsql.show_intervals`` with psycopg.

The table has one row per unit, its primary key (so contribution bounding keeps every row, the
notice stands by every interval, and the noise-free truth is the plain aggregate, computed here
directly in PostgreSQL). Property checked: for each statistic,
the true value lies inside ``[<col>_low, <col>_high]`` in at least the number of cells a
Binomial(cells, confidence) reaches with probability 1 - 1e-6 (the intervals are conservative, so
the true rate is at least the confidence). A broken mechanism — intervals a third as wide as the
noise needs, as an interval bug would give — must fail the same check (for COUNT and SUM, whose
intervals are not conservative boxes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.dp import mechanisms
from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from dpsql.wire.server import ServerConfig
from tests.helpers import binom_min_successes
from tests.policies import one_table_policy

STATS = ("n", "s", "a", "vp", "sd", "ratio", "n2")
SQL = (
    "SELECT g, COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a, VAR_POP(v) AS vp, STDDEV_SAMP(v) AS sd, "
    "MEDIAN(v) AS m, SUM(v) / COUNT(*) AS ratio, COUNT(*) * 2 AS n2, "
    "CASE WHEN COUNT(*) > 0 THEN 1 END AS c FROM w GROUP BY g"
)
TRUTH = (
    "SELECT g, count(*), sum(v), avg(v), var_pop(v), stddev_samp(v), sum(v) / count(*), "
    "count(*) * 2 FROM w GROUP BY g ORDER BY g"
)
CONFIDENCE = 0.9
RUNS = 150


COLUMNS = {"g": {"type": "text", "keys": ["a", "b"]}, "v": {"type": "numeric", "bounds": [0, 10]}}
POLICY = one_table_policy("wi", "public.w", COLUMNS)  # auto -> R = G = 1, clamp: bounds


@pytest.fixture(scope="module")
def upstream(make_db: Callable[[str], str]) -> str:
    dsn = make_db("wire_iv")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # uid is the primary key: the catalog proves one row per unit, so no interval covers
        # the noise only (with a MEDIAN beside them the bounds' change is not estimated, and
        # the notice would disown SUM's, AVG's, VAR_POP's and STDDEV's: NULL columns)
        conn.execute("CREATE TABLE w (uid int PRIMARY KEY, g text NOT NULL, v numeric)")
        rows = [(u, "ab"[u % 2], (u * 37 % 101) / 10) for u in range(400)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO w VALUES (%s, %s, %s)", rows)
    return dsn


@pytest.fixture(scope="module")
def server(upstream: str) -> Iterator[ServerThread]:
    policy = POLICY
    engine = Engine(policy, upstream, pool_size=2)
    with ServerThread(engine, policy, ServerConfig(port=0, shutdown_grace_s=2)) as srv:
        yield srv
    engine.close()


def _truth(dsn: str) -> dict[str, tuple[float, ...]]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: tuple(float(x) for x in r[1:]) for r in conn.execute(TRUTH)}


def _coverage(
    srv: ServerThread, truth: dict[str, tuple[float, ...]], runs: int
) -> tuple[list[int], list[int]]:
    """Per statistic: the intervals that hold the truth, and the intervals given. An interval the
    notice disowns (the over-cap alarm fired: its notice says it does NOT cover the truth) has
    NULL columns and is not counted: the alarm reads a noise draw of its own, independent of
    the answer's, so leaving those rows out biases no coverage count."""
    hits = [0] * len(STATS)
    cells = [0] * len(STATS)
    notices: list[str] = []
    dsn = f"host=127.0.0.1 port={srv.port} user=analyst password=analyst dbname=wi"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute(f"SET dpsql.confidence = {CONFIDENCE}")
        conn.execute("SET dpsql.show_intervals = on")
        for _ in range(runs):
            cur = conn.execute(SQL)
            names = [d.name for d in cur.description]
            for row in cur.fetchall():
                rec: dict[str, Any] = dict(zip(names, row, strict=True))
                for i, name in enumerate(STATS):
                    lo, hi = rec[f"{name}_low"], rec[f"{name}_high"]
                    if lo is None and hi is None:
                        continue
                    # one end NULL: the alarm keeps a COUNT's or SUM's low end, which holds
                    lo, hi = (-math.inf if lo is None else lo), (math.inf if hi is None else hi)
                    cells[i] += 1
                    t = truth[rec["g"]][i]
                    hits[i] += lo - 1e-9 * abs(t) <= t <= hi + 1e-9 * abs(t)
                # a quantile's interval (test_error_bars); NULL with its value where a group's
                # noisy row count says no clear estimate (test_quantile_unclear)
                if rec["m"] is None:
                    assert rec["m_low"] is None and rec["m_high"] is None, rec
                else:
                    assert rec["m_low"] <= rec["m_high"]
                # a count and its interval ends are integers (bigint), not 1234.0
                ends = ("n", "n_low", "n_high")
                assert all(type(rec[k]) is int for k in ends if rec[k] is not None), rec
                assert "c_low" not in rec
    assert names[:10] == ["g", "n", "s", "a", "vp", "sd", "m", "ratio", "n2", "c"]
    # (where the median is NULL in every group its words begin by saying no row has the
    # interval they describe, words28)
    assert any(
        n.startswith("MEDIAN(v) (column m): ") and "the interval holds" in n for n in notices
    ), notices
    assert any(n.startswith("c:") for n in notices)
    assert not any(n.startswith(("n2:", "ratio:")) for n in notices)
    return hits, cells


def test_show_intervals_cover_the_truth_at_the_stated_rate(
    server: ServerThread, upstream: str
) -> None:
    """Each statistic's 2 * RUNS intervals (two groups, independent runs) each cover with
    probability >= CONFIDENCE, so its hits are at least Binomial(300, 0.9); each of the 7
    statistics is tested at 1e-6 / 7 (a union bound: a false failure below 1e-6 in all)."""
    hits, cells = _coverage(server, _truth(upstream), RUNS)
    # every cell counts but those a (false, <= 1e-3 a release) alarm disowned: more than a
    # tenth of them has probability < 1e-40
    assert all(c >= 0.9 * 2 * RUNS for c in cells), cells
    need = [binom_min_successes(c, CONFIDENCE, alpha=1e-6 / len(STATS)) for c in cells]
    assert all(h >= n for h, n in zip(hits, need, strict=True)), (hits, need)


def test_broken_intervals_are_flagged(
    server: ServerThread, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for cls in (mechanisms.Laplace, mechanisms.Gaussian):
        honest = cls.half_width

        def narrow(self: Any, confidence: float, _honest: Any = honest) -> float:
            return float(_honest(self, confidence)) / 3

        monkeypatch.setattr(cls, "half_width", narrow)
    # A third of the half-width covers a count or sum about 56% of the time (measured: 86-94 of
    # 160 in 3 runs; 1 - 0.1**(1/3) ~ 0.54 for a continuous Laplace). At 240 intervals each reaches
    # `need` (189) with probability < 1e-9 even at a coverage of 0.6 (60 runs: 1.4e-5).
    hits, cells = _coverage(server, _truth(upstream), 120)
    # every cell counts but those a (false, <= 1e-3 a release) alarm disowned: more than a
    # tenth of them has probability < 1e-40
    assert all(c >= 0.9 * 2 * 120 for c in cells), cells
    need = [binom_min_successes(c, CONFIDENCE, alpha=1e-6 / len(STATS)) for c in cells]
    assert hits[0] < need[0] and hits[1] < need[1], (hits, cells, need)


def test_without_show_intervals_no_extra_columns(server: ServerThread) -> None:
    dsn = f"host=127.0.0.1 port={server.port} user=analyst password=analyst dbname=wi"
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute("SELECT COUNT(*) AS n, MEDIAN(v) AS m FROM w")
        assert [d.name for d in cur.description] == ["n", "m"]
        n, m = cur.fetchone()  # type: ignore[misc]
        assert 0 <= m <= 10 and not math.isnan(float(n))

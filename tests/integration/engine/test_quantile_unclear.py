"""A quantile group with no clear estimate is released as NULL (newcomer25 #6, newcomer24 #2:
a median of 311,340 for a true 38,500 in a group of 551 rows, below the 689 its notice named).

The q quantile's answer is within its rank error t of the target; a group of fewer than
t / min(q, 1 - q) ranked rows (:func:`dpsql.execute.selected_measures.clear_rows`, the number
the notice states) gets the selection's noise. The release decides with a noisy count of each
group's ranked rows (a tenth of the quantile's budget, Laplace with L1 sensitivity G R), never
with the true count: value and ``_low``/``_high`` columns are NULL where that release is below
the threshold, as an AVG's are where its noisy count is below 1.

* Over the wire (psycopg): a group of 5 rows and an empty one come back NULL (value and interval
  columns), a group of 3,000 keeps its number and interval, and the notice says why and what to
  do. False failure: the 0.1 quantile's threshold is 314 rows (epsilon 1: rank error 31 rows),
  the count's noise Laplace of scale 10 (a tenth of the budget): a group of 5 reaching it, or
  one of 3,000 falling below it, has probability below 1e-13. (A median's threshold is only 9
  of the count's scales: an empty group passes it with probability 0.5 exp(-9), 6e-5.)
* Neighbours at zero noise (red-team style): D has a group one row short of the threshold,
  D' one unit more. With the count's release held at one value on both (a noise source that
  returns it whatever the rows), both answer NULL alike, or a number alike: nothing but that
  charged release tells them apart, and both are charged the same. Broken twin: the decision
  on the true count tells them apart (NULL on D, a number on D'): caught.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.quantiles import Quantile
from dpsql.engine import Engine
from dpsql.execute import noise as noise_module
from dpsql.execute import selected_measures
from dpsql.execute.noise import release
from dpsql.execute.selected_measures import clear_rows
from dpsql.server.run import ServerThread
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from dpsql.wire.server import ServerConfig
from tests.helpers import EXACT, ExactNoise
from tests.policies import one_table_policy

COLUMNS = {
    "g": {"type": "text", "keys": ["big", "none", "small"]},
    "v": {"type": "integer", "bounds": [0, 100]},
}


POLICY = one_table_policy("unclear", "public.t", COLUMNS)


def _table(dsn: str, small: int, big: int) -> None:
    """uid is the primary key (one row per unit, every row kept): ``small`` rows in group
    small, ``big`` in group big, none in group none; values inside the bounds."""
    rows = [(u, "small", u % 100) for u in range(small)]
    rows += [(10_000 + u, "big", (u * 37) % 101) for u in range(big)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid int PRIMARY KEY, g text NOT NULL, v int)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)


@pytest.fixture(scope="module")
def server(make_db: Callable[[str], str]) -> Iterator[ServerThread]:
    dsn = make_db("unclear_w")
    _table(dsn, 5, 3000)
    policy = POLICY
    engine = Engine(policy, dsn, pool_size=2)
    with ServerThread(engine, policy, ServerConfig(port=0, shutdown_grace_s=2)) as srv:
        yield srv
    engine.close()


def test_a_group_below_the_threshold_is_null_over_the_wire(server: ServerThread) -> None:
    sql = "SELECT g, PERCENTILE_CONT(0.1) WITHIN GROUP (ORDER BY v) AS p FROM t GROUP BY g"
    notices: list[str] = []
    dsn = f"host=127.0.0.1 port={server.port} user=analyst password=analyst dbname=unclear"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("SET dpsql.show_intervals = on")
        cur = conn.execute(sql + " ORDER BY g")
        names = [d.name for d in cur.description or ()]
        got = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
    assert list(got) == ["big", "none", "small"]
    for g in ("none", "small"):
        assert (got[g]["p"], got[g]["p_low"], got[g]["p_high"]) == (None, None, None), got[g]
    big = got["big"]
    assert big["p"] is not None and big["p_low"] is not None and big["p_high"] is not None
    assert big["p_low"] <= big["p"] <= big["p_high"], big
    (line,) = [n for n in notices if " is NULL in " in n]
    assert line.startswith("PERCENTILE_CONT(0.1) WITHIN GROUP (ORDER BY v) is NULL in 2 of 3 "
                           "groups, with its _low/_high interval columns"), line  # fmt: skip
    assert "came out below 314 there" in line and "Raise dpsql.epsilon" in line, line
    (words,) = [n for n in notices if n.startswith("PERCENTILE_CONT(0.1) WITHIN GROUP (ORDER BY v) (column p): ")]  # fmt: skip
    assert "A group of fewer than 314 rows gets no clear estimate" in words, words
    assert "its answer and its interval columns are NULL" in words, words


class FixedRows(ExactNoise):
    """Zero noise, but the quantile's row count released as ``value`` whatever the rows."""

    def __init__(self, rows: Laplace, value: float) -> None:
        self.rows, self.value = rows, value

    def add(self, mech: Laplace | Gaussian, values: np.ndarray) -> np.ndarray:
        if mech == self.rows:
            return np.full(np.shape(values), self.value, dtype=np.float64)
        return super().add(mech, values)


SQL = "SELECT g, MEDIAN(v) FROM t GROUP BY g"


@pytest.fixture(scope="module")
def neighbours(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine, int, Laplace]]:
    """D: group small one row short of the median's threshold; D': one unit more."""
    policy = POLICY
    dsns = make_db("unclear_d"), make_db("unclear_d2")
    _table(dsns[0], 0, 0)
    probe = Engine(policy, dsns[0], pool_size=1, noise=EXACT)
    mp = probe.plan(probe.prepare(SQL), SessionContext(analyst="analyst")).measures[0]
    probe.close()
    assert isinstance(mp.mechanism, Quantile) and mp.rows is not None
    need = clear_rows(mp.mechanism, 0.95)
    assert need is not None and 50 < need < 200  # (92 at epsilon 1)
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS t")
    _table(dsns[0], need - 1, 1000)
    _table(dsns[1], need, 1000)
    engines = [Engine(policy, dsn, pool_size=1, noise=EXACT) for dsn in dsns]
    yield engines[0], engines[1], need, mp.rows
    for e in engines:
        e.close()


def _answers(e: Engine) -> tuple[dict[str, Any], float]:
    """The engine's answer (zero noise) and what it charged."""
    r = e.execute(e.prepare(SQL), SessionContext(analyst="analyst"))
    return {row[0]: row[1] for row in r.rows}, r.epsilon_spent


def _released(e: Engine, source: Any) -> dict[str, Any]:
    """The same statement released again from one run of its bounded SQL (nothing stored)
    with randomness from ``source``."""
    prepared = e.prepare(SQL)
    plan = e.plan(prepared, SessionContext(analyst="analyst"))
    assert isinstance(plan, Plan)
    rows = e.backend.run(e.private_sql(prepared, plan.analysis), private=True).rows
    keys = [tuple(COLUMNS["g"]["keys"])]
    rel = release(plan, list(rows), ("text",), keys, 0.95, source)
    return {g[0]: v[0] for g, v in zip(rel.groups, rel.stats, strict=True)}


def test_neighbours_differ_only_through_the_charged_count(
    neighbours: tuple[Engine, Engine, int, Laplace],
) -> None:
    d, d2, need, rows = neighbours
    # zero noise: the count released is the true one, so the neighbours' answers differ, as
    # the charged release differs (a unit moves it by G R = 1)
    a, cost = _answers(d)
    a2, cost2 = _answers(d2)
    assert a["small"] is None and a2["small"] is not None and a["none"] is None
    assert a["big"] is not None and cost == cost2 == 1
    # the count's release held at one value: the neighbours answer alike (NULL below the
    # threshold, the median above it)
    for value, null in ((need - 1, True), (need, False)):
        got = [_released(e, FixedRows(rows, value)) for e in (d, d2)]
        assert all((x["small"] is None) == null for x in got), (value, got)
        assert all((x["none"] is None) == null for x in got), (value, got)


def test_a_decision_on_the_true_count_is_caught(
    neighbours: tuple[Engine, Engine, int, Laplace], monkeypatch: pytest.MonkeyPatch
) -> None:
    d, d2, need, rows = neighbours

    def true_count(mp: Any, hists: Any, noise: Any, confidence: float) -> np.ndarray:
        n = selected_measures.bucket_matrix(hists, mp.mechanism.buckets).sum(axis=1)
        return np.asarray(n < clear_rows(mp.mechanism, confidence), dtype=bool)

    monkeypatch.setattr(noise_module, "unclear_groups", true_count)
    got = [_released(e, FixedRows(rows, need)) for e in (d, d2)]
    assert (got[0]["small"] is None) != (got[1]["small"] is None), got  # told apart

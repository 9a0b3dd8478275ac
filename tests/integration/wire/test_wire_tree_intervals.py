"""A tree statement's ``<col>_low``/``<col>_high`` columns as clients see them
(dpsql/execute/tree_intervals.py): psycopg (simple and extended protocol: Describe agrees with
the rows) and psql (text output). What the columns hold is tested in
tests/integration/engine/test_tree_intervals.py (coverage on a biased case, its broken twin);
here: names, PostgreSQL types (count ends bigint, other ends float8), NULL with a notice where
no honest interval exists, and nothing extra without ``dpsql.show_intervals``. Every check here
is deterministic given the released values (lo <= hi is interval arithmetic's own property).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import psycopg
import pytest

from tests.helpers import analyst_dsn, served_engine
from tests.integration.engine.test_tree import TREE_POLICY, load_tree_db

REAGGREGATE = (
    "SELECT category, SUM(revenue) AS revenue, SUM(n) AS n FROM (SELECT category, region, "
    "SUM(amount) AS revenue, COUNT(*) AS n FROM orders GROUP BY 1, 2) AS v GROUP BY category "
    "ORDER BY category"
)
WINDOWS = (
    "SELECT category, COUNT(*) AS n, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share, "
    "RANK() OVER (ORDER BY COUNT(*) DESC) AS r FROM orders GROUP BY category ORDER BY category"
)
INT8, FLOAT8 = 20, 701


@pytest.fixture(scope="module")
def port(make_demo_db: Callable[[str], str]) -> Iterator[int]:
    dsn = make_demo_db("wire_tree_iv")
    load_tree_db(dsn)
    with served_engine(TREE_POLICY, dsn) as srv:
        yield srv.port


def test_psycopg_sees_the_interval_columns(port: int) -> None:
    notices: list[str] = []
    with psycopg.connect(analyst_dsn(port), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("SET dpsql.show_intervals = on")
        for prepare in (False, True):  # simple protocol; Parse/Describe/Bind/Execute
            cur = conn.execute(REAGGREGATE, prepare=prepare)
            assert cur.description is not None
            cols = [(d.name, d.type_code) for d in cur.description]
            assert cols == [
                ("category", 25), ("revenue", 1700), ("n", 1700),
                ("revenue_low", FLOAT8), ("revenue_high", FLOAT8),
                ("n_low", INT8), ("n_high", INT8),
            ], cols  # fmt: skip
            rows = cur.fetchall()
            assert len(rows) == 5
            for r in rows:  # (each column's ends on their own)
                if not _disowned(r[3:5], notices):
                    assert isinstance(r[3], float) and r[3] <= r[4], r
                if not _disowned(r[5:7], notices):
                    assert type(r[5]) is int and r[5] <= r[6], r
                assert isinstance(r[3] if r[3] is not None else 0.0, float), r
                assert r[5] is None or type(r[5]) is int, r
        cur = conn.execute(WINDOWS)
        assert cur.description is not None
        names = [d.name for d in cur.description]
        assert names[4:] == ["n_low", "n_high", "share_low", "share_high", "r_low", "r_high"]
        for r in cur.fetchall():
            if _disowned(r[4:6], notices) or _disowned(r[6:8], notices):
                continue
            assert r[4] <= r[5] and r[6] <= r[7] and r[8] is None and r[9] is None, r
    assert any(n.startswith("interval columns: revenue: computed from") for n in notices)
    assert any(n.startswith("interval columns: r_low, r_high are NULL: a window") for n in notices)


def _disowned(ends: tuple[object, ...], notices: list[str]) -> bool:
    """Both ends NULL because a leaf's accuracy notice disowned an interval it reads (a false
    over-cap alarm: at most 1e-3 a leaf release here), and the notices say so; or one end NULL
    because a leaf's notice keeps one end only (its other rests on an assumption the released
    values cannot check: the declared bounds' "could all come from" rule, which fires on most
    (category, region) SUM(amount) leaves here; 6bc6d2c keeps the end that holds), and the
    notices say that; else False."""
    if ends[0] is not None and ends[1] is not None:
        return False
    if ends[0] is None and ends[1] is None:
        assert any("part's accuracy notice (above) says does NOT hold" in n for n in notices)
    else:
        assert any("part's accuracy notice (above) keeps one end only" in n for n in notices)
    return True


def test_without_show_intervals_nothing_extra(port: int) -> None:
    with psycopg.connect(analyst_dsn(port), autocommit=True) as conn:
        cur = conn.execute(REAGGREGATE)
        assert cur.description is not None
        assert [d.name for d in cur.description] == ["category", "revenue", "n"]


@pytest.fixture
def psql() -> str:
    path = shutil.which("psql")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("psql is not installed")
        pytest.skip("psql is not installed")
    return path


def test_psql_sees_the_interval_columns(port: int, psql: str) -> None:
    res = subprocess.run(
        [psql, "-X", "-q", "--csv", "-v", "ON_ERROR_STOP=1", analyst_dsn(port),
         "-c", "SET dpsql.show_intervals = on", "-c", WINDOWS],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = list(csv.reader(io.StringIO(res.stdout)))
    header, rows = out[0], out[1:]
    assert header == [
        "category", "n", "share", "r", "n_low", "n_high", "share_low", "share_high",
        "r_low", "r_high",
    ], header  # fmt: skip
    assert len(rows) == 5
    for r in rows:
        if r[4] == r[5] == "" or r[6] == r[7] == "":  # (a leaf's interval disowned: said so)
            assert "part's accuracy notice (above) says does NOT hold" in res.stderr
            continue
        assert int(r[4]) <= int(r[5]), r  # bigint: printed as an integer
        assert float(r[6]) <= float(r[7]), r
        assert r[8] == r[9] == "", r  # NULL
    assert "interval columns: r_low, r_high are NULL" in res.stderr, res.stderr

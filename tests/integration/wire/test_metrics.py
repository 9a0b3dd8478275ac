"""Observability (issue #20): /metrics scraped after traffic, and the statement log's text."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from dpsql.wire.log import set_statement_text
from dpsql.wire.server import ServerConfig
from tests.helpers import analyst_dsn

PRIVATE = "SELECT count(*) FROM purchases WHERE quantity > 3"


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get(
    m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def served(demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]) -> Any:
    ledger = Ledger.open(make_db("metrics_ledger"), demo_policy)
    engine = Engine(demo_policy, demo_dsn, ledger, pool_size=2)
    config = ServerConfig(port=0, metrics_listen="127.0.0.1:0")
    srv = ServerThread(engine, demo_policy, config).start()
    try:
        yield srv
    finally:
        srv.stop()
        engine.close()
        ledger.close()


def test_metrics_after_traffic(served: Any) -> None:
    port = served.metrics_port
    before = _scrape(port)
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.5")
        for _ in range(3):
            conn.execute("SELECT code FROM regions WHERE code = 'N'").fetchall()
        conn.execute(PRIVATE).fetchall()
        conn.execute(PRIVATE).fetchall()  # a free repeat
        for bad, code in (("SELECT * FROM purchases", "42501"), ("SELEC 1", "42601")):
            with pytest.raises(psycopg.Error) as e:
                conn.execute(bad)
            assert e.value.sqlstate == code
        after = _scrape(port)
        assert _get(after, "dpsql_sessions") == 1
    d = {k: v - before.get(k, 0.0) for k, v in after.items()}
    assert _get(d, "dpsql_statements_total", kind="public", sqlstate="00000") == 3
    assert _get(d, "dpsql_statements_total", kind="private", sqlstate="00000") == 2
    assert _get(d, "dpsql_statements_total", kind="refused", sqlstate="42501") == 1
    assert _get(d, "dpsql_statements_total", kind="refused", sqlstate="42601") == 1
    assert _get(d, "dpsql_statement_seconds_count", kind="public") == 3
    assert _get(d, "dpsql_cached_answers_total", analyst="analyst") == 1
    charged = _get(d, "dpsql_epsilon_charged_total", analyst="analyst")
    assert charged == pytest.approx(0.5)
    deadline = time.monotonic() + 30  # the budgets are read from the ledger every few seconds
    while (
        left := _get(
            _scrape(port), "dpsql_budget_epsilon_remaining", analyst="analyst", budget="analyst"
        )  # fmt: skip
    ) > 100 - 0.5 + 1e-9:
        assert time.monotonic() < deadline, left
        time.sleep(0.2)
    assert left > 0
    assert _get(after, "dpsql_upstream_pool_connections", pool="engine", state="open") >= 1
    assert ("dpsql_upstream_connections_lost_total", (("pool", "ledger"),)) in after


def test_statement_log_holds_the_text(served: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dpsql.statement")
    q = "SELECT code FROM regions WHERE code = 'N'"
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as conn:
        set_statement_text("text")
        try:
            conn.execute(q).fetchall()
            with pytest.raises(psycopg.Error):
                conn.execute("SELECT email FROM purchases WHERE user_id = 7")
        finally:
            set_statement_text("redacted")  # the default
        conn.execute(q).fetchall()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "dpsql.statement"]
    texts = [(x["kind"], x["outcome"], x.get("statement")) for x in lines]
    assert ("public", "ok", q) in texts
    assert ("refused", "42501", "SELECT email FROM purchases WHERE user_id = 7") in texts
    assert ("public", "ok", "SELECT code FROM regions WHERE code = ?") in texts
    assert all(x["analyst"] == "analyst" and len(x["fingerprint"]) == 16 for x in lines)


def test_history_shows_the_analysts_own_statements(served: Any) -> None:
    """dpsql.history lists the text of each of the analyst's releases (and of free repeats)."""
    q = "SELECT count(*) FROM purchases WHERE quantity >= 2"
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.25")
        conn.execute(q).fetchall()
        conn.execute(q).fetchall()  # a free repeat, listed with the same text
        rows = conn.execute(
            "SELECT statement, cached, mechanism FROM dpsql.history ORDER BY id"
        ).fetchall()
    assert [r[:2] for r in rows if r[2] != "auto_bound"] == [(q, False), (q, True)]
    assert {r[0] for r in rows} == {q}

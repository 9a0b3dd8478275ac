"""Replays what real BI tools sent (``tests/fixtures/bi/corpus.jsonl``, a copy of
``../shared/bi-corpus/statements.jsonl``: Superset 6.1,
pgcli 4.7, dbt 1.9, pandas) through the wire, in order, on one connection, as the tools sent it
(Simple Query; Parse/Bind with the parameter values the tools bound, for the three statements
that have ``$n``).

Properties: every ``expect: answer`` statement is answered (no ErrorResponse); every
``expect: refuse`` statement is refused with a 42501 (raw rows) or 25006 (a write) class error
that carries a hint. Statements whose shapes belong to other work in progress are marked
``xfail(strict=True)`` with the reason, so they flip (and fail here) once that work lands.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from dpsql.budget.ledger import Ledger
from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine

# A copy of the shared corpus (../shared/bi-corpus/statements.jsonl), so a clean checkout has it.
PATH = Path(__file__).resolve().parents[2] / "fixtures" / "bi" / "corpus.jsonl"

# The values the tools bound ($1), from their source: psql-style \d name pattern (pgcli),
# relkind lists (pgcli's table and column metadata).
PARAMS: dict[int, list[bytes]] = {
    76: [b"^(purchases)$"],
    90: [b"{r,p,f}"],
    91: [b"{r,p,f}"],
}
# n -> reason, for a statement another piece of work will make answerable (none left: the
# planner's series-limit JOIN, #43, landed with issue #15).
XFAIL: dict[int, str] = {}


def _load() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PATH.read_text().splitlines() if line.strip()]


STATEMENTS = _load()


@pytest.fixture(scope="module")
def served(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> Iterator[ServerThread]:
    ledger = Ledger.open(make_db("corpus_ledger"), demo_policy)
    try:
        with served_engine(demo_policy, demo_dsn, ledger=ledger) as srv:
            yield srv
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def _run(conn: psycopg.Connection[Any], n: int, sql: str) -> pq.abc.PGresult:
    pgconn = conn.pgconn
    if n in PARAMS:
        return pgconn.exec_params(sql.encode(), PARAMS[n], None)
    res = pgconn.exec_(sql.encode())
    while pgconn.get_result() is not None:  # a simple query's later results, if any
        pass
    return res


def _marks(item: dict[str, Any]) -> list[Any]:
    reason = XFAIL.get(int(item["n"]))
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


@pytest.mark.parametrize(
    "item",
    [pytest.param(s, id=f"{s['n']:03d}-{s['expect']}", marks=_marks(s)) for s in STATEMENTS],
)
def test_statement(conn: psycopg.Connection[Any], item: dict[str, Any]) -> None:
    res = _run(conn, int(item["n"]), item["sql"])
    ok = res.status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
    sqlstate = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (res.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode()
    if item["expect"] == "answer":
        assert ok, f"{sqlstate}: {message}\n{item['sql']}"
        return
    assert not ok, f"answered, expected a refusal:\n{item['sql']}"
    assert sqlstate in ("42501", "25006"), f"{sqlstate}: {message}"
    assert res.error_field(pq.DiagnosticField.MESSAGE_HINT), message
    if conn.info.transaction_status == pq.TransactionStatus.INERROR:
        conn.pgconn.exec_(b"ROLLBACK")  # the tool would roll back; the replay goes on


def test_no_unexpected_interval_fallback_over_the_corpus(
    demo_dsn: str, demo_policy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Every answer statement the engine runs privately, flat or as a tree (CTEs, windows,
    re-aggregations, series limits), with ``show_intervals`` on: answered, and no interval
    column fell back on an
    unexpected error (typed: ``Result.interval_fallbacks``; logged at ERROR with the
    statement's fingerprint: none logged). An expected fallback (a shape with no honest
    interval) is fine: its notice says why."""
    from dpsql.engine import Engine
    from dpsql.errors import DpsqlError
    from dpsql.session import SessionContext

    on = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
    trees: list[int] = []
    engine = Engine(demo_policy, demo_dsn, pool_size=2)
    try:
        for item in STATEMENTS:
            if item["expect"] != "answer" or int(item["n"]) in PARAMS:
                continue
            try:
                prepared = engine.prepare(item["sql"])
            except DpsqlError:
                continue  # a catalog or session statement: the wire's, no interval columns
            if type(prepared).__name__ not in ("PrivateQuery", "TreeQuery"):
                continue
            with caplog.at_level(logging.ERROR, logger="dpsql.execute"):
                r = engine.execute(prepared, on)
            bad = [f for f in r.interval_fallbacks if not f.expected]
            assert not bad, (item["n"], item["sql"], bad)
            if getattr(prepared, "split", None) is not None:
                trees.append(int(item["n"]))
    finally:
        engine.close()
    assert len(trees) >= 3, trees  # the corpus's tree statements were run (3 of them)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors


def test_the_corpus_is_the_shared_one() -> None:
    assert len(STATEMENTS) >= 100
    assert {s["expect"] for s in STATEMENTS} == {"answer", "refuse"}

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

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_with_ledger

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
    with served_with_ledger(demo_policy, demo_dsn, make_db("corpus_ledger")) as srv:
        yield srv


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


# Statements that do not parse, as a newcomer types them: each is refused with PostgreSQL's
# words (42601 syntax error, 42883 for a function given the wrong number of arguments) and a hint.
BROKEN: list[tuple[str, str, str]] = [
    ("SELECT AVG(amount) FROM purchases WHERE", "42601", "syntax error at end of input"),
    ("SELECT AVG(amount) FROM purchases HAVING;", "42601", "syntax error at end of input"),
    ("SELECT category, COUNT(*) FROM purchases GROUP BY", "42601", "syntax error at end of input"),
    (
        "SELECT category, COUNT(*) FROM purchases GROUP BY ORDER BY 1",
        "42601",
        'syntax error at or near "ORDER BY"',
    ),
    (
        "SELECT COUNT(*) FROM purchases p JOIN regions r ON",
        "42601",
        "syntax error at end of input",
    ),
    (
        "SELECT VAR_SAMP(amount, 2) FROM purchases",
        "42883",
        "function var_samp with 2 arguments does not exist",
    ),
    ("SELECT SUM(amount, 1) FROM purchases", "42883", "function sum with 2 arguments"),
    ("SELECT COUNT(*) FROM purchases WHERE amount =", "42601", "syntax error at end of input"),
    ("SELECT COUNT(*) FROM purchases ORDER BY", "42601", "syntax error at end of input"),
    ("SELECT COUNT(*) FROM purchases LIMIT", "42601", "syntax error at end of input"),
    ("SELECT COUNT(*) FROM purchases p q r", "42601", 'syntax error at or near "q"'),
    ("SELECT FROM WHERE", "42601", 'syntax error at or near "WHERE"'),
    ("SELECT (COUNT(*) FROM purchases", "42601", 'syntax error at or near "FROM"'),
    ("SELECT CAST(amount AS) FROM purchases", "42601", 'syntax error at or near ")"'),
    ("SELECT COUNT(*) FROM purchases WHERE amount BETWEEN 1", "42601", "at end of input"),
    ("SELECT CASE WHEN amount > 1 THEN 1 FROM purchases", "42601", "syntax error at or near"),
    ("SELECT COUNT(*) FROM purchases UNION", "42601", "syntax error at end of input"),
    ("SELECT LEFT(category) FROM purchases", "42883", "function left with 1 argument"),
    ("SELECT 'abc FROM purchases", "42601", "unterminated quoted string"),
]
_INTERNAL = ("sqlglot", "<class", "<Token", "TokenType")


def _words(res: pq.abc.PGresult) -> list[str]:
    fields = (
        pq.DiagnosticField.MESSAGE_PRIMARY,
        pq.DiagnosticField.MESSAGE_DETAIL,
        pq.DiagnosticField.MESSAGE_HINT,
    )
    return [(res.error_field(f) or b"").decode() for f in fields]


@pytest.mark.parametrize(("sql", "sqlstate", "message"), BROKEN)
def test_broken_statement_in_postgresql_words(
    conn: psycopg.Connection[Any], sql: str, sqlstate: str, message: str
) -> None:
    res = _run(conn, 0, sql)
    assert res.status == pq.ExecStatus.FATAL_ERROR, sql
    got = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    primary, detail, hint = _words(res)
    assert (got, message) == (sqlstate, primary[: len(message)]) or (
        got == sqlstate and message in primary
    ), (got, primary)
    assert hint, primary
    assert not any(w in t for t in (primary, detail, hint) for w in _INTERNAL), (primary, detail)
    if res.error_field(pq.DiagnosticField.STATEMENT_POSITION) is None:
        assert "unterminated" in primary  # every other one points at where it went wrong


def test_no_internal_words_in_errors_over_the_corpus(demo_dsn: str, demo_policy: Any) -> None:
    """Every corpus statement cut short at each of 4 points (a broken statement, or a shorter
    one that parses): whatever is refused at preparation says it without sqlglot's words."""
    from dpsql.engine import Engine
    from dpsql.errors import DpsqlError

    engine = Engine(demo_policy, demo_dsn, pool_size=1)
    refused = 0
    try:
        for item in STATEMENTS:
            sql = item["sql"].strip().rstrip(";")
            for cut in (0.25, 0.5, 0.75, 0.9):
                text = sql[: max(1, int(len(sql) * cut))]
                try:
                    engine.prepare(text)
                except DpsqlError as e:
                    refused += 1
                    words = (e.message, e.detail or "", e.hint or "")
                    assert not any(w in t for t in words for w in _INTERNAL), (text, words)
    finally:
        engine.close()
    assert refused >= 200, refused  # most cut statements do not parse

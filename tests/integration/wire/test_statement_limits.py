"""Statement limits before work (issue #20, D1 and D2), through the wire with real clients.

Before: 5,000 nested parentheses were XX000 with a 10,412-line traceback in the log; a 2 MB
``SELECT 1+1+...`` was parsed in full (27 s, 1 GB kept) before any limit. Now the text is scanned
(length, tokens, nesting) before anything tokenizes or parses it: 54000 / 54001 at once, one log
line, the session and the others unharmed. Timings (refusal and probe latencies, RSS) are
measured by bench/statement_limits.py, not asserted here.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dpsql.sql.prescan import MAX_NESTING_DEPTH, MAX_STATEMENT_LENGTH, MAX_STATEMENT_TOKENS
from tests.conftest import IN_CI
from tests.helpers import analyst_dsn, db_name, served_engine, start_serve

DEEP = "SELECT " + "(" * 5000 + "1" + ")" * 5000
SUM_2MB = "SELECT " + "+".join(["1"] * 1_000_000)  # 2 MB, as in the issue


def _sqlstate(conn: psycopg.Connection[Any], sql: str, *, prepare: bool = False) -> str | None:
    try:
        conn.execute(sql, prepare=prepare)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def _log_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        r.getMessage() + ("\n" + r.exc_text if r.exc_text else "") for r in caplog.records
    )


@pytest.mark.parametrize("prepare", [False, True], ids=["simple", "extended"])
def test_deep_nesting_is_54001_with_few_log_lines(
    demo_dsn: str, demo_policy: Any, caplog: pytest.LogCaptureFixture, prepare: bool
) -> None:
    caplog.set_level(logging.INFO)
    shapes = [
        DEEP,  # counted by the scan
        "SELECT " + "NOT " * 5000 + "true",  # not counted: the parser's stack runs out
        "SELECT count(*) FROM purchases WHERE " + "NOT " * 3000 + "quantity > 1",
        "SELECT " + "CASE WHEN true THEN " * 2000 + "1" + " END" * 2000,
    ]
    with served_engine(demo_policy, demo_dsn) as srv:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            for sql in shapes:
                caplog.clear()
                assert _sqlstate(conn, sql, prepare=prepare) == "54001", sql[:40]
                text = _log_text(caplog)
                assert len(text.splitlines()) < 200
                assert "Traceback" not in text and "XX000" not in text
            # the session goes on
            assert conn.execute("SELECT code FROM regions WHERE code = 'N'").fetchone() == ("N",)
            depth_ok = "(" * MAX_NESTING_DEPTH + "code" + ")" * MAX_NESTING_DEPTH
            row = conn.execute(f"SELECT {depth_ok} FROM regions WHERE code = 'N'").fetchone()
            assert row == ("N",)


def test_deep_nesting_message_says_what_to_do(demo_dsn: str, demo_policy: Any) -> None:
    with served_engine(demo_policy, demo_dsn) as srv:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as e:
                conn.execute(DEEP)
            assert e.value.sqlstate == "54001"
            assert "statement too complex" in str(e.value)
            assert e.value.diag.message_hint and "split the statement" in e.value.diag.message_hint


@pytest.mark.parametrize("prepare", [False, True], ids=["simple", "extended"])
def test_oversized_statements_are_refused_unparsed(
    demo_dsn: str, demo_policy: Any, caplog: pytest.LogCaptureFixture, prepare: bool
) -> None:
    """A 2 MB statement is refused by its length (54000); one under the length limit with too
    many tokens by its token count (54001): neither is parsed (sqlglot would need seconds)."""
    caplog.set_level(logging.INFO)
    many_tokens = "SELECT " + "+".join(["1"] * (MAX_STATEMENT_TOKENS // 2 + 10))
    assert len(many_tokens) < MAX_STATEMENT_LENGTH < len(SUM_2MB)
    calls: list[str] = []
    import dpsql.sql.parse as parse_mod

    real = parse_mod.sqlglot.parse

    def counting_parse(text: str, *a: Any, **k: Any) -> Any:
        calls.append(text[:20])
        return real(text, *a, **k)

    with served_engine(demo_policy, demo_dsn) as srv:
        parse_mod.sqlglot.parse = counting_parse  # type: ignore[assignment]
        try:
            with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
                for sql, code, words in (
                    (SUM_2MB, "54000", "statement too long"),
                    (many_tokens, "54001", f"more than {MAX_STATEMENT_TOKENS} tokens"),
                ):
                    with pytest.raises(psycopg.Error) as e:
                        conn.execute(sql, prepare=prepare)
                    assert e.value.sqlstate == code and words in str(e.value)
                assert calls == []
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            parse_mod.sqlglot.parse = real  # type: ignore[assignment]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "dpsql.statement"]
    if prepare:
        assert [x["outcome"] for x in lines[:2]] == ["54000", "54001"]
    assert len(_log_text(caplog).splitlines()) < 50


def test_large_statement_within_limits_is_answered_while_others_run(
    demo_dsn: str, demo_policy: Any
) -> None:
    """A 400 KB public statement (within the limits) is answered while another session's
    probes keep being answered (counted: probes ran during the large statements)."""
    values = ",".join(f"'{i:030d}'" for i in range(12_000))  # ~400 KB, 24k tokens
    big = f"SELECT count(*) FROM regions WHERE code IN ('N', {values})"
    probes: list[int] = []
    done = threading.Event()
    with served_engine(demo_policy, demo_dsn) as srv:

        def probe() -> None:
            with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as c:
                while not done.is_set():
                    assert c.execute("SELECT code FROM regions WHERE code = 'N'").fetchone()
                    probes.append(1)

        t = threading.Thread(target=probe)
        t.start()
        try:
            with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
                for prepare in (False, True, False):
                    n0 = len(probes)
                    assert conn.execute(big, prepare=prepare).fetchone() == (1,)
                    assert len(probes) >= n0  # probes are not blocked out
        finally:
            done.set()
            t.join(30)
    assert len(probes) > 0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_comes_back_after_large_statements(demo_dsn: str) -> None:
    """A `dpsql serve` process answering 1 MB statements stays under 300 MB resident."""
    if not Path("/proc/self/status").exists():  # Linux (CI's machine) always has it
        if IN_CI:
            pytest.fail("needs /proc to read the server's resident memory")
        pytest.skip("needs /proc")
    from dpsql.demo import POLICY

    proc, port = start_serve(
        ["--policy", str(POLICY), "--upstream", demo_dsn],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        values = ",".join(f"'{i:036d}'" for i in range(24_000))  # ~960 KB, 48k tokens
        big = f"SELECT count(*) FROM regions WHERE code IN ('N', {values})"
        url = analyst_dsn(port).replace("dbname=demo", f"dbname={db_name(demo_dsn)}")
        with psycopg.connect(url, autocommit=True) as conn:
            base = _rss_mb(proc.pid)
            for prepare in (False, True, False, True):
                assert conn.execute(big, prepare=prepare).fetchone() == (1,)
                assert _sqlstate(conn, SUM_2MB, prepare=prepare) == "54000"
            conn.execute("SELECT 1")
            after = _rss_mb(proc.pid)
        assert after < 300, (base, after)
    finally:
        proc.terminate()
        proc.wait(30)


def test_public_cte_chain_is_capped_before_postgresql_plans_it(
    demo_dsn: str, demo_policy: Any
) -> None:
    """A chain of 5,000 inlined CTEs kept PostgreSQL's planner busy for 9.5 minutes (past its
    statement timeout): public statements get the SELECT cap too (54001, nothing sent upstream);
    one at the cap is answered."""
    from dpsql.sql.analyze_complexity import MAX_QUERY_BLOCKS

    def chain(n: int) -> str:
        parts = ["c0 AS (SELECT 1 AS x)"]
        parts += [f"c{i} AS (SELECT x + 1 AS x FROM c{i - 1})" for i in range(1, n)]
        return "WITH " + ", ".join(parts) + f" SELECT x FROM c{n - 1}"

    with served_engine(demo_policy, demo_dsn) as srv:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            for n, words in (
                (5000, "tokens"),
                (1000, "SELECTs"),
                (MAX_QUERY_BLOCKS + 1, "SELECTs"),
            ):
                with pytest.raises(psycopg.Error) as e:
                    conn.execute(chain(n))
                assert e.value.sqlstate == "54001" and words in str(e.value)
            n = MAX_QUERY_BLOCKS - 1  # and the outer SELECT: at the cap
            assert conn.execute(chain(n)).fetchone() == (n,)

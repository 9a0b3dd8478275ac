"""What Metabase, Grafana, Tableau and DBeaver send, read from their source
(``tests/fixtures/bi/drivers.jsonl``: each statement with the repository, path and commit it
comes from and what in that file writes it), over the demo tables, replayed through the wire on
one connection (Simple Query; Parse/Bind with the values the tool binds where it has ``$n``).

Properties: every ``expect: answer`` statement is answered (no ErrorResponse); every
``expect: refuse`` one (a private table's rows) is refused 42501 with a hint. A GROUP BY whose
keys the policy gives (the date buckets, day-of-week numbers, bins of a bounded column) releases
every key of the domain: no partition selection (``derived`` below: read from the plan).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from dpsql.engine import Engine
from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_with_ledger

PATH = Path(__file__).resolve().parents[2] / "fixtures" / "bi" / "drivers.jsonl"
STATEMENTS = [json.loads(x) for x in PATH.read_text().splitlines() if x.strip()]
# n -> why it is refused still (0A000 with words and a hint; nothing charged): each flips (and
# fails here) once the shape is answered.
XFAIL: dict[int, str] = {}


def _marks(item: dict[str, Any]) -> list[Any]:
    reason = XFAIL.get(int(item["n"]))
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


@pytest.fixture(scope="module")
def served(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> Iterator[ServerThread]:
    with served_with_ledger(demo_policy, demo_dsn, make_db("drivers_ledger")) as srv:
        yield srv


@pytest.fixture(scope="module")
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def _run(conn: psycopg.Connection[Any], item: dict[str, Any]) -> pq.abc.PGresult:
    pgconn = conn.pgconn
    params = item.get("params")
    if params is not None:
        return pgconn.exec_params(item["sql"].encode(), [p.encode() for p in params], None)
    res = pgconn.exec_(item["sql"].encode())
    while pgconn.get_result() is not None:
        pass
    return res


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(s, id=f"{s['n']:02d}-{s['tool']}-{s['expect']}", marks=_marks(s))
        for s in STATEMENTS
    ],
)
def test_statement(conn: psycopg.Connection[Any], item: dict[str, Any]) -> None:
    res = _run(conn, item)
    ok = res.status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
    sqlstate = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (res.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode()
    if item["expect"] == "answer":
        assert ok, f"{sqlstate}: {message}\n{item['sql']}"
        return
    assert not ok, f"answered, expected a refusal:\n{item['sql']}"
    assert sqlstate == "42501", f"{sqlstate}: {message}"
    assert res.error_field(pq.DiagnosticField.MESSAGE_HINT), message


def test_every_statement_names_its_source() -> None:
    tools = {s["tool"] for s in STATEMENTS}
    assert tools == {"metabase", "grafana", "tableau", "dbeaver"}
    for s in STATEMENTS:
        src = s["source"]
        assert len(src["commit"]) == 40 and src["url"].endswith(src["path"]), s["n"]
        assert src["url"].startswith(f"https://github.com/{src['repo']}/blob/{src['commit']}/")
        assert src["what"], s["n"]


# n -> why its groups still come from the data (partition selection) though the policy gives them
SELECTED: dict[int, str] = {}
POLICY_KEYED = [s for s in STATEMENTS if s.get("keys") == "policy" and s["n"] not in XFAIL]


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(
            s,
            id=f"{s['n']:02d}-{s['tool']}",
            marks=[pytest.mark.xfail(strict=True, reason=SELECTED[s["n"]])]
            if s["n"] in SELECTED
            else [],
        )
        for s in POLICY_KEYED
    ],
)
def test_groups_come_from_the_policy(engine: Engine, item: dict[str, Any]) -> None:
    """A GROUP BY of a date bucket, a day of week, a bin of a bounded column or a keyed column
    releases every key the policy allows (each with noise): no group is selected from the
    data, none silently missing."""
    sql = item["sql"]
    for i, p in enumerate(item.get("params") or [], start=1):
        sql = sql.replace(f"${i}", f"'{p}'")
    prepared = engine.prepare(sql)
    assert prepared.kind == "private"
    analysis = getattr(prepared, "analysis", None)
    assert analysis is not None and not analysis.needs_selection, sql

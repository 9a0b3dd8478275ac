"""EXPLAIN through the wire server: the DP plan of private queries, PostgreSQL's of public ones.

Real engine, real ledger, real PostgreSQL (demo data), real clients (psycopg, asyncpg, psql).
Properties: EXPLAIN of a private query reads no data and charges nothing; EXPLAIN ANALYZE of a
private or catalog query is refused (42501); refusals of the explained statement keep their
SQLSTATE and message; the extended protocol (Parse/Describe/Execute, parameters) works.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.execute.unique_units import CATALOG_STATE_PREFIX, UNIQUE_UNIT_SQL
from dpsql.server.run import ServerThread
from dpsql.sql.shadowing import SHADOW_SQL
from dpsql.wire.server import ServerConfig
from tests.conftest import IN_CI

USER = PASSWORD = "analyst"
PRIVATE = "SELECT count(*) AS n, avg(income) AS mean_income FROM pums"


CATALOG_PROBE = (UNIQUE_UNIT_SQL.as_string(None).split("{")[0], CATALOG_STATE_PREFIX)
UPSTREAM: list[str] = []  # every statement the served engine sent to the data database


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[tuple[ServerThread, Ledger]]:
    ledger = Ledger.open(demo_dsn, demo_policy, schema=f"dpsql_x{uuid.uuid4().hex[:8]}")
    engine = Engine(demo_policy, demo_dsn, ledger, pool_size=4)
    run = engine.backend.run

    def recording_run(query: str, *args: Any, **kw: Any) -> Any:
        UPSTREAM.append(query)
        return run(query, *args, **kw)

    engine.backend.run = recording_run  # type: ignore[method-assign]
    srv = ServerThread(engine, demo_policy, ServerConfig(port=0, shutdown_grace_s=2)).start()
    yield srv, ledger
    srv.stop()
    engine.close()
    ledger.close()


@pytest.fixture
def conn(served: tuple[ServerThread, Ledger]) -> Iterator[psycopg.Connection[Any]]:
    dsn = f"host=127.0.0.1 port={served[0].port} user={USER} password={PASSWORD} dbname=demo"
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


def _spent(ledger: Ledger) -> tuple[float, int]:
    s = ledger.remaining(USER)[0]
    return float(s.epsilon_spent), s.releases


def _plan(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> list[str]:
    cur = conn.execute(sql, params)
    assert cur.description is not None and cur.description[0].name == "QUERY PLAN"
    return [r[0] for r in cur.fetchall()]


def test_private_text_plan_charges_nothing(conn: Any, served: Any) -> None:
    before = _spent(served[1])
    lines = _plan(conn, "EXPLAIN " + PRIVATE)
    text = "\n".join(lines)
    assert lines[0].startswith("DP Aggregate")
    for want in ("Privacy cost: epsilon=1", "Contribution bound: pid", "Measure count",
                 "the sum part of avg(income) (income clamped to [0, 500000])", "Output n", "Output mean_income", "Free repeat: no",
                 "Charged to: analyst 'analyst'", "95% error"):  # fmt: skip
        assert want in text, (want, text)
    assert "Rewritten SQL" not in text
    assert _spent(served[1]) == before
    verbose = "\n".join(_plan(conn, "EXPLAIN VERBOSE " + PRIVATE))
    assert "Rewritten SQL:" in verbose and "FROM" in verbose


def test_private_explain_sends_nothing_upstream(conn: Any) -> None:
    UPSTREAM.clear()
    for sql in ("EXPLAIN " + PRIVATE, "EXPLAIN (FORMAT JSON) " + PRIVATE,
                "EXPLAIN VERBOSE SELECT sex, count(*) FROM pums GROUP BY sex",
                "EXPLAIN SELECT age, count(*) FROM pums GROUP BY age"):  # fmt: skip
        _plan(conn, sql)
    # no data is read; the catalog's proof of one row per unit is (dpsql.execute.unique_units:
    # EXPLAIN plans as the execution does), a read of pg_catalog only; VERBOSE's SQL is the
    # statement's own (dpsql.execute.statement_sql.statement_texts): the types of its keys come from
    # the zero-row probe the statement runs (LIMIT 0: no row), with the upstream's names
    read = [q for q in UPSTREAM if not q.startswith(CATALOG_PROBE) and q != SHADOW_SQL]
    assert [q for q in read if not q.endswith(" LIMIT 0")] == []
    _plan(conn, "EXPLAIN SELECT * FROM regions")
    # (and the upstream's own function names, read once a minute: dpsql.sql.shadowing)
    sent = [q for q in UPSTREAM if q != SHADOW_SQL and not q.startswith(CATALOG_PROBE)]
    assert [q for q in sent if not q.endswith(" LIMIT 0")] == ["EXPLAIN SELECT * FROM regions"]


def test_inner_error_position_counts_in_the_explain(conn: Any) -> None:
    with pytest.raises(pe.SyntaxError) as alone:
        conn.execute("SELECT count(*) FROM pums WHERE age >> > 3")
    with pytest.raises(pe.SyntaxError) as ei:
        conn.execute("EXPLAIN (COSTS off) SELECT count(*) FROM pums WHERE age >> > 3")
    p0, p1 = alone.value.diag.statement_position, ei.value.diag.statement_position
    assert p0 is not None and p1 is not None and int(p1) == int(p0) + len("EXPLAIN (COSTS off) ")


def test_private_json_plan(conn: Any) -> None:
    cur = conn.execute("EXPLAIN (FORMAT JSON) " + PRIVATE)
    assert cur.description[0].type_code == 114
    [(doc,)] = cur.fetchall()
    plan = doc[0]["Plan"]
    assert plan["Node Type"] == "DP Aggregate" and plan["Reads Data"] is False
    assert plan["Privacy Cost Epsilon"] == pytest.approx(1.0)
    assert plan["Output"] == ["n", "mean_income"]
    assert {o["Column"] for o in doc[0]["Outputs"]} == {"n", "mean_income"}
    assert doc[0]["Budget"]["Free Repeat"] is False
    assert doc[0]["Budget"]["Charged To"][0]["Name"] == "analyst"
    cur = conn.execute("EXPLAIN (FORMAT YAML) " + PRIVATE)
    assert cur.fetchone()[0].startswith("- Plan:")


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_json_plan_has_postgres_shape(conn: Any) -> None:
    """Every key PostgreSQL's own plan nodes use has the same JSON type in the DP plan (what
    pgAdmin and pev2 read: "Node Type", costs, rows, width, "Plans"); costs are 0 and rows come
    from the policy's declared keys, never from data."""
    [(pg,)] = conn.execute("EXPLAIN (FORMAT JSON) SELECT count(*) FROM regions").fetchall()
    types = {k: type(v) for node in _nodes(pg[0]["Plan"]) for k, v in node.items()}
    grouped = "SELECT sex, count(*) AS n FROM pums GROUP BY sex"
    [(doc,)] = conn.execute("EXPLAIN (FORMAT JSON) " + grouped).fetchall()
    root = doc[0]["Plan"]
    nodes = list(_nodes(root))
    assert [n["Node Type"] for n in nodes] == ["DP Aggregate", "DP Bounded Scan"] + [
        "DP Measure"
    ] * 3
    # the count, then the error bars' two releases (rows removed by bounding, units over the cap)
    assert [n["Measure"].split(" by bounds")[0] for n in nodes[3:]] == ["removed", "over cap"]
    for node in nodes:
        for key in ("Node Type", "Startup Cost", "Total Cost", "Plan Rows", "Plan Width"):
            assert key in node, (key, node)
        for key, value in node.items():
            if key in types:
                assert type(value) is types[key], (key, value, types[key])
            assert not isinstance(value, dict), (key, value)  # nodes are flat, as PostgreSQL's
        assert node["Startup Cost"] == node["Total Cost"] == 0
    assert root["Plan Rows"] == 2 and root["Plan Width"] == 16  # sex: keys [0, 1]
    scan = nodes[1]
    assert (scan["Relation Name"], scan["Schema"], scan["Parent Relationship"]) == (
        "pums", "public", "Outer")  # fmt: skip
    assert scan["Plan Rows"] == 0  # never reltuples
    [(doc,)] = conn.execute("EXPLAIN (FORMAT JSON) SELECT count(*) FROM pums GROUP BY income")
    assert doc[0]["Plan"]["Plan Rows"] == 0  # partition selection: unknown without data
    [(doc,)] = conn.execute("EXPLAIN (FORMAT JSON) SELECT count(*) FROM pums GROUP BY age")
    assert doc[0]["Plan"]["Plan Rows"] == 101  # age's bounds [0, 100]: its keys (bi26)
    [(doc,)] = conn.execute("EXPLAIN (FORMAT JSON, COSTS OFF) " + grouped).fetchall()
    for node in _nodes(doc[0]["Plan"]):  # as PostgreSQL with COSTS OFF
        assert not {"Startup Cost", "Total Cost", "Plan Rows", "Plan Width"} & set(node)


def test_xml_plan_has_postgres_shape(conn: Any) -> None:
    """FORMAT XML (what DBeaver sends) is PostgreSQL's document: <explain xmlns=...><Query>
    <Plan> with hyphenated elements and nested <Plans><Plan>; the column type is xml."""
    ns = {"e": "http://www.postgresql.org/2009/explain"}
    cur = conn.execute("EXPLAIN (FORMAT XML) " + PRIVATE)
    assert cur.description[0].type_code == 142
    [(text,)] = cur.fetchall()
    [(pg,)] = conn.execute("EXPLAIN (FORMAT XML) SELECT count(*) FROM regions").fetchall()
    for doc in (text, pg):
        root = ElementTree.fromstring(doc)
        assert root.tag == f"{{{ns['e']}}}explain"
        plan = root.find("e:Query/e:Plan", ns)
        assert plan is not None and plan.find("e:Node-Type", ns) is not None
        assert float(plan.findtext("e:Total-Cost", namespaces=ns) or "x") >= 0
        assert plan.findall("e:Plans/e:Plan", ns)
    root = ElementTree.fromstring(text)
    plan = root.find("e:Query/e:Plan", ns)
    assert plan is not None and plan.findtext("e:Node-Type", namespaces=ns) == "DP Aggregate"
    assert plan.findtext("e:Reads-Data", namespaces=ns) == "false"
    assert [i.text for i in plan.findall("e:Output/e:Item", ns)] == ["n", "mean_income"]
    kids = plan.findall("e:Plans/e:Plan", ns)
    children = [p.findtext("e:Node-Type", namespaces=ns) for p in kids]
    measured = [p.findtext("e:Measure", namespaces=ns) or "" for p in kids[1:]]
    answers = [m for m in measured if " by bounds " not in m]
    assert children == ["DP Bounded Scan"] + ["DP Measure"] * len(measured)
    assert len(answers) == 3  # count(*); avg: count, sum (then the error bars' releases)
    assert root.findtext("e:Query/e:Budget/e:Free-Repeat", namespaces=ns) in ("true", "false")
    # DBeaver's own option string (PostgreExecutionPlan.getPlanQueryString), costs unchecked
    [(text,)] = conn.execute("EXPLAIN (FORMAT XML,COSTS FALSE,VERBOSE) " + PRIVATE).fetchall()
    plan = ElementTree.fromstring(text).find("e:Query/e:Plan", ns)
    assert plan is not None and plan.find("e:Total-Cost", ns) is None
    with pytest.raises(pe.InsufficientPrivilege):  # DBeaver's "analyze" box
        conn.execute("EXPLAIN (FORMAT XML,ANALYZE) " + PRIVATE)


def test_free_repeat_and_session_epsilon(conn: Any) -> None:
    q = "SELECT count(*) FROM pums WHERE age > 77"
    assert "  Free repeat: no (a new release)" in _plan(conn, "EXPLAIN " + q)
    conn.execute(q).fetchall()
    assert any(line.startswith("  Free repeat: yes") for line in _plan(conn, "EXPLAIN " + q))
    conn.execute("SET dpsql.epsilon = 0.25")
    assert "epsilon=0.25" in _plan(conn, "EXPLAIN " + q)[0]
    with pytest.raises(pe.InvalidParameterValue):  # above max_epsilon: refused at the SET
        conn.execute("SET dpsql.epsilon = 50")
    assert "epsilon=0.25" in _plan(conn, "EXPLAIN " + q)[0]  # the previous value stays


PGADMIN = ("EXPLAIN (FORMAT JSON, ANALYZE false, VERBOSE false, COSTS true, BUFFERS false, "
           "TIMING false, SUMMARY false, SETTINGS false, WAL false) ")  # fmt: skip


def test_tool_option_lists(conn: Any) -> None:
    [(doc,)] = conn.execute(PGADMIN + PRIVATE).fetchall()
    assert doc[0]["Plan"]["Node Type"] == "DP Aggregate"
    [(doc,)] = conn.execute(PGADMIN + "SELECT * FROM regions").fetchall()
    assert doc[0]["Plan"]["Node Type"] == "Seq Scan"


def test_gaussian_plan_states_rho(conn: Any) -> None:
    conn.execute("SET dpsql.mechanism = gaussian")
    conn.execute("SET dpsql.delta = 1e-6")
    [(doc,)] = conn.execute("EXPLAIN (FORMAT JSON) " + PRIVATE).fetchall()
    plan = doc[0]["Plan"]
    assert plan["Mechanism"] == "gaussian" and plan["Privacy Cost Rho"] > 0
    measures = [p for p in plan["Plans"] if p["Node Type"] == "DP Measure"]
    answers = [m for m in measures if " by bounds " not in m["Measure"]]
    assert answers and all(m["Sensitivity"].startswith("L2=") for m in answers)
    # the error bars' removed-mass releases stay discrete Laplace (pure epsilon, L1)
    assert all(m["Sensitivity"].startswith("L1=") for m in measures if m not in answers)


def test_gaussian_alone_takes_the_policy_delta(conn: Any) -> None:
    """``SET dpsql.mechanism = gaussian`` alone answers at the policy's ``defaults.delta``
    (1e-06 in the demo), its default delta for Gaussian answers (docs/policy.md); it was refused
    with 22023 "Gaussian noise needs delta > 0"."""
    conn.execute("SET dpsql.mechanism = gaussian")
    assert conn.execute("SHOW dpsql.delta").fetchone() == ("1e-06",)
    [(doc,)] = conn.execute("EXPLAIN (FORMAT JSON) " + PRIVATE).fetchall()
    plan = doc[0]["Plan"]
    assert plan["Mechanism"] == "gaussian" and plan["Delta"] == pytest.approx(1e-6), plan
    assert conn.execute(PRIVATE + " WHERE age > 30").fetchall()  # answered, not refused


def test_grouping_sets_split(conn: Any) -> None:
    text = "\n".join(_plan(conn, "EXPLAIN SELECT sex, married, count(*) FROM pums "
                                 "GROUP BY ROLLUP (sex, married)"))  # fmt: skip
    assert text.count("  Grouping set ") == 3 and "1/3 of 1" in text


def test_explain_analyze_private_refused(conn: Any, served: Any) -> None:
    before = _spent(served[1])
    for sql in ("EXPLAIN ANALYZE " + PRIVATE, "EXPLAIN (ANALYZE, FORMAT JSON) " + PRIVATE,
                "explain (analyse true) SELECT count(*) FROM purchases"):  # fmt: skip
        with pytest.raises(pe.InsufficientPrivilege) as ei:
            conn.execute(sql)
        assert ei.value.diag.message_hint and "without ANALYZE" in ei.value.diag.message_hint
    assert _spent(served[1]) == before
    # ANALYZE false is a plain EXPLAIN
    assert _plan(conn, "EXPLAIN (ANALYZE false) " + PRIVATE)[0].startswith("DP Aggregate")


def test_public_explain_is_postgres_plan(conn: Any) -> None:
    lines = _plan(conn, "EXPLAIN SELECT code, name FROM regions WHERE code = 'N'")
    assert any("Seq Scan on regions" in line or "Scan" in line for line in lines)
    lines = _plan(conn, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
                        "SELECT count(*) FROM regions")  # fmt: skip
    assert any("actual rows" in line for line in lines)
    [(doc,)] = conn.execute("EXPLAIN (FORMAT JSON) SELECT * FROM regions").fetchall()
    assert doc[0]["Plan"]["Relation Name"] == "regions"


def test_catalog_explain_costs_off_and_no_analyze(conn: Any) -> None:
    lines = _plan(conn, "EXPLAIN SELECT relname FROM pg_class WHERE relname = 'regions'")
    assert lines and not any("rows=" in line for line in lines)
    with pytest.raises(pe.InsufficientPrivilege):
        conn.execute("EXPLAIN ANALYZE SELECT relname FROM pg_class")


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("EXPLAIN SELECT * FROM pums", pe.InsufficientPrivilege),
        ("EXPLAIN SELECT income FROM pums WHERE pid = 7", pe.InsufficientPrivilege),
        ("EXPLAIN SELECT count(*) FROM salaries_missing", pe.UndefinedTable),
        ("EXPLAIN DELETE FROM regions", pe.ReadOnlySqlTransaction),
        ("EXPLAIN ANALYZE INSERT INTO regions VALUES ('x', 'y')", pe.ReadOnlySqlTransaction),
        ("EXPLAIN SELECT pg_sleep(1)", None),
        ("EXPLAIN EXPLAIN SELECT 1", pe.SyntaxError),
        ("EXPLAIN SET x = 1", pe.SyntaxError),
        ("EXPLAIN (nonsense) SELECT 1", pe.SyntaxError),
        ("EXPLAIN (FORMAT csv) SELECT 1", pe.InvalidParameterValue),
        ("EXPLAIN", pe.SyntaxError),
    ],
)
def test_refusals_keep_their_sqlstate(conn: Any, sql: str, error: Any) -> None:
    inner = sql.split(" ", 1)[1] if sql.count(" ") else ""
    with pytest.raises(psycopg.Error) as ei:
        conn.execute(sql)
    if error is not None:
        assert isinstance(ei.value, error), ei.value
    if inner.startswith(("SELECT", "DELETE")):  # the same refusal as the statement alone
        with pytest.raises(psycopg.Error) as alone:
            conn.execute(inner)
        assert alone.value.sqlstate == ei.value.sqlstate
        assert alone.value.diag.message_primary == ei.value.diag.message_primary


def test_extended_protocol_with_parameters(conn: Any, served: Any) -> None:
    before = _spent(served[1])
    lines = _plan(conn, "EXPLAIN SELECT count(*) FROM pums WHERE age > %s", (40,))
    assert lines[0].startswith("DP Aggregate")
    lines = _plan(conn, "EXPLAIN SELECT name FROM regions WHERE code = %s", ("N",))
    assert any("regions" in line for line in lines)
    with conn.cursor() as cur:  # server-side prepared (Parse once, Bind/Execute twice)
        for age in (30, 60):
            cur.execute("EXPLAIN (FORMAT JSON) SELECT count(*) FROM pums WHERE age > %s",
                        (age,), prepare=True)  # fmt: skip
            assert cur.fetchone()[0][0]["Plan"]["Node Type"] == "DP Aggregate"
    with conn.cursor(binary=True) as cur:
        cur.execute("EXPLAIN SELECT count(*) FROM pums WHERE sex = %s", (1,))
        assert cur.fetchone()[0].startswith("DP Aggregate")
    assert _spent(served[1]) == before


def test_unbound_parameters_refused_with_a_hint(conn: Any) -> None:
    """EXPLAIN (GENERIC_PLAN) of "$1" without values: 42P02 as PostgreSQL, and what to do (bind
    or inline)."""
    for sql in ("EXPLAIN (GENERIC_PLAN) SELECT name FROM regions WHERE code = $1",
                "EXPLAIN SELECT count(*) FROM pums WHERE age > $1"):  # fmt: skip
        with pytest.raises(pe.UndefinedParameter) as ei:
            conn.execute(sql)
        assert ei.value.diag.message_primary == "there is no parameter $1"
        assert ei.value.diag.message_hint and "bind" in ei.value.diag.message_hint


def test_asyncpg(served: Any) -> None:
    if importlib.util.find_spec("asyncpg") is None:
        if IN_CI:
            pytest.fail("asyncpg is not installed")
        pytest.skip("asyncpg is not installed")
    import asyncpg  # type: ignore[import-untyped]

    async def go() -> None:
        c = await asyncpg.connect(host="127.0.0.1", port=served[0].port, user=USER,
                                  password=PASSWORD, database="demo", ssl=False)  # fmt: skip
        try:
            st = await c.prepare("EXPLAIN SELECT count(*) FROM pums WHERE age > $1")
            assert [a.name for a in st.get_attributes()] == ["QUERY PLAN"]
            rows = await st.fetch(50)
            assert rows[0][0].startswith("DP Aggregate")
            doc = await c.fetchval("EXPLAIN (FORMAT JSON) SELECT count(*) FROM pums")
            assert json.loads(doc)[0]["Plan"]["Node Type"] == "DP Aggregate"
            xml = await c.fetchval("EXPLAIN (FORMAT XML) SELECT count(*) FROM pums")  # binary
            assert xml.startswith("<explain") and "DP Aggregate" in xml
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await c.fetch("EXPLAIN ANALYZE SELECT count(*) FROM pums")
        finally:
            await c.close()

    asyncio.run(go())


def test_psql(served: Any) -> None:
    if shutil.which("psql") is None:
        if IN_CI:
            pytest.fail("psql is not installed")
        pytest.skip("psql is not installed")
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    sql = "EXPLAIN SELECT count(*) FROM pums;\nEXPLAIN ANALYZE SELECT count(*) FROM pums;\n"
    res = subprocess.run(
        [
            "psql",
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            str(served[0].port),
            "-U",
            USER,
            "-d",
            "demo",
            "-c",
            sql,
        ],  # fmt: skip
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "QUERY PLAN" in res.stdout and "DP Aggregate" in res.stdout, res
    res = subprocess.run(
        [
            "psql",
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            str(served[0].port),
            "-U",
            USER,
            "-d",
            "demo",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "EXPLAIN ANALYZE SELECT count(*) FROM pums",
        ],  # fmt: skip
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "42501" in res.stderr, res

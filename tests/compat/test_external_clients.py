"""psql, PgJDBC (Debian's libpostgresql-jdbc-java on the installed JDK) and node-postgres against
``dpsql serve``."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.compat.conftest import (
    AGGREGATE,
    DP_NODE,
    EXPLAIN_ANALYZE,
    EXPLAIN_PRIVATE,
    EXPLAIN_PRIVATE_JSON,
    EXPLAIN_PRIVATE_PARAM,
    EXPLAIN_PUBLIC,
    EXPLAIN_PUBLIC_JSON,
    EXPLAIN_PUBLIC_PARAM,
    HIDDEN,
    PUMS_COLUMNS,
    RAW,
    REFUSED_SQLSTATE,
    VISIBLE_TABLES,
    Server,
    require,
)
from tests.compat.test_python_clients import (
    dp_json_plan,
    dp_text_plan,
    pg_json_plan,
    pg_text_plan,
    plausible_count,
)

HERE = Path(__file__).resolve().parent
JDBC_JAR = "/usr/share/java/postgresql.jar"


def psql(server: Server, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGPASSWORD": server.password, "PGSSLMODE": "disable"}
    cmd = ["psql", "-X", "-h", server.host, "-p", str(server.port), "-U", server.user]
    return subprocess.run(
        [*cmd, "-d", server.dbname, *args],
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_psql(dpsql_server: Server) -> None:
    require("psql")
    out = psql(dpsql_server, "-A", "-t", "-c", AGGREGATE)
    assert out.returncode == 0, out.stderr
    plausible_count(out.stdout.strip(), dpsql_server)
    refused = psql(dpsql_server, "-v", "VERBOSITY=verbose", "-c", RAW)
    assert refused.returncode != 0
    assert f"ERROR:  {REFUSED_SQLSTATE}" in refused.stderr, refused.stderr
    for meta in (
        r"\dt",
        r"\dt+",
        r"\d",
        r"\d pums",
        r"\d+ pums",
        r"\di",
        r"\dn",
        r"\l",
        r"\du",
        r"\conninfo",
    ):
        res = psql(dpsql_server, "-c", meta)
        assert res.returncode == 0, (meta, res.stderr)
        text = res.stdout.lower()
        for word in HIDDEN:
            assert word not in text, (meta, text)
    tables = psql(dpsql_server, "-c", r"\dt").stdout
    assert "pums" in tables and "regions" in tables
    sized = psql(dpsql_server, "-c", r"\dt+").stdout
    assert "pums" in sized and "kB" not in sized and "bytes" not in sized  # sizes are blank
    described = psql(dpsql_server, "-c", r"\d pums").stdout
    assert "income" in described and "secret_ssn" not in described


def test_psql_explain(dpsql_server: Server) -> None:
    require("psql")

    def plan(*args: str, input: str | None = None) -> list[str]:
        res = psql(dpsql_server, "-A", "-t", *args, input=input)
        assert res.returncode == 0, res.stderr
        return res.stdout.splitlines()

    dp_text_plan(plan("-c", EXPLAIN_PRIVATE))
    pg_text_plan(plan("-c", EXPLAIN_PUBLIC))
    dp_json_plan("\n".join(plan("-c", EXPLAIN_PRIVATE_JSON)))
    pg_json_plan("\n".join(plan("-c", EXPLAIN_PUBLIC_JSON)))
    version = subprocess.run(["psql", "--version"], capture_output=True, text=True).stdout
    if int(re.findall(r"\d+", version)[0]) >= 16:  # \bind: the extended protocol with $1
        lines = plan("-f", "-", input=f"{EXPLAIN_PRIVATE_PARAM} \\bind 18 \\g\n")
        dp_text_plan(lines)
    refused = psql(dpsql_server, "-v", "VERBOSITY=verbose", "-c", EXPLAIN_ANALYZE)
    assert refused.returncode != 0
    assert f"ERROR:  {REFUSED_SQLSTATE}" in refused.stderr, refused.stderr
    assert "HINT:" in refused.stderr


DATE_FILTERS = (
    "SELECT count(*) FROM purchases WHERE purchased_at >= ?",
    "SELECT DATE '2025-06-01' = ? AS same",
)


def date_filters_answered(steps: list[dict[str, Any]]) -> None:
    """A date filter's parameter as JDBC and node-postgres send it (text with a time and zone,
    type unspecified) is the day PostgreSQL's date input makes of it (newcomer21: 22P02 before,
    so no JDBC or node dashboard could filter by a date parameter)."""
    assert len(steps) >= len(DATE_FILTERS), steps
    for step in steps:
        assert step["ok"], step
        if "purchases" not in step["step"]:  # the public one: the same day
            assert step["rows"] in ([[True]], [{"same": True}]), step


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_jdbc(dpsql_server: Server) -> None:
    """PgJDBC's metadata, statements, date parameters, and what Metabase, Tableau and DBeaver
    send (:func:`driver_steps`), in one JVM."""
    require("java")
    require(JDBC_JAR)
    s = dpsql_server
    drivers = driver_steps()
    res = subprocess.run(
        ["java", "-cp", JDBC_JAR, str(HERE / "clients" / "Client.java"), s.host, str(s.port),
         s.dbname, s.user, s.password, "meta", f"sql:{AGGREGATE}", f"stmt:{AGGREGATE}", f"sql:{RAW}",
         f"sql:{RAW} LIMIT 0", *(f"{kind}:{v}|{sql}" for sql in DATE_FILTERS
                                 for kind, v in (("date", "2025-06-01"), ("ts", "2025-06-01 00:00:00"))),
         *(step for _, step in drivers)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    meta, prepared, plain, raw, zero, *dated = _json_lines(res.stdout)
    drivers_answered(drivers, dated[len(dated) - len(drivers) :])
    dated = dated[: len(dated) - len(drivers)]
    date_filters_answered(dated)  # setDate sends '2025-06-01 +00', setTimestamp '... 00:00:00+00'
    assert meta["ok"], meta
    assert meta["catalogs"] == [[s.dbname]]  # the database the client named (issue 17)
    assert {"int4", "text", "numeric", "timestamptz"} <= {t[0] for t in meta["type_info"]}
    assert ["pg_catalog", "concat_ws"] in meta["functions"]
    assert meta["function_columns"], meta  # its arguments' types (regtype names)
    assert zero["ok"] and zero["rows"] == [], zero  # column discovery: LIMIT 0 (issue 17)
    assert zero["columns"] == PUMS_COLUMNS, zero
    assert {t[1] for t in meta["tables"]} == VISIBLE_TABLES
    assert {c[1] for c in meta["columns"] if c[0] == "pums"} == set(PUMS_COLUMNS)
    for idx in meta["indexes"]:
        for row in idx:
            assert row[2] in (None, 0, -1, -1.0, 0.0), row  # CARDINALITY is no statistic
    for r in (prepared, plain):
        assert r["ok"], r
        plausible_count(r["rows"][0][0], dpsql_server)
    assert not raw["ok"] and raw["sqlstate"] == REFUSED_SQLSTATE


# PostgreSQL's own month labels of the demo's dates in New York (checked on the upstream by
# tests/integration/wire/test_session_zone_wire.py): DST from March 9 to November 2, 2025 (November 1 is still -04)
NY_MONTHS = [f"2025-{m:02d}-01 00:00:00{'-04' if 4 <= m <= 11 else '-05'}" for m in range(1, 13)]


def test_jdbc_time_zone(dpsql_server: Server) -> None:
    """PgJDBC sends the JVM's zone as the TimeZone startup parameter: a JVM in New York gets
    PostgreSQL's New York month buckets (finding 32: January was 2024-12-31 19:00-05)."""
    require("java")
    require(JDBC_JAR)
    s = dpsql_server
    months = ("SELECT date_trunc('month', purchased_at)::text AS m, COUNT(*) AS n FROM purchases "
              "GROUP BY 1 ORDER BY 1")  # fmt: skip
    res = subprocess.run(
        ["java", "-Duser.timezone=America/New_York", "-cp", JDBC_JAR,
         str(HERE / "clients" / "Client.java"), s.host, str(s.port), s.dbname, s.user, s.password,
         "stmt:SHOW TimeZone", f"sql:{months}"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    zone, grouped = _json_lines(res.stdout)
    assert zone["ok"] and zone["rows"] == [["America/New_York"]], zone
    assert grouped["ok"], grouped
    assert [r[0] for r in grouped["rows"]] == NY_MONTHS


def _lines(step: dict[str, Any]) -> list[str]:
    assert step["ok"], step
    assert step["columns"] == ["QUERY PLAN"], step
    return [r[0] if isinstance(r, list) else r["QUERY PLAN"] for r in step["rows"]]


DRIVERS = HERE.parent / "fixtures" / "bi" / "drivers.jsonl"
# tests/integration/engine/test_bi_drivers.py's still-refused statements (0A000, with why there):
# none since the weeks (1, 25) are answered (dpsql.sql.time_shift)
DRIVERS_REFUSED: set[int] = set()


def _jdbc_step(item: dict[str, Any]) -> str | None:
    """A Client.java step for a corpus statement as a JDBC tool sends it: a PreparedStatement,
    its one parameter bound as the tool binds it (DBeaver's namespace oid with a number), None for
    two parameters (the client binds one)."""
    params = item.get("params") or []
    if not params:
        return f"sql:{item['sql']}"
    if len(params) > 1:
        return None
    kind = "int" if params[0].isdigit() else "str"
    return f"{kind}:{params[0]}:{item['sql'].replace('$1', '?')}"


def driver_steps() -> list[tuple[dict[str, Any], str]]:
    """What Metabase, Tableau and DBeaver (all on PgJDBC) send, from their source
    (tests/fixtures/bi/drivers.jsonl), as Client.java steps (run by :func:`test_jdbc`)."""
    items = [json.loads(x) for x in DRIVERS.read_text().splitlines() if x.strip()]
    return [
        (it, step)
        for it in items
        if it["tool"] in ("metabase", "tableau", "dbeaver") and it["n"] not in DRIVERS_REFUSED
        for step in [_jdbc_step(it)]
        if step is not None
    ]


def drivers_answered(chosen: list[tuple[dict[str, Any], str]], got: list[dict[str, Any]]) -> None:
    """Answered where a user needs an answer (private aggregates with noise, catalog and session
    statements), a raw-row read refused 42501."""
    assert len(chosen) >= 25 and len(got) == len(chosen), (len(chosen), len(got))
    for (item, _), step in zip(chosen, got, strict=True):
        if item["expect"] == "answer":
            assert step["ok"], (item["n"], item["sql"], step)
        else:
            assert not step["ok"] and step["sqlstate"] == REFUSED_SQLSTATE, (item["n"], step)


def test_jdbc_explain(dpsql_server: Server) -> None:
    """Statement, PreparedStatement (with a ? parameter) and DBeaver's FORMAT XML path."""
    require("java")
    require(JDBC_JAR)
    s = dpsql_server
    xml_private = "EXPLAIN (FORMAT XML) " + AGGREGATE
    xml_public = "EXPLAIN (FORMAT XML) SELECT count(*) FROM regions"
    steps = [f"stmt:{EXPLAIN_PRIVATE}", f"sql:{EXPLAIN_PUBLIC}", f"sql:{EXPLAIN_PRIVATE_JSON}",
             f"stmt:{EXPLAIN_PUBLIC_JSON}", f"int:18:{EXPLAIN_PRIVATE_PARAM.replace('$1', '?')}",
             f"str:N:{EXPLAIN_PUBLIC_PARAM.replace('$1', '?')}", f"xml:{xml_private}",
             f"xml:{xml_public}", f"sql:{EXPLAIN_ANALYZE}"]  # fmt: skip
    res = subprocess.run(
        ["java", "-cp", JDBC_JAR, str(HERE / "clients" / "Client.java"), s.host, str(s.port),
         s.dbname, s.user, s.password, *steps],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    priv, pub, priv_json, pub_json, priv_param, pub_param, xml_dp, xml_pg, analyze = _json_lines(
        res.stdout
    )
    dp_text_plan(_lines(priv))
    pg_text_plan(_lines(pub))
    dp_json_plan(_lines(priv_json)[0])
    pg_json_plan(_lines(pub_json)[0])
    dp_text_plan(_lines(priv_param))
    pg_text_plan(_lines(pub_param))
    for xml in (xml_dp, xml_pg):
        assert xml["ok"] and xml["type"] == "xml" and xml["root"] == "explain", xml
        assert len(xml["nodes"]) >= 2 and all(float(n[1]) >= 0 for n in xml["nodes"]), xml
    assert xml_dp["nodes"][0] == [DP_NODE, "0.0", "1", 0], xml_dp
    assert {n[0] for n in xml_dp["nodes"][1:]} == {"DP Bounded Scan", "DP Measure"}
    assert xml_pg["nodes"][0][0] == "Aggregate"
    assert not analyze["ok"] and analyze["sqlstate"] == REFUSED_SQLSTATE


def test_node_pg_explain(dpsql_server: Server) -> None:
    require("node")
    require(str(HERE / "node" / "node_modules" / "pg"))
    steps = [f"sql:{EXPLAIN_PRIVATE}", f"simple:{EXPLAIN_PUBLIC}", f"sql:{EXPLAIN_PRIVATE_JSON}",
             f"simple:{EXPLAIN_PUBLIC_JSON}", f"param:18:{EXPLAIN_PRIVATE_PARAM}",
             f"param:N:{EXPLAIN_PUBLIC_PARAM}", f"simple:{EXPLAIN_ANALYZE}"]  # fmt: skip
    res = subprocess.run(
        ["node", str(HERE / "node" / "client.js"), dpsql_server.url + "?sslmode=disable", *steps],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    priv, pub, priv_json, pub_json, priv_param, pub_param, analyze = _json_lines(res.stdout)
    dp_text_plan(_lines(priv))
    pg_text_plan(_lines(pub))
    dp_json_plan(_lines(priv_json)[0])  # node-pg parses json columns
    pg_json_plan(_lines(pub_json)[0])
    dp_text_plan(_lines(priv_param))
    pg_text_plan(_lines(pub_param))
    assert not analyze["ok"] and analyze["sqlstate"] == REFUSED_SQLSTATE


def test_node_pg(dpsql_server: Server) -> None:
    require("node")
    require(str(HERE / "node" / "node_modules" / "pg"))
    res = subprocess.run(
        ["node", str(HERE / "node" / "client.js"), dpsql_server.url + "?sslmode=disable", "meta",
         f"sql:{AGGREGATE}", f"simple:{AGGREGATE}", f"sql:{RAW}",
         *(f"date:2025-06-01T00:00:00Z|{sql.replace('?', '$1')}" for sql in DATE_FILTERS)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    meta, prepared, simple, raw, *dated = _json_lines(res.stdout)
    date_filters_answered(dated)  # a JS Date is sent as '2025-06-01T00:00:00.000+00:00'
    assert meta["ok"], meta
    assert {t["table_name"] for t in meta["tables"]} == VISIBLE_TABLES
    plausible_count(prepared["rows"][0][0], dpsql_server)
    plausible_count(simple["rows"][0]["count"], dpsql_server)
    assert not raw["ok"] and raw["sqlstate"] == REFUSED_SQLSTATE


def test_node_pg_array_parameter(dpsql_server: Server) -> None:
    require("node")
    require(str(HERE / "node" / "node_modules" / "pg"))
    res = subprocess.run(
        ["node", str(HERE / "node" / "client.js"), dpsql_server.url + "?sslmode=disable", "types"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (types,) = _json_lines(res.stdout)
    assert types["ok"], types
    assert {t["typname"] for t in types["types"]} == {"int4", "text", "numeric"}


def test_node_pg_array_in_a_private_filter(dpsql_server: Server) -> None:
    """node-postgres sends a JS array as the text ``{books,travel}`` of unspecified type: ``=
    ANY($1)`` over a keyed column is that IN list (newcomer22 #13: was 0A000 'ANY is not
    supported in WHERE'), its groups narrowed to the two keys."""
    require("node")
    require(str(HERE / "node" / "node_modules" / "pg"))
    sql = (
        "SELECT category, count(*) FROM purchases WHERE category = ANY($1) GROUP BY category "
        "ORDER BY category"
    )
    res = subprocess.run(
        ["node", str(HERE / "node" / "client.js"), dpsql_server.url + "?sslmode=disable",
         f'array:["books", "travel"]|{sql}'],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (got,) = _json_lines(res.stdout)
    assert got["ok"], got
    assert [r[0] for r in got["rows"]] == ["books", "travel"], got

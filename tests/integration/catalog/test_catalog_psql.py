"""Every psql describe command (``\\d`` ... ``\\z`` from ``psql --help=commands``) through
``dpsql serve`` as an analyst, next to the same command run directly on PostgreSQL.

The database holds the demo data and, around it, things the analyst may not see: a schema
``zqhr`` with a function, operator, collation, text search configuration, domain and cast; an
index, operator and event trigger defined with hidden functions; another role with a user
mapping (password option), per-database settings and a large object; a foreign server with a
host option. Checked: no command fails through dpsql that works directly (empty or filtered
listings instead), each lists the same columns, and no output names a hidden thing.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from dpsql.policy.model import Policy
from tests.compat.conftest import HIDDEN_EXTRA, require
from tests.helpers import served_engine

TAG = uuid.uuid4().hex[:6]
OTHER = f"zq_other_{TAG}"  # another role: it owns things and has a user mapping

SETUP = """
CREATE SCHEMA zqhr;
CREATE FUNCTION zqhr.zqf(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1';
CREATE FUNCTION zqhr.zqf2(int, int) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT $1 = $2';
CREATE INDEX zq_regions_bad ON regions (zqhr.zqf(length(code)));
CREATE OPERATOR zqhr.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq);
CREATE OPERATOR public.#@# (LEFTARG = int, RIGHTARG = int, FUNCTION = zqhr.zqf2);
COMMENT ON OPERATOR zqhr.===(int, int) IS 'zq comment';
CREATE TEXT SEARCH CONFIGURATION zqhr.zqtsc (COPY = english);
CREATE COLLATION zqhr.zqcoll FROM "C";
CREATE DOMAIN zqhr.zqdom AS text;
CREATE CAST (zqhr.zqdom AS int) WITH INOUT;
CREATE FUNCTION public.pubf(x zqhr.zqdom) RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION zqhr.zqevt() RETURNS event_trigger LANGUAGE plpgsql AS 'BEGIN END';
CREATE EVENT TRIGGER zqevt_hidden ON ddl_command_start EXECUTE FUNCTION zqhr.zqevt();
CREATE FOREIGN DATA WRAPPER fdw_demo;
CREATE SERVER srv_demo FOREIGN DATA WRAPPER fdw_demo OPTIONS (host 'zq-host');
CREATE PUBLICATION pub_demo FOR TABLE regions;
SELECT lo_from_bytea(0, 'zq large object');
"""
SECRETS = ("zq", "#@#", "===", "salaries", "secret_ssn")  # names of hidden things

# psql 15's describe commands; each runs plain, with + and (where psql has it) with S.
BASE = (
    "d da dA dAc dAf dAo dAp db dc dC dd dD ddp dE des det deu dew df dfa dfn dfp dft dfw dF "
    "dFd dFp dFt dg di dl dL dm dn do dO dp dP dPi dPt dPn drds dRp dRs ds dt dT du dv dx dX dy "
    "l z lo_list dconfig"
).split()
EXTRA = (
    r"\d regions", r"\d+ regions", r"\d+ pums", r"\d regions_pkey", r"\d+ purchases",
    r"\dt *.*", r"\df *.*", r"\do *.*", r"\dT *.*", r"\dF+ english", r"\dFd+ simple",
    r"\dFp+ default", r"\dFt+ simple", r"\dAc+ btree", r"\dC+ int4", r"\dx+ plpgsql",
    r"\sf pg_catalog.abs(int)", r"\sv pg_catalog.pg_roles",
)  # fmt: skip
COMMANDS = [f"\\{b}{v}" for b in BASE for v in ("", "+", "S", "S+")] + list(EXTRA)


@pytest.fixture(scope="module")
def servers(make_demo_db, demo_policy: Policy) -> Iterator[tuple[str, list[str]]]:  # type: ignore[no-untyped-def]
    """(upstream DSN, the psql connection arguments of the analyst through dpsql)."""
    dsn = make_demo_db("psqlcat")
    db = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(HIDDEN_EXTRA)  # type: ignore[arg-type]
        conn.execute(SETUP)  # type: ignore[arg-type]
        for stmt in (
            "CREATE ROLE {o}",
            "CREATE USER MAPPING FOR {o} SERVER srv_demo OPTIONS (password 'zqpw')",
            "ALTER ROLE {o} IN DATABASE {d} SET work_mem = '1MB'",
            "ALTER SCHEMA zqhr OWNER TO {o}",
        ):
            conn.execute(sql.SQL(stmt).format(o=sql.Identifier(OTHER), d=sql.Identifier(db)))
    with served_engine(demo_policy, dsn) as srv:
        yield dsn, ["-h", "127.0.0.1", "-p", str(srv.port), "-U", "analyst", "-d", db]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP EVENT TRIGGER zqevt_hidden")
        for stmt in (
            "DROP USER MAPPING FOR {o} SERVER srv_demo",
            "ALTER ROLE {o} IN DATABASE {d} RESET ALL",
            "DROP OWNED BY {o} CASCADE",
            "DROP ROLE {o}",
        ):
            conn.execute(sql.SQL(stmt).format(o=sql.Identifier(OTHER), d=sql.Identifier(db)))


def run_script(conn: list[str], commands: list[str], tmp: Path) -> dict[str, tuple[str, str]]:
    """Run ``commands`` in one psql session: {command: (its output, its error lines)}."""
    script = tmp / "describe.sql"
    lines, at = [], {}
    for n, command in enumerate(commands):
        lines.append(f"\\echo @@@ {n}")
        lines.append(command)
        at[len(lines)] = command
    script.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PGPASSWORD": "analyst", "PGSSLMODE": "disable", "PGOPTIONS": ""}
    res = subprocess.run(
        ["psql", "-X", "-A", "-P", "footer=off", "-P", "pager=off", *conn, "-f", str(script)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    out: dict[str, tuple[str, str]] = {c: ("", "") for c in commands}
    for block in res.stdout.split("@@@ ")[1:]:
        number, _, text = block.partition("\n")
        out[commands[int(number)]] = (text, "")
    for line in res.stderr.splitlines():
        found = re.match(rf"psql:{re.escape(str(script))}:(\d+): (.*)", line)
        if found and int(found.group(1)) in at:
            command = at[int(found.group(1))]
            text, errors = out[command]
            out[command] = (text, errors + found.group(2) + "\n")
    return out


def header(text: str) -> str:
    """The column line of a listing (after its title), or "" for an empty output."""
    lines = text.splitlines()
    return lines[1] if len(lines) > 1 else ""


def test_psql_describe_commands(servers: tuple[str, list[str]], tmp_path: Path) -> None:
    require("psql")
    upstream, analyst = servers
    direct = run_script([upstream], COMMANDS, tmp_path)
    proxied = run_script(analyst, COMMANDS, tmp_path)
    failures = []
    for command in COMMANDS:
        d_text, d_err = direct[command]
        p_text, p_err = proxied[command]
        if "invalid command" in d_err:
            continue  # no such variant in this psql
        if "ERROR" in p_err and "ERROR" not in d_err:
            failures.append(f"{command}: fails through dpsql: {p_err.strip()}")
        elif (
            "Did not find" not in p_err
            and "ERROR" not in p_err
            and (header(p_text) != header(d_text))
        ):
            failures.append(f"{command}: columns {header(p_text)!r} != {header(d_text)!r}")
        leaked = [s for s in SECRETS if s in p_text + p_err]
        if leaked:
            failures.append(f"{command}: shows {leaked}: {p_text[:300]!r}")
    assert not failures, "\n".join(failures)


def test_psql_shows_the_analyst_and_hides_other_schemas(
    servers: tuple[str, list[str]], tmp_path: Path
) -> None:
    """Listings that do list something: the analyst as every owner, and its own role's
    regrole printed by name; other schemas' objects absent, PostgreSQL's own present."""
    require("psql")
    _, analyst = servers
    got = run_script(
        analyst,
        [
            r"\dn",
            r"\do",
            r"\dC zqhr.zqdom",
            r"\dF english",
            r"\dx",
            r"\dew",
            r"\des",
            r"\di",
            "SELECT 'analyst'::regrole, to_regrole('analyst'), 'analyst'::regrole::text;",
        ],
        tmp_path,
    )
    assert "analyst" in got[r"\dn"][0] and "zqhr" not in got[r"\dn"][0]
    assert got[r"\do"][0].count("\n") == 2  # #@# uses zqhr.zqf2, === is in zqhr
    assert header(got[r"\dC zqhr.zqdom"][0]) and got[r"\dC zqhr.zqdom"][0].count("\n") == 2
    assert "english" in got[r"\dF english"][0]
    assert "plpgsql" in got[r"\dx"][0]
    assert "fdw_demo|analyst" in got[r"\dew"][0]
    assert got[r"\des"][0].count("\n") == 2  # no visible foreign table uses srv_demo
    assert "regions_pkey" in got[r"\di"][0] and "zq_regions_bad" not in got[r"\di"][0]
    regrole = got["SELECT 'analyst'::regrole, to_regrole('analyst'), 'analyst'::regrole::text;"]
    assert regrole[0].splitlines()[:2] == ["regrole|to_regrole|text", "analyst|analyst|analyst"]

"""Per-analyst table permissions: a table an analyst may not use behaves exactly like a missing one.

Demo data; the policy adds analysts "bob" (tables: purchases, regions: pums is hidden from him)
and "carol" (every table but the public table regions). "analyst" sees everything.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import errors as pe

from dpsql.engine import Engine
from dpsql.errors import DpsqlError, PolicyError
from dpsql.policy.load import parse_policy
from dpsql.session import SessionContext
from tests.policies import PolicyMaker, build_policy, demo_doc, policy_doc

ROOT = Path(__file__).resolve().parents[3]


_DEMO_ANALYSTS = demo_doc()["analysts"]
_ANALYST = _DEMO_ANALYSTS["analyst"]
# the demo's analysts, and two with the same budget as its "analyst" who may use only some tables
ANALYSTS = {
    **_DEMO_ANALYSTS,
    "bob": {**_ANALYST, "tables": ["purchases", "public.regions"]},
    "carol": {**_ANALYST, "tables": ["*.*"], "deny": ["public.reg*"]},
}


POLICY = build_policy(analysts=ANALYSTS, fixed_bounds=True)


@pytest.fixture(scope="module")
def eng(demo_dsn: str) -> Iterator[Engine]:
    e = Engine(POLICY, demo_dsn, pool_size=2)
    yield e
    e.close()


def outcome(e: Engine, sql: str, analyst: str, hide: str = "") -> tuple[Any, ...]:
    """(rows) or (sqlstate, message, hint, position), with the table name ``hide`` masked."""
    try:
        rows = e.execute(e.prepare(sql, analyst), SessionContext(analyst=analyst)).rows
        return ("ok", rows)
    except DpsqlError as err:
        msg = err.message.replace(hide, "{t}") if hide else err.message
        return (err.sqlstate, msg, err.hint, err.position)


# pums (hidden from bob) and pumz (missing) have names of equal length, so positions agree too.
QUERIES = [
    "SELECT COUNT(*) FROM {t}",
    "SELECT AVG(age) FROM public.{t} AS p WHERE sex = 1",
    "SELECT COUNT(*) FROM purchases JOIN {t} ON true",
    "SELECT COUNT(*) FROM (SELECT age FROM {t}) AS s",
    "WITH x AS (SELECT * FROM {t}) SELECT COUNT(*) FROM x",
    "SELECT relname FROM pg_class JOIN {t} ON true",
    "SELECT * FROM {t}",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_hidden_table_refused_like_a_missing_one(eng: Engine, sql: str) -> None:
    hidden = outcome(eng, sql.format(t="pums"), "bob", "pums")
    missing = outcome(eng, sql.format(t="pumz"), "bob", "pumz")
    assert hidden == missing
    written = "public.{t}" if "public.{t}" in sql else "{t}"
    assert hidden[0] == "42P01" and hidden[1] == f'relation "{written}" does not exist'
    assert hidden[3] is not None  # PostgreSQL's position of the reference
    assert outcome(eng, sql.format(t="pums"), "analyst")[0] != "42P01"


def test_first_unknown_table_is_named_as_postgres_would(eng: Engine) -> None:
    # pums comes first: bob must hear about pums, not about the missing table after it
    got = outcome(eng, "SELECT COUNT(*) FROM pums, no_such_table", "bob")
    assert got[:2] == ("42P01", 'relation "pums" does not exist')


def test_prepared_statement_of_another_analyst_is_refused(eng: Engine) -> None:
    sql = "SELECT COUNT(*) AS n FROM pums"
    prepared = eng.prepare(sql, "analyst")
    assert prepared.kind == "private"
    with pytest.raises(DpsqlError) as e:
        eng.execute(prepared, SessionContext(analyst="bob"))
    assert (e.value.sqlstate, e.value.message) == ("42P01", 'relation "pums" does not exist')
    with pytest.raises(DpsqlError):
        eng.describe(prepared, SessionContext(analyst="bob"))
    with pytest.raises(DpsqlError):  # the cache is per view: bob's prepare refuses
        eng.prepare(sql, "bob")


def test_wire_fast_path_checks_the_analyst_too(eng: Engine) -> None:
    """runnable_sql/cached_sql (the wire's event-loop path for public and catalog statements)."""
    prepared = eng.prepare("SELECT code FROM regions", "analyst")
    assert "regions" in eng.runnable_sql(prepared, SessionContext(analyst="analyst"))
    carol = SessionContext(analyst="carol")
    assert eng.cached_sql(prepared, carol) is None
    with pytest.raises(DpsqlError) as e:
        eng.runnable_sql(prepared, carol)
    assert (e.value.sqlstate, e.value.message) == ("42P01", 'relation "regions" does not exist')


def test_denied_public_table(eng: Engine) -> None:
    hidden = outcome(eng, "SELECT code FROM regions", "carol", "regions")
    missing = outcome(eng, "SELECT code FROM regionz", "carol", "regionz")
    assert hidden == missing and hidden[0] == "42P01"


def test_keys_from_a_denied_table_are_not_used(eng: Engine) -> None:
    """purchases.region takes its keys from regions.code, denied to carol: releasing every code
    as a group key would read regions for her. For her the column has no public key source, so
    GROUP BY region goes through partition selection (only groups with enough people appear)."""
    assert (
        POLICY.for_analyst("carol").tables["public.purchases"].columns["region"].keys_from is None
    )
    assert POLICY.for_analyst("bob").tables["public.purchases"].columns["region"].keys_from
    sql = "SELECT region, COUNT(*) AS n FROM purchases GROUP BY region"
    assert eng.prepare(sql, "analyst").analysis.group_keys[0].keys_from == "public.regions.code"
    carol = eng.prepare(sql, "carol").analysis
    assert carol.group_keys[0].keys_from is None and carol.needs_selection
    got = outcome(eng, sql, "carol")
    assert got[0] == "ok" and 0 < len(got[1]) <= 5  # the busy regions, chosen by selection
    # a stored answer (which lists every key of regions) is never a free repeat for carol
    assert eng.repeat_digest("carol") != eng.repeat_digest("")
    assert eng.repeat_digest("bob") == eng.repeat_digest("") == eng.policy_digest
    explained = outcome(eng, "EXPLAIN " + sql, "carol")
    assert explained[0] == "ok" and "regions" not in repr(explained[1])


CATALOG = [
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
    "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = "
    "'public'::regnamespace ORDER BY 1",
    "SELECT DISTINCT table_name FROM information_schema.columns "
    "WHERE table_schema = 'public' ORDER BY 1",
    "SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
    "WHERE c.relnamespace = 'public'::regnamespace GROUP BY 1 ORDER BY 1",
    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
]


@pytest.mark.parametrize("sql", CATALOG)
def test_catalog_shows_only_permitted_tables(eng: Engine, sql: str) -> None:
    def names(analyst: str) -> set[str]:
        got = outcome(eng, sql, analyst)
        assert got[0] == "ok", got
        return {r[0] for r in got[1]}

    assert {"pums", "purchases", "regions"} <= names("analyst")
    assert "pums" not in names("bob") and {"purchases", "regions"} <= names("bob")
    assert "regions" not in names("carol") and {"pums", "purchases"} <= names("carol")


_MISSING = (  # PostgreSQL's words for pumz, and dpsql's hint
    "42P01", 'relation "{t}" does not exist', "check the name: \\dt lists the tables you can read",
    None,
)  # fmt: skip


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT to_regclass('{t}')", ("ok", [(None,)])),
        ("SELECT '{t}'::regclass", _MISSING),
        ("SELECT has_table_privilege('{t}', 'SELECT')", _MISSING),
        ("SELECT has_column_privilege('{t}', 'age', 'SELECT')", _MISSING),
        ("SELECT obj_description('{t}'::regclass, 'pg_class')", _MISSING),
        ("SELECT format_type(to_regtype('{t}'), NULL)", ("ok", [(None,)])),
    ],
)
def test_name_functions_answer_alike_for_hidden_and_missing(
    eng: Engine, sql: str, expected: tuple[Any, ...]
) -> None:
    """A hidden table and a missing one: the same answer (NULL) or PostgreSQL's error for a
    missing name, in the same words (was: NULL where PostgreSQL refuses a missing name)."""
    hidden = outcome(eng, sql.format(t="pums"), "bob", "pums")
    assert hidden == outcome(eng, sql.format(t="pumz"), "bob", "pumz") == expected


def test_policy_rejects_unknown_tables() -> None:
    for field, value in (("tables", ["purchases", "nosuch"]), ("deny", ["sales.*"])):
        data = policy_doc(analysts=ANALYSTS, fixed_bounds=True)
        data["analysts"]["bob"][field] = value
        with pytest.raises(PolicyError) as e:
            parse_policy(yaml.safe_dump(data), "p.yaml")
        assert f"analysts.bob.{field}" in e.value.message and "matches no table" in e.value.message


def test_deny_wins_and_default_is_everything() -> None:
    assert POLICY.for_analyst("analyst") is POLICY
    assert POLICY.for_analyst("somebody-else") is POLICY  # not declared: the CLI's default
    assert set(POLICY.for_analyst("bob").tables) == {"public.purchases"}
    assert POLICY.for_analyst("carol").public_tables == ()
    assert not POLICY.may_use("carol", "public.regions")
    assert POLICY.may_use("carol", "public.pums") and not POLICY.may_use("carol", "public.x")


def test_cli_query_honours_analyst(demo_dsn: str, make_policy: PolicyMaker) -> None:
    path = make_policy("permissions", analysts=ANALYSTS, fixed_bounds=True).path
    cmd = [sys.executable, "-m", "dpsql", "query", "--policy", str(path), "--upstream", demo_dsn]
    cmd += ["--no-ledger", "SELECT COUNT(*) FROM pums"]
    bob = subprocess.run([*cmd, "--analyst", "bob"], capture_output=True, text=True, cwd=ROOT)
    assert bob.returncode == 1
    assert 'relation "pums" does not exist' in bob.stderr and "42P01" in bob.stderr
    ok = subprocess.run([*cmd, "--analyst", "analyst"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr


def test_release_honours_analyst(demo_dsn: str, tmp_path: Path) -> None:
    from dpsql.release.jobs import Job, run_histogram

    def refused(table: str) -> tuple[str, str, str | None]:
        with pytest.raises(DpsqlError) as e:
            job = Job(POLICY, demo_dsn, table=table, epsilon=1.0, out_dir=tmp_path, analyst="bob",
                      progress=False)  # fmt: skip
            run_histogram(job, ["sex"])
        return e.value.sqlstate, e.value.message.replace(table, "{t}"), e.value.hint

    assert refused("public.pums") == refused("public.pumz")
    assert refused("public.pums")[0] == "42P01"


@pytest.fixture(scope="module")
def server(demo_dsn: str) -> Iterator[Any]:
    from dpsql.server.run import ServerThread
    from dpsql.wire.server import ServerConfig

    engine = Engine(POLICY, demo_dsn, pool_size=2)
    with ServerThread(engine, POLICY, ServerConfig(port=0, shutdown_grace_s=2)) as srv:
        yield srv
    engine.close()


def test_wire_session_is_bound_to_its_analyst(server: Any) -> None:
    def connect(user: str) -> Callable[..., Any]:
        dsn = f"host=127.0.0.1 port={server.port} user={user} password=analyst dbname=demo"
        return psycopg.connect(dsn, autocommit=True)  # type: ignore[return-value]

    with connect("analyst") as conn:
        (n,) = conn.execute("SELECT COUNT(*) FROM pums").fetchone()  # type: ignore[misc]
        assert n > 0
    with connect("bob") as conn:
        for prepare in (False, True):
            with pytest.raises(pe.UndefinedTable) as e:
                conn.execute("SELECT COUNT(*) FROM pums", prepare=prepare)
            assert e.value.diag.message_primary == 'relation "pums" does not exist'
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
        assert ("pums",) not in tables and ("purchases",) in tables
        # the session's role is the analyst, never dpsql's upstream role
        for prepare in (False, True):
            row = conn.execute("SELECT current_user, session_user", prepare=prepare).fetchone()
            assert row == ("bob", "bob")
        assert conn.execute("SELECT rolname FROM pg_roles").fetchall() == [("bob",)]


def test_check_lists_each_analysts_tables(make_policy: PolicyMaker) -> None:
    from rich.console import Console

    from dpsql.check import check_policy

    path = make_policy("permissions", analysts=ANALYSTS, fixed_bounds=True).path
    console = Console(record=True, width=200)
    assert check_policy(str(path), None, console) == 0
    out = console.export_text()
    assert "bob may use: public.purchases, public.regions" in out
    assert "carol may use: public.purchases, public.pums" in out  # the policy file's order

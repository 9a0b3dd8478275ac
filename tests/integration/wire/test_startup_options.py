"""Settings at connection time: the ``options`` startup parameter (libpq ``options`` and
``PGOPTIONS``), ``application_name``, and an analyst's ``settings`` in the policy.

Real engine, ledger and PostgreSQL (demo data); psycopg and psql through the wire server.
Properties: ``-c dpsql.epsilon=0.5`` is the session's epsilon — SHOW, EXPLAIN, the noise's
half-width in the accuracy NOTICE (proportional to 1/epsilon under fixed contribution bounds:
twice as wide as at epsilon 1 up to integer rounding, a property of the plan, not of the noise)
and the ledger's ``dpsql.history``
all say 0.5; RESET returns to it; an unknown ``dpsql.*`` setting, a bad value, an epsilon outside
the analyst's range or a switch other than ``-c`` refuse the connection (never ignored); ordinary
PostgreSQL settings are taken as SET takes them; the policy's per-analyst settings apply when the
client sends none and the client's options override them.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import asyncpg  # a pinned test dependency (.ci/requirements.lock): never skipped, in CI or not
import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
COUNT = "SELECT COUNT(*) AS n FROM purchases"


@pytest.fixture(scope="module")
def ledger(make_db: Callable[[str], str], demo_policy: Any) -> Iterator[Ledger]:
    led = Ledger.open(make_db("opts_ledger"), demo_policy)
    yield led
    led.close()


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any, ledger: Ledger) -> Iterator[ServerThread]:
    analysts = dict(demo_policy.analysts)
    analysts["analyst"] = analysts["analyst"].model_copy(
        update={"settings": {"dpsql.confidence": "0.9", "dpsql.mechanism": "laplace"}}
    )
    # fixed contribution bounds: the noise's scale is then a property of the plan alone (with
    # `auto` the bound itself is a noisy choice, so the widths at two epsilons differ by more)
    tables = dict(demo_policy.tables)
    tables["public.purchases"] = tables["public.purchases"].model_copy(
        update={"max_rows_per_unit": 10, "max_groups_per_unit": 2}
    )
    policy = demo_policy.model_copy(update={"analysts": analysts, "tables": tables})
    with served_engine(policy, demo_dsn, ledger=ledger) as srv:
        yield srv


def _connect(srv: ServerThread, **kw: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(analyst_dsn(srv.port), autocommit=True, **kw)


def _show(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


def _half_width(conn: psycopg.Connection[Any]) -> Decimal:
    """The noise's half-width from the accuracy NOTICE ("noise ±X"): the interval's ends also
    carry the released estimate of what contribution bounding removed, which is itself noisy."""
    notices: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        notices.append(d.message_primary or "")

    conn.add_notice_handler(keep)
    try:
        conn.execute(COUNT).fetchall()
    finally:
        conn.remove_notice_handler(keep)
    widths = [m.group(1) for n in notices for m in [re.search(r"noise ±([0-9.,]+)", n)] if m]
    assert len(widths) == 1, notices
    return Decimal(widths[0].replace(",", ""))


def test_epsilon_from_options_shows_everywhere(served: ServerThread) -> None:
    with _connect(served, options="-c dpsql.epsilon=0.5") as conn:
        assert _show(conn, "dpsql.epsilon") == "0.5"
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + COUNT).fetchall())
        assert "epsilon=0.5" in plan and "Privacy cost: epsilon=0.5," in plan
        half = _half_width(conn)
        conn.execute("SET dpsql.epsilon = 1")
        at_one = _half_width(conn)
        # twice as wide at 0.5, up to the integer noise's quantiles (each within 1 of the
        # continuous one) and the NOTICE's three significant figures
        assert abs(half - 2 * at_one) <= 2 and half > 30, (half, at_one)
        conn.execute("RESET dpsql.epsilon")  # back to the value the session started with
        assert _show(conn, "dpsql.epsilon") == "0.5"
        conn.execute(COUNT + " WHERE quantity > 1")  # a fresh release, charged at 0.5
        history = conn.execute(
            "SELECT epsilon FROM dpsql.history ORDER BY 1 DESC LIMIT 100"
        ).fetchall()
        assert (Decimal("0.5"),) in [(Decimal(str(e)),) for (e,) in history]


def test_policy_settings_apply_and_options_override(served: ServerThread) -> None:
    with _connect(served) as conn:  # the analyst's settings from the policy
        assert _show(conn, "dpsql.confidence") == "0.9"
        assert _show(conn, "dpsql.mechanism") == "laplace"
        assert (
            _show(conn, "dpsql.epsilon") == "1"
        )  # the policy's, as the next statement takes it (was "default")
    with _connect(served, options="-c dpsql.confidence=0.99 -cdpsql.show_intervals=on") as conn:
        assert _show(conn, "dpsql.confidence") == "0.99"
        assert _show(conn, "dpsql.show_intervals") == "on"
        conn.execute("DISCARD ALL")  # the session's starting values, options included
        assert _show(conn, "dpsql.confidence") == "0.99"


def test_postgresql_settings_and_application_name(served: ServerThread) -> None:
    opts = r"-c TimeZone=Europe/Paris --statement-timeout=5000 -c search_path=public\,pg_catalog"
    with _connect(served, options=opts, application_name="superset") as conn:
        assert _show(conn, "TimeZone") == "Europe/Paris"
        assert conn.info.parameter_status("TimeZone") == "Europe/Paris"
        assert _show(conn, "statement_timeout") == "5s"  # as PostgreSQL shows 5000 ms
        assert _show(conn, "search_path") == "public,pg_catalog"
        assert _show(conn, "application_name") == "superset"
        assert conn.info.parameter_status("application_name") == "superset"
        row = conn.execute(  # the session's values, not the pooled upstream connection's
            "SELECT current_setting('application_name'), current_setting('TimeZone')"
        ).fetchone()
        assert row == ("superset", "Europe/Paris")
    with _connect(served) as conn:  # same text, another session: nothing memoized leaks
        row = conn.execute(
            "SELECT current_setting('application_name'), current_setting('TimeZone')"
        ).fetchone()
        assert row == ("", "UTC")


@pytest.mark.parametrize(
    ("options", "sqlstate", "message"),
    [
        ("-c dpsql.epsilom=0.5", "42704", 'unrecognized configuration parameter "dpsql.epsilom"'),
        ("-c dpsql.epsilon=abc", "22023", 'invalid value for parameter "dpsql.epsilon"'),
        (
            "-c dpsql.epsilon=50",
            "22023",
            '50 is outside the valid range for parameter "dpsql.epsilon" (0.001 .. 5)',
        ),
        ("-c dpsql.mechanism=magic", "22023", 'invalid value for parameter "dpsql.mechanism"'),
        ("-B 100", "22023", "invalid command-line argument for server process: -B"),
        ("-c server_version=1", "55P02", 'parameter "server_version" cannot be changed'),
    ],
)
def test_bad_options_refuse_the_connection(
    served: ServerThread, options: str, sqlstate: str, message: str
) -> None:
    with pytest.raises(psycopg.OperationalError) as e:
        _connect(served, options=options)
    assert message in str(e.value)
    assert e.value.sqlstate in (sqlstate, None)  # libpq reports a startup error's text only
    assert f"FATAL:  {message}" in str(e.value)


def test_pgoptions_with_psql(served: ServerThread) -> None:
    psql = shutil.which("psql")
    if psql is None:
        if IN_CI:
            pytest.fail("psql is missing")
        pytest.skip("psql is not installed")
    env = {**os.environ, "PGPASSWORD": "analyst", "PGOPTIONS": "-c dpsql.epsilon=0.25"}
    out = subprocess.run(
        [psql, "-X", "-At", "-h", "127.0.0.1", "-p", str(served.port), "-U", "analyst",
         "-d", "demo", "-c", "SHOW dpsql.epsilon"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0.25"
    env["PGOPTIONS"] = "-c dpsql.nonsense=1"
    out = subprocess.run(
        [psql, "-X", "-At", "-h", "127.0.0.1", "-p", str(served.port), "-U", "analyst",
         "-d", "demo", "-c", "SELECT 1"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert 'unrecognized configuration parameter "dpsql.nonsense"' in out.stderr


def test_asyncpg_server_settings_apply_or_refuse(served: ServerThread) -> None:
    """``dpsql.*`` sent as startup parameters of their own (asyncpg's ``server_settings``,
    SQLAlchemy+asyncpg's ``connect_args``) are applied as ``options`` are, after them, or refuse
    the connection: never ignored (they were: the session spent the policy's default)."""

    async def go() -> None:
        dsn = dict(host="127.0.0.1", port=served.port, user="analyst", password="analyst",
                   database="demo", ssl=False)  # fmt: skip
        conn = await asyncpg.connect(
            **dsn, server_settings={"dpsql.epsilon": "0.3", "dpsql.confidence": "0.99"}
        )
        try:
            assert await conn.fetchval("SHOW dpsql.epsilon") == "0.3"
            assert await conn.fetchval("SHOW dpsql.confidence") == "0.99"
            await conn.execute("RESET dpsql.epsilon")  # back to the value it started with
            assert await conn.fetchval("SHOW dpsql.epsilon") == "0.3"
            await conn.fetch(COUNT + " WHERE quantity = 1 AND region = 'S'")
            spent = await conn.fetchval(
                "SELECT epsilon FROM dpsql.history ORDER BY id DESC LIMIT 1"
            )
            assert Decimal(str(spent)) == Decimal("0.3")
        finally:
            await conn.close()
        conn = await asyncpg.connect(  # after options, as PostgreSQL applies them
            **dsn, server_settings={"options": "-c dpsql.epsilon=0.5", "dpsql.epsilon": "0.25"}
        )
        try:
            assert await conn.fetchval("SHOW dpsql.epsilon") == "0.25"
        finally:
            await conn.close()
        for settings, message in (
            ({"dpsql.epsilon": "9"}, 'for parameter "dpsql.epsilon" (0.001 .. 5)'),
            ({"dpsql.epsilom": "0.5"}, 'unrecognized configuration parameter "dpsql.epsilom"'),
        ):
            with pytest.raises(asyncpg.PostgresError) as e:
                await asyncpg.connect(**dsn, server_settings=settings)
            assert message in str(e.value), str(e.value)

    asyncio.run(go())

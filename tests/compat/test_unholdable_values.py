"""Released values Python's types can't hold come back as PostgreSQL shows them, not as a
failure after the charge.

A group key released from the data (partition selection) that is ``'infinity'``, a date after
9999 or before 1 AD, numeric ``NaN``/``Infinity``, float ``±Infinity``, or an interval past
``timedelta``'s range computed over a released key, was read back by psycopg after the charge
(dpsql.execute.finish): ``date too large`` (XX000), the budget spent, no answer, and every free
repeat failing the same way. Now (dpsql.upstream.loaders, dpsql.wire.pg_binary):

* through the engine, the answer holds the values (``PgText``, PostgreSQL's text, where Python
  can't hold them) and a repeat is free and the same;
* through the wire, every column's bytes are PostgreSQL's own for the same value, in text and
  in binary (psycopg cursors with raw loaders, the direct query on PostgreSQL for reference);
  psycopg with its default loaders and asyncpg (binary) read each value exactly as they read it
  from PostgreSQL directly (the same value, or the same error).

Units per group: 1,500 (partition selection at epsilon 1 drops a group of 1,500 with
probability far below 1e-100); only the keys are compared, never a noisy count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from psycopg.adapt import Loader
from psycopg.pq import Format

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from dpsql.upstream.loaders import PgText, register_lossless
from dpsql.upstream.settings import output_statements
from tests.compat.conftest import require
from tests.helpers import analyst_dsn, served_engine
from tests.policies import build_policy, private_table

COLUMNS = {
    "d": {"type": "date"},
    "ts": {"type": "timestamp"},
    "tz": {"type": "timestamp"},
    "far": {"type": "date"},
    "n": {"type": "numeric", "bounds": [0, 10]},
    "f": {"type": "numeric", "bounds": [0, 10]},
}
# (first half of the units, second half)
VALUES = {
    "d": ("infinity", "20000-01-01"),
    "ts": ("-infinity", "0044-03-15 12:00:00 BC"),
    "tz": ("infinity", "12000-01-01 00:00:00+00"),
    "far": ("20000-01-01", "2020-01-01"),
    "n": ("NaN", "Infinity"),
    "f": ("Infinity", "-Infinity"),
}
UNITS = 1500
# key expression, the column grouped by
KEYS = {
    "date infinity": ("d", "d"),
    "date after 9999": ("d + 1", "d"),
    "timestamp -infinity and BC": ("ts", "ts"),
    "timestamptz infinity and after 9999": ("tz", "tz"),
    "numeric NaN and Infinity": ("n", "n"),
    "float Infinity": ("f", "f"),
    "interval past timedelta": ("(far - DATE '2000-01-01') * INTERVAL '1 year'", "far"),
}
OIDS = ("date", "timestamp", "timestamptz", "interval", "numeric", "float8")


def query(name: str) -> str:
    key, col = KEYS[name]
    return f"SELECT {key} AS k, COUNT(*) AS n FROM t GROUP BY {col} ORDER BY {col}"


def direct(name: str) -> str:
    """The keys as PostgreSQL computes them over the table itself (the reference)."""
    key, col = KEYS[name]
    return f"SELECT {key} AS k FROM t GROUP BY {col} ORDER BY {col}"


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("unholdable")
    cols = ", ".join(COLUMNS)
    types = {"d": "date", "ts": "timestamp", "tz": "timestamptz", "far": "date",
             "n": "numeric", "f": "float8"}  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (u integer NOT NULL, "
            + ", ".join(f"{c} {types[c]}" for c in COLUMNS)
            + ")"
        )
        for half, (lo, hi) in enumerate([(1, UNITS), (UNITS + 1, 2 * UNITS)]):
            values = [VALUES[c][half] for c in COLUMNS]
            conn.execute(
                f"INSERT INTO t (u, {cols}) SELECT u, "
                + ", ".join(f"%s::{types[c]}" for c in COLUMNS)
                + " FROM generate_series(%s::int, %s::int) u",
                (*values, lo, hi),
            )
    return dsn


POLICY = build_policy(tables={"public.t": private_table("u", COLUMNS)}, public_tables=[])


@pytest.fixture(scope="module")
def ledger(dsn: str) -> Iterator[Ledger]:
    led = Ledger.open(dsn, POLICY, schema="dpsql_unholdable")
    yield led
    led.close()


class _Raw(Loader):
    def load(self, data: Any) -> bytes:
        return bytes(data)


class _RawBinary(_Raw):
    format = Format.BINARY


def _raw(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    for t in OIDS:
        conn.adapters.register_loader(t, _Raw)
        conn.adapters.register_loader(t, _RawBinary)
    return conn


def _keys(rows: list[tuple[Any, ...]]) -> list[Any]:
    """The key column (NaN as its text: Decimal('NaN') is not equal to itself)."""
    return [str(r[0]) if isinstance(r[0], Decimal) and r[0].is_nan() else r[0] for r in rows]


def _spent(engine: Engine, s: SessionContext) -> list[tuple[Any, ...]]:
    sql = "SELECT budget, name, epsilon_spent, releases FROM dpsql.budget"
    return engine.execute(engine.prepare(sql, "analyst"), s).rows


@pytest.mark.parametrize("name", list(KEYS))
def test_engine_answers_and_repeats(dsn: str, ledger: Ledger, name: str) -> None:
    s = SessionContext("analyst", Fraction(1))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for st in output_statements():
            conn.execute(st)
        register_lossless(conn)
        want = _keys(conn.execute(direct(name)).fetchall())  # type: ignore[arg-type]
    engine = Engine(POLICY, dsn, ledger, pool_size=2)
    try:
        first = engine.execute(engine.prepare(query(name), "analyst"), s)
        assert _keys(first.rows) == want and not first.cached
        before = _spent(engine, s)
        again = engine.execute(engine.prepare(query(name), "analyst"), s)
        assert again.cached and _keys(again.rows) == want
        assert [r[1:] for r in again.rows] == [r[1:] for r in first.rows]
        assert _spent(engine, s) == before  # the repeat is free
    finally:
        engine.close()
    if name.startswith(("date", "timestamp", "interval")):
        assert any(isinstance(k, PgText) for k in want)  # the case this file is about


@pytest.fixture(scope="module")
def server(dsn: str) -> Iterator[int]:
    with served_engine(POLICY, dsn) as srv:
        yield srv.port


def _outcome(run: Callable[[], Any]) -> Any:
    """What a client gets: its values, or the type of its error."""
    try:
        return ("rows", run())
    except Exception as e:
        return ("error", type(e).__name__)


@pytest.mark.parametrize("name", list(KEYS))
def test_wire_bytes_are_postgresqls(dsn: str, server: int, name: str) -> None:
    """Raw bytes of the key column, text and binary, through dpsql and from PostgreSQL; twice
    through dpsql (the second a free repeat)."""
    with (
        _raw(psycopg.connect(dsn, autocommit=True)) as pg,
        _raw(psycopg.connect(analyst_dsn(server), autocommit=True)) as dp,
    ):
        for st in output_statements():
            pg.execute(st)
        for binary in (False, True):
            with pg.cursor(binary=binary) as cur:
                want = _keys(cur.execute(direct(name)).fetchall())  # type: ignore[arg-type]
            for _ in range(2):
                with dp.cursor(binary=binary) as cur:
                    got = _keys(cur.execute(query(name)).fetchall())  # type: ignore[arg-type]
                assert got == want, (binary, got, want)


@pytest.mark.parametrize("name", list(KEYS))
def test_psycopg_reads_as_from_postgresql(dsn: str, server: int, name: str) -> None:
    """psycopg's default loaders (text results): the values, or ``DataError`` (date too large),
    exactly as on PostgreSQL directly."""
    with (
        psycopg.connect(dsn, autocommit=True) as pg,
        psycopg.connect(analyst_dsn(server), autocommit=True) as dp,
    ):
        for st in output_statements():
            pg.execute(st)
        want = _outcome(lambda: _keys(pg.execute(direct(name)).fetchall()))  # type: ignore[arg-type]
        got = _outcome(lambda: _keys(dp.execute(query(name)).fetchall()))  # type: ignore[arg-type]
        assert got == want


@pytest.mark.parametrize("name", list(KEYS))
def test_asyncpg_reads_as_from_postgresql(dsn: str, server: int, name: str) -> None:
    """asyncpg reads dates, timestamps and intervals in binary: the same values (``infinity``
    as asyncpg's own infinity) or the same error as on PostgreSQL directly."""
    require("py:asyncpg")
    import asyncpg

    info = psycopg.conninfo.conninfo_to_dict(dsn)

    async def fetch(**kw: Any) -> Any:
        conn = await asyncpg.connect(ssl=False, **kw)
        try:
            if "password" in kw and kw.get("user") != "analyst":
                await conn.execute("SET TimeZone = 'UTC'")
            sql = direct(name) if kw.get("user") != "analyst" else query(name)
            try:
                return ("rows", _keys(list(await conn.fetch(sql))))
            except Exception as e:
                return ("error", type(e).__name__)
        finally:
            await conn.close()

    want = asyncio.run(
        fetch(
            host=info["host"], port=int(info["port"]), user=info["user"],
            password=info["password"], database=info["dbname"],
        )
    )  # fmt: skip
    got = asyncio.run(
        fetch(host="127.0.0.1", port=server, user="analyst", password="analyst", database="demo")
    )
    assert got == want


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT ts - TIMESTAMP '2000-01-01' AS age, COUNT(*) FROM t GROUP BY ts",
        "WITH a AS (SELECT ts, COUNT(*) AS n FROM t GROUP BY ts), "
        "b AS (SELECT COUNT(*) AS m FROM t) "
        "SELECT ts - TIMESTAMP '2000-01-01' AS age, n, m FROM a, b",
    ],
    ids=["flat", "tree"],
)
def test_post_processing_refused_over_released_values_says_what_was_spent(
    dsn: str, ledger: Ledger, sql: str
) -> None:
    """An expression PostgreSQL refuses over a released key (``ts - TIMESTAMP`` over
    ``-infinity``: 22008) fails after the release was charged and stored; the error says so,
    and that asking the same again is free but fails the same way (it does: no new charge)."""
    s = SessionContext("analyst", Fraction(1))
    engine = Engine(POLICY, dsn, ledger, pool_size=2)
    try:
        errors = []
        spent = []
        for _ in range(2):
            with pytest.raises(DpsqlError) as e:
                engine.execute(engine.prepare(sql, "analyst"), s)
            errors.append(e.value)
            spent.append(_spent(engine, s))
    finally:
        engine.close()
    assert [x.sqlstate for x in errors] == ["22008", "22008"]
    assert "infinite" in errors[0].message  # PostgreSQL's own reason
    assert "privacy budget spent" in (errors[0].detail or "")
    assert "free repeat" in (errors[1].detail or "")
    assert spent[0] == spent[1]  # the second was a free repeat


REFUSED = {
    "flat": "SELECT ts - TIMESTAMP '2000-01-01' AS age, COUNT(*) FROM t GROUP BY ts",
    "derived": "SELECT ts - TIMESTAMP '2000-01-01', n FROM (SELECT ts, COUNT(*) AS n FROM t "
    "GROUP BY ts) s",
    "tree": "WITH a AS (SELECT ts, COUNT(*) AS n FROM t GROUP BY ts), "
    "b AS (SELECT COUNT(*) AS m FROM t) SELECT ts - TIMESTAMP '2000-01-01' AS age, n, m FROM a, b",
}


def _offered(hint: str | None) -> list[tuple[Fraction | None, str]]:
    """The statements the hint names, each with the epsilon its ``SET`` gives (None: none)."""
    assert hint is not None
    out: list[tuple[Fraction | None, str]] = []
    for line in hint.splitlines()[1:]:
        line = line.strip()
        if not line:
            continue
        if not line.upper().startswith(("SET", "SELECT")):
            line = line.split(": ", 1)[1]  # a leaf's label
        eps = None
        if line.startswith("SET dpsql.epsilon = "):
            setting, line = line.split("; ", 1)
            eps = Fraction(setting.removeprefix("SET dpsql.epsilon = ").strip("'"))
        out.append((eps, line))
    return out


@pytest.mark.parametrize("shape", list(REFUSED))
def test_post_processing_refused_offers_the_released_rows_free(dsn: str, shape: str) -> None:
    """PostgreSQL refuses the statement's expression over a released ``-infinity`` (22008,
    its words) after the charge: charged once (epsilon 1), the repeat free and the same error;
    the hint names the statement(s) returning the released rows themselves, and each is a free
    repeat of what was paid (cached, epsilon 0, the budget unchanged), the keys as released.
    Before: the hint named nothing, and the leaf alone was charged again (epsilon 1)."""
    led = Ledger.open(dsn, POLICY, schema=f"dpsql_refused_{shape}")
    s = SessionContext("analyst", Fraction(1))
    engine = Engine(POLICY, dsn, led, pool_size=2)
    try:
        before = _spent(engine, s)
        errors = []
        for _ in range(2):
            with pytest.raises(DpsqlError) as e:
                engine.execute(engine.prepare(REFUSED[shape], "analyst"), s)
            errors.append(e.value)
        after = _spent(engine, s)
        offered = _offered(errors[0].hint)
        assert _offered(errors[1].hint) == offered
        assert len(offered) == (2 if shape == "tree" else 1)
        for eps, text in offered:
            assert eps == (Fraction(1, 2) if shape == "tree" else None)
            mine = SessionContext("analyst", eps or Fraction(1))
            got = [engine.execute(engine.prepare(text, "analyst"), mine) for _ in range(2)]
            assert [(r.cached, r.epsilon_spent) for r in got] == [(True, 0.0)] * 2
            assert got[0].rows == got[1].rows
            if "ts" in text:
                assert sorted(str(r[0]) for r in got[0].rows) == [
                    "-infinity", "0044-03-15 12:00:00 BC"
                ]  # fmt: skip
        final = _spent(engine, s)
    finally:
        engine.close()
        led.close()
    assert [x.sqlstate for x in errors] == ["22008", "22008"]
    assert errors[0].message == "cannot subtract infinite timestamps"  # PostgreSQL's words
    assert [r[2] for r in before] in ([], [0, 0]) and [r[2] for r in after] == [1, 1]
    assert final == after


def test_post_processing_refused_offer_through_psycopg(dsn: str) -> None:
    """Through the wire: psycopg reads 22008 with PostgreSQL's message and the hint; the
    hinted ``SET`` and statements return the released rows free (the budget view unchanged:
    charged once, epsilon 1)."""
    led = Ledger.open(dsn, POLICY, schema="dpsql_refused_wire")
    try:
        with (
            served_engine(POLICY, dsn, ledger=led) as srv,
            _raw(psycopg.connect(analyst_dsn(srv.port), autocommit=True)) as conn,
        ):  # raw loaders: psycopg's own can't hold -infinity (as from PostgreSQL directly)
            budget = "SELECT epsilon_spent FROM dpsql.budget ORDER BY budget"
            with pytest.raises(psycopg.errors.DatetimeFieldOverflow) as e:
                conn.execute(REFUSED["tree"])
            assert e.value.diag.message_primary == "cannot subtract infinite timestamps"
            spent = conn.execute(budget).fetchall()
            offered = _offered(e.value.diag.message_hint)
            for eps, text in offered:
                assert eps is not None
                conn.execute(f"SET dpsql.epsilon = '{eps}'")
                rows = conn.execute(text).fetchall()
                if "ts" in text:
                    assert sorted(r[0] for r in rows) == [b"-infinity", b"0044-03-15 12:00:00 BC"]
                else:
                    assert len(rows) == 1
            assert conn.execute(budget).fetchall() == spent == [(b"1",), (b"1",)]
    finally:
        led.close()

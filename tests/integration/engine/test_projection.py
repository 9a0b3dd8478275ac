"""The post-processing computed without PostgreSQL (dpsql.execute.projection) is PostgreSQL's own:
the casts against PostgreSQL's on a sample of values, and whole answers against the query's."""

from __future__ import annotations

import datetime
import math
import random
import struct
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute import finish as finish_module
from dpsql.execute import private as private_module
from dpsql.execute.projection import _cast, _key, numeric
from dpsql.session import SessionContext
from dpsql.upstream.loaders import register_lossless


def _doubles(n: int) -> list[float]:
    rnd = random.Random(18)
    out = [0.0, -0.0, 0.1 + 0.2, 1 / 3, 1e15, 1e16, 1e20, 1e21, 1.5e300, 5e-324, 1e-7, 24.0]
    out += [-1.7976931348623157e308, 2.2250738585072014e-308, 999999999999999.9]
    while len(out) < n:
        k = rnd.random()
        if k < 0.4:  # any bit pattern
            v = struct.unpack("d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        elif k < 0.7:  # a released value's usual shape
            v = round(rnd.uniform(-1000, 1000), rnd.randint(0, 6))
        else:
            v = rnd.uniform(-1, 1) * 10 ** rnd.randint(-30, 30)
        if math.isfinite(v):
            out.append(v)
    return out


def test_casts_are_postgresqls(demo_dsn: str) -> None:
    """``CAST(x AS numeric)`` and ``CAST(x AS double precision)`` of 3,000 doubles (any bits,
    subnormals, the extremes, -0), and keys cast from their text, as psycopg reads PostgreSQL's
    results: the same values with the same ``repr`` (a Decimal's exponent included)."""
    xs = _doubles(3000)
    keys = ["0", "-7", "32767", "2147483647", "-9223372036854775808", "2025-01-31", "1000-01-01"]
    with psycopg.connect(demo_dsn, autocommit=True) as conn:
        register_lossless(conn)
        got = conn.execute(
            "SELECT CAST(u.x AS DECIMAL), CAST(u.x AS DOUBLE PRECISION) "
            "FROM UNNEST(CAST(%s AS DOUBLE PRECISION[])) AS u(x)",
            (xs,),
        ).fetchall()
        ints = conn.execute("SELECT CAST(%s AS BIGINT), CAST(%s AS INT)", ("-7", "2147483647"))
        assert ints.fetchone() == (_key("-7", "int8"), _key("2147483647", "int4"))
        day = conn.execute("SELECT CAST(%s AS DATE)", ("2025-01-31",)).fetchone()
    assert day == (_key("2025-01-31", "date"),) and day[0] == datetime.date(2025, 1, 31)
    for x, (dec, dbl) in zip(xs, got, strict=True):
        assert repr(numeric(x)) == repr(dec), x
        assert repr(_cast(x, "float8")) == repr(dbl), x
    # the sample tells the rule from a plausible twin (the shortest repr as the numeric)
    assert any(repr(Decimal(repr(x))) != repr(dec) for x, (dec, _) in zip(xs, got, strict=True))
    # what is not computed here goes to PostgreSQL: past a type's range, not its canonical text
    assert _key("32768", "int2") is _key("x", "int4") is _key("2025-1-31", "date")
    assert _cast(2**63, "int8") is _cast(math.inf, "numeric") is _key("0999-01-01", "date")
    assert _key(str(keys[4]), "int8") == -(2**63)


STATEMENTS = [
    "SELECT COUNT(*) FROM purchases WHERE amount < 300",
    "SELECT category, COUNT(*), SUM(amount), AVG(amount) FROM purchases GROUP BY category",
    "SELECT purchased_at, COUNT(*) AS n FROM purchases GROUP BY purchased_at",
    "SELECT sex, AVG(income), STDDEV(age) FROM pums GROUP BY sex",
    "SELECT category, PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount) AS m FROM purchases "
    "GROUP BY category",
    "SELECT region, COUNT(DISTINCT user_id) FROM purchases GROUP BY region",
]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_answers_are_the_post_processing_querys(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    """Each statement's release finished twice: computed here, and by the post-processing query
    in PostgreSQL: the same columns (name, type, typmod, mechanism), rows (``repr``), intervals
    and notices; and computed here, no query is sent."""
    real = finish_module.finish
    seen: list[tuple[Any, Any]] = []
    sent: list[str] = []
    run = engine.backend.run

    def recording(query: str, params: Any = None, **kw: Any) -> Any:
        sent.append(query)
        return run(query, params, **kw)

    def twice(*args: Any, **kw: Any) -> Any:
        sent.clear()
        here = real(*args, **kw)
        computed = not sent
        with monkeypatch.context() as m:
            m.setattr(finish_module, "_projected", lambda *a: None)
            there = real(*args, **kw)
        seen.append((here, there))
        assert computed, "computed here, no round trip"
        return here

    monkeypatch.setattr(private_module, "finish", twice)
    monkeypatch.setattr(engine.backend, "run", recording)
    engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    (here, there), *_ = seen
    assert here.columns == there.columns
    assert repr(here.rows) == repr(there.rows) and here.rows
    assert here.intervals == there.intervals and here.notices == there.notices
    assert here == there and here.command_tag == there.command_tag

"""The session's time zone through the wire with psycopg (newcomer 21's finding 32).

Real engine and PostgreSQL (demo data) behind the in-process server. Properties:
- ``SET TIME ZONE`` / ``SET SESSION TIMEZONE TO`` (Metabase's report time zone) and the
  ``TimeZone`` startup option are applied upstream: the January bucket of a date is labelled
  ``2025-01-01 00:00:00-05`` as PostgreSQL labels it (was ``2024-12-31 19:00:00-05``), the
  month keys are PostgreSQL's own in that zone, a public statement on the fast path
  (``now()::text``) carries the zone's offset; the name is PostgreSQL's (``america/new_york``
  -> ``America/New_York``, reported in ParameterStatus);
- an unknown zone is refused with PostgreSQL's 22023 words, the session unharmed (its zone
  unchanged); at startup it refuses the connection;
- RESET TIME ZONE / SET TIME ZONE LOCAL return to UTC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.server.run import ServerThread
from tests.helpers import analyst_dsn, served_engine

NY = "America/New_York"
MONTHS = (
    "SELECT date_trunc('month', purchased_at)::text AS m, COUNT(*) FROM purchases "
    "GROUP BY 1 ORDER BY 1"
)


@pytest.fixture(scope="module")
def served(demo_dsn: str, demo_policy: Any) -> Iterator[ServerThread]:
    with served_engine(demo_policy, demo_dsn) as srv:
        yield srv


def _pg(dsn: str, sql: str, zone: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        return conn.execute(sql).fetchall()


@pytest.mark.parametrize("set_zone", ["SET TIME ZONE 'america/new_york'",
                                      "SET SESSION TIMEZONE TO 'America/New_York'"])  # fmt: skip
def test_set_time_zone_applies(served: ServerThread, demo_dsn: str, set_zone: str) -> None:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        # a constant PostgreSQL reads in the zone a statement is prepared in: the fast path
        # prepares it on its second run, in UTC here, and must not run that plan in New York
        local = "SELECT %s::int AS i, CAST(CAST('2025-01-01 00:00' AS timestamptz) AS text) AS t"
        for i in (1, 2, 3):
            assert c.execute(local, (i,)).fetchone() == (i, "2025-01-01 00:00:00+00")
        c.execute("SET dpsql.epsilon = 0.5")
        c.execute(set_zone)
        assert c.execute(local, (4,)).fetchone() == (4, "2025-01-01 00:00:00-05")
        assert c.execute("SHOW TimeZone").fetchone() == (NY,)
        assert c.info.parameter_status("TimeZone") == NY
        got = [r[0] for r in c.execute(MONTHS).fetchall()]
        truth = [r[0] for r in _pg(demo_dsn, MONTHS, NY)]
        assert got == truth, (got, truth)  # the declared months, in PostgreSQL's labels
        assert got[0] == "2025-01-01 00:00:00-05"
        (now,) = c.execute("SELECT now()::text").fetchone()  # type: ignore[misc]
        assert now.endswith(("-05", "-04")), now
        c.execute("SET TIME ZONE LOCAL")
        assert c.execute("SHOW TimeZone").fetchone() == ("UTC",)
        (now,) = c.execute("SELECT now()::text").fetchone()  # type: ignore[misc]
        assert now.endswith("+00"), now


def test_unknown_zone_refused(served: ServerThread) -> None:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        c.execute("SET TIME ZONE 'Asia/Tokyo'")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            c.execute("SET TIME ZONE 'Mars/Phobos'")
        assert (
            e.value.diag.message_primary == 'invalid value for parameter "TimeZone": "Mars/Phobos"'
        )
        assert "America/New_York" in (e.value.diag.message_hint or "")
        assert c.execute("SHOW TimeZone").fetchone() == ("Asia/Tokyo",)  # unharmed
        (t,) = c.execute(
            "SELECT CAST(CAST('2025-01-01 00:00+00' AS timestamptz) AS text)"
        ).fetchone()  # type: ignore[misc]
        assert t == "2025-01-01 09:00:00+09"


def test_startup_zone(served: ServerThread, make_db: Callable[[str], str]) -> None:
    dsn = analyst_dsn(served.port)
    with psycopg.connect(dsn + " options='-c TimeZone=asia/kolkata'", autocommit=True) as c:
        assert c.info.parameter_status("TimeZone") == "Asia/Kolkata"
        c.execute("SET dpsql.epsilon = 0.5")
        first = c.execute(MONTHS).fetchone()
        assert first is not None and first[0] == "2025-01-01 00:00:00+05:30"
        c.execute("RESET TimeZone")  # the session's default: the zone it started with
        assert c.execute("SHOW TimeZone").fetchone() == ("Asia/Kolkata",)
    with pytest.raises(psycopg.OperationalError, match='invalid value for parameter "TimeZone"'):
        psycopg.connect(dsn + " options='-c TimeZone=Mars/Phobos'").close()

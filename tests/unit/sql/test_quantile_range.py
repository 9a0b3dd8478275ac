"""A quantile's grid spans the declared bounds intersected with the WHERE clause's constant
bounds on its own column (dpsql.sql.quantile_range): exact ends for integers and dates, the
session's time zone for timestamptz constants, the declared grid for anything else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlglot

from dpsql.policy.load import parse_policy
from dpsql.sql.analyze import analyze
from dpsql.upstream.zone import ZONE

POLICY = parse_policy(
    """
version: 1
tables:
  public.e:
    privacy_unit: row
    columns:
      at: {type: timestamptz, bounds: ['2025-01-01 00:00:00', '2025-12-31 23:59:59']}
      ts: {type: timestamp, bounds: ['2025-01-01 00:00:00', '2025-12-31 23:59:59']}
      d: {type: date, bounds: [2025-01-01, 2025-12-31]}
      n: {type: integer, bounds: [0, 100]}
      v: {type: numeric, bounds: [0, 10]}
      f: {type: float8, bounds: [0, 10]}
"""
)


def _grid(sql: str, zone: str = "UTC") -> tuple[float, float]:
    token = ZONE.set(zone)
    try:
        (m,) = analyze(sqlglot.parse_one(sql, read="postgres"), POLICY).measures
    finally:
        ZONE.reset(token)
    return float(m.lo), float(m.hi)


def _sec(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("where", "zone", "grid"),
    [
        ("n > 9.5 AND n < 20", "UTC", (10, 19)),
        ("n BETWEEN 5 AND 7", "UTC", (5, 7)),
        ("n = 7", "UTC", (7, 7)),
        ("30 > n AND (n >= 3)", "UTC", (3, 29)),
        ("v > 2.5 AND v <= 7", "UTC", (2.5, 7)),
        ("d > '2025-06-01' AND d < '2025-07-01'", "UTC", (20241, 20269)),
        (
            "at >= '2025-06-01' AND at < '2025-07-01'",
            "UTC",
            (_sec("2025-06-01"), _sec("2025-07-01")),
        ),
        (
            "at >= '2025-06-01' AND at < '2025-07-01'",
            "America/New_York",
            (_sec("2025-06-01 04:00"), _sec("2025-07-01 04:00")),
        ),
        (
            "at > '2025-11-02 01:30'",
            "America/New_York",
            (_sec("2025-11-02 05:30"), _sec("2025-12-31 23:59:59")),
        ),
        (
            "ts >= '2025-06-01'",
            "America/New_York",
            (_sec("2025-06-01"), _sec("2025-12-31 23:59:59")),
        ),
    ],
)
def test_the_grid_spans_the_filter(where: str, zone: str, grid: tuple[float, float]) -> None:
    col = where.split()[2] if where[0].isdigit() else where.split()[0]
    assert _grid(f"SELECT MIN({col}) FROM e WHERE {where}", zone) == pytest.approx(grid)


@pytest.mark.parametrize(
    ("sql", "grid"),
    [
        ("SELECT MIN(n) FROM e WHERE n > 30 OR n < 10", (0, 100)),
        ("SELECT MIN(n) FROM e WHERE NOT n > 30", (0, 100)),
        ("SELECT MIN(n) FROM e WHERE n BETWEEN 200 AND 300", (0, 100)),
        ("SELECT MIN(n + 1) FROM e WHERE n > 30", (1, 101)),
        ("SELECT MIN(n) FROM e WHERE v > 3", (0, 100)),
        ("SELECT MIN(f) FROM e WHERE f <= 0.1", (0, 10)),
        ("SELECT MIN(v) FROM e WHERE v = 2.5", (0, 10)),
        ("SELECT MIN(n) FROM e WHERE n > '30'", (0, 100)),
    ],
)
def test_other_filters_keep_the_declared_grid(sql: str, grid: tuple[float, float]) -> None:
    assert _grid(sql) == pytest.approx(grid)

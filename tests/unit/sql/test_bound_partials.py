"""The bound_partials pass (and the row path of bound_contributions) against fixture SQL."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.policy.load import parse_policy
from dpsql.sql.analysis import decomposable, needs_group_rank
from dpsql.sql.analyze import analyze
from dpsql.sql.rewrite import private_query
from tests.unit.sql.test_rewrite_passes import pairs

POLICY = parse_policy(
    """
version: 1
tables:
  public.p:
    privacy_unit: uid
    max_rows_per_unit: 3
    max_groups_per_unit: 2
    columns:
      uid: {type: integer, identifier: true}
      x: {type: integer, bounds: [1, 10]}
      y: {type: numeric, bounds: [-2, 4]}
      g: {type: integer, keys: [1, 2]}
      c: {type: text, keys: [a, b, c]}
      f: {type: text}
"""
)


def analysis(sql: str):  # type: ignore[no-untyped-def]
    return analyze(sqlglot.parse_one(sql, read="postgres"), POLICY)


@pytest.mark.parametrize(("given", "expected"), pairs("bound_partials.sql"))
def test_bound_partials(given: str, expected: str) -> None:
    assert private_query(analysis(given), "salt").sql("postgres") == expected


@pytest.mark.parametrize(
    ("sql", "partials", "rank"),
    [
        ("SELECT COUNT(*), SUM(x), AVG(y), VAR_POP(y) FROM p", True, False),
        ("SELECT g, COUNT(DISTINCT uid) FROM p GROUP BY g", True, False),  # 2 keys <= G = 2
        ("SELECT c, COUNT(*) FROM p GROUP BY c", True, True),  # 3 keys > G
        ("SELECT g, c, COUNT(*) FROM p GROUP BY g, c", True, True),  # 6 combinations
        ("SELECT f, COUNT(*) FROM p GROUP BY f", True, True),  # partition selection
        ("SELECT c, COUNT(DISTINCT x) FROM p GROUP BY c", False, True),
        ("SELECT MEDIAN(x) FROM p", False, False),
    ],
)
def test_path_choice(sql: str, partials: bool, rank: bool) -> None:
    a = analysis(sql)
    assert decomposable(a) is partials
    assert needs_group_rank(a) is rank
    text = private_query(a, "salt").sql("postgres")
    assert ("_dp_parts" in text) is partials
    assert ("_dp_gr" in text) is rank
    assert "RANDOM()" not in text  # rows and groups are chosen by keyed hashes
    # rows ranked by their identity's hash, a quantile's by its values' (keyed_hash.value_order)
    quantiles = all(m.kind in ("quantile", "count_rows", "count_units") for m in a.measures)
    assert ("_dp_rt" in text) is (not partials and not quantiles)
    # ... unclamped (_dp_v1: the value as NUMERIC), hashed before the sort, with their one
    # bucketing packed into the hash's low bits (read back after the ranking as _dp_q0)
    assert ("HASH_NUMERIC_EXTENDED(CAST(_dp_v1 AS DECIMAL)" in text) is (not partials and quantiles)
    assert ("ORDER BY _dp_o) AS _dp_rn" in text) is (not partials and quantiles)
    assert ("NULLIF(CAST((_dp_o & " in text) is (not partials and quantiles)


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT g, AVG(y) FROM p GROUP BY g", True),  # a NUMERIC sum per (unit, group)
        ("SELECT g, COUNT(*), SUM(x) FROM p GROUP BY g", True),
        ("SELECT c, SUM(x) FROM p GROUP BY c", True),  # ranked: always
        ("SELECT c, COUNT(*) FROM p GROUP BY c", True),
        ("SELECT g, COUNT(*), COUNT(y) FROM p GROUP BY g", False),  # counts only: hashed
        ("SELECT g, SUM(x) FROM p WHERE g = 1 GROUP BY g", False),  # one key left: hashed
        ("SELECT SUM(x), AVG(y) FROM p", False),  # one group per unit: hashed
    ],
)
def test_sorted_rows_choice(sql: str, ordered: bool) -> None:
    """The partials aggregate sorted rows (bound_partials.sorted_rows) with a group rank, or
    with GROUP BY keys and a summed measure; the same partials either way (a plan choice)."""
    text = private_query(analysis(sql), "salt").sql("postgres")
    assert ("FROM (SELECT * FROM _dp_rows ORDER BY _dp_unit" in text) is ordered

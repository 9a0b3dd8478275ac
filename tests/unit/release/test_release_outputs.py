"""Release SQL shapes and output writers (no database)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from dpsql.errors import PrivacyViolation
from dpsql.policy import parse_policy
from dpsql.release.outputs import (
    OutColumn,
    check_target,
    parse_table_name,
    plot_counts,
    write_private_json,
    write_table,
)
from dpsql.release.source import Bound, counts_sql
from dpsql.release.spec import resolve_source

POLICY = parse_policy(
    """
tables:
  people:
    privacy_unit: pid
    max_rows_per_unit: 2
    max_groups_per_unit: 3
    columns:
      pid: {type: integer, identifier: true}
      sex: {type: text, keys: [F, M]}
      age: {type: integer, bounds: [0, 99]}
      region: {type: text, keys_from: lookups.regions.code}
  rows:
    privacy_unit: row
    columns:
      sex: {type: text, keys: [F, M]}
public_tables: [lookups.regions]
"""
)


def _sql(table: str, cols: list[str], mode: str) -> str:
    src = resolve_source(POLICY, table, cols)
    return counts_sql(src, Bound.for_source(src, mode)).as_string(None)


def test_per_cell_without_choice_when_g_covers_the_cells() -> None:
    q = _sql("people", ["sex"], "per_cell")  # 2 cells <= G = 3
    assert "LEAST(count(*), 2)" in q and "ROW_NUMBER" not in q and '"pid" AS _u' in q


def test_per_cell_chooses_g_cells_per_unit() -> None:
    q = _sql("people", ["sex", "age"], "per_cell")
    assert "LEAST(count(*), 2)" in q and "PARTITION BY _u" in q and "_gr <= 3" in q


def test_per_unit_keeps_r_rows() -> None:
    q = _sql("people", ["sex", "age"], "per_unit")
    assert "PARTITION BY _u" in q and "_rn <= 2" in q


def test_row_privacy_needs_no_bounding() -> None:
    q = _sql("rows", ["sex"], "per_cell")
    assert "_u" not in q and "PARTITION" not in q and '"public"."rows"' in q


def test_output_table_can_never_be_a_private_table() -> None:
    with pytest.raises(PrivacyViolation):
        check_target(POLICY, "people")
    with pytest.raises(PrivacyViolation):
        check_target(POLICY, "PUBLIC.People")
    assert check_target(POLICY, "releases.people") == "releases.people"


def test_output_table_names_read_as_sql_and_never_a_policy_table() -> None:
    assert parse_table_name('"public"."People"') == ("public", "People")
    assert parse_table_name('S."a ""b"".c"') == ("s", 'a "b".c')
    assert parse_table_name("Rows") == ("public", "rows")
    for bad in ('"public', "a.b.c", "a..b", "a b", '""', "1x"):
        with pytest.raises(ValueError):
            parse_table_name(bad)
    for name in ('"public"."people"', "PUBLIC.ROWS", "lookups.regions", "dpsql.ledger",
                 "pg_catalog.x"):  # fmt: skip
        with pytest.raises(PrivacyViolation):
            check_target(POLICY, name)
    assert check_target(POLICY, 'releases."People"') == 'releases."People"'
    assert check_target(POLICY, '"public"."people_hist"') == "public.people_hist"


def test_writers(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    cols = [
        OutColumn("sex", "text", ["F", "M"]),
        OutColumn("n", "integer", np.array([3, 4])),
        OutColumn("ok", "boolean", [True, False]),
    ]
    csv, parquet = write_table(tmp_path, "t", cols)
    assert csv.read_text().splitlines()[0] == '"sex","n","ok"'
    t = pq.read_table(parquet)
    assert t.column("n").to_pylist() == [3, 4] and str(t.schema.field("ok").type) == "bool"
    png = plot_counts(tmp_path / "p.png", np.array([[1, 2], [3, 4]]), [["a", "b"]] * 2,
                      ["x", "y"], "t")  # fmt: skip
    assert png.read_bytes()[:4] == b"\x89PNG"
    q = write_private_json(tmp_path / "q.json", {"a": np.int64(1)})
    assert stat.S_IMODE(os.stat(q).st_mode) == 0o600 and json.loads(q.read_text()) == {"a": 1}


def test_synthetic_values_fall_in_their_bins() -> None:
    from dpsql.release.synthetic import within_bins

    bins = np.array([0, 1, 2, 2, 1, 0] * 50)
    ints = within_bins((0.0, 10.0, 20.0, 100.0), "integer", bins)
    assert ints.dtype.kind == "i"
    lo, hi = np.array([0, 10, 20])[bins], np.array([10, 20, 100])[bins]
    assert ((ints >= lo) & (ints < hi)).all() and len(set(ints.tolist())) > 3
    reals = within_bins((0.0, 0.5, 1.0, 7.5), "numeric", bins)
    lo, hi = np.array([0, 0.5, 1.0])[bins], np.array([0.5, 1.0, 7.5])[bins]
    assert ((reals >= lo) & (reals < hi)).all()

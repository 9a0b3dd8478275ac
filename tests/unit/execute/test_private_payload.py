"""The stored form of a release (dpsql.execute.repeat_keys.payload), read back for free repeats."""

from __future__ import annotations

import json

from dpsql.execute.noise import Release
from dpsql.execute.repeat_keys import payload


def test_payload_round_trips_through_the_ledger_form() -> None:
    rel = Release(
        ("text", "int4"),
        [["a", "0"], [None, "1"]],
        [[12.5, 3], [7.0, None]],
        [[(10.0, 15.0), None], [(5.5, 8.5), None]],
        [[(1.0, 2.0)], [None]],
        0.95,
    )
    data = payload(rel)
    assert b" " not in data  # compact: the ledger stores one per answer
    assert Release.from_json(json.loads(data)) == rel

"""A grouping set's release as rows of the whole statement (dpsql.execute.grouping_sets._widened,
f1e3a4d): its keys in their places (None where the set rolls a key up), the set number last, and
every per-row list carried row for row: half-widths (presentation rounding where the accuracy
notice disowned an interval: Release.half_widths, derived_half_widths), derived intervals,
noise-alone intervals, each padded where the set's release has none. The integration tests of GROUPING SETS did not read the
half-widths: a twin that dropped them (all None) passed all 169 of them."""

from __future__ import annotations

import math
from dataclasses import replace

from dpsql.execute.grouping_sets import _widened
from dpsql.execute.noise import Release

IV = (0.0, 2.0)


def _rel(
    half_widths: list[list[float | None]] | None = None,
    derived: list[list[tuple[float, float] | None]] | None = None,
    noise: list[list[tuple[float, float] | None]] | None = None,
) -> Release:
    """Two rows of one key and two statistics, the second's intervals NULL."""
    return Release(
        ("text",),
        [["a"], ["b"]],
        [[1.0, 5], [2.0, 6]],
        [[IV, None], [None, None]],
        derived=derived or [],
        half_widths=half_widths or [],
        noise=noise or [],
    )


def test_keys_go_to_their_places_and_the_set_number_last() -> None:
    w = _widened(_rel(), (1,), 3, 4)
    assert w.groups == [[None, "a", None, "4"], [None, "b", None, "4"]]
    assert w.stats == [[1.0, 5], [2.0, 6]] and w.intervals == [[IV, None], [None, None]]


def test_half_widths_are_carried_or_read_from_the_intervals() -> None:
    # stored with the release: kept as they are (a disowned interval keeps its resolution)
    kept = _widened(_rel(half_widths=[[1.0, 0.5], [3.0, None]]), (0,), 1, 0)
    assert kept.half_widths == [[1.0, 0.5], [3.0, None]]
    # none stored: each row's from its own intervals (tree_rounding.half_widths)
    read = _widened(_rel(), (0,), 1, 0)
    assert read.half_widths == [[1.0, None], [None, None]]


def test_a_set_without_derived_or_noise_rows_is_padded_row_for_row() -> None:
    w = _widened(_rel(), (0,), 1, 2)
    assert w.derived == [[], []] and w.derived_half_widths == [[], []]
    assert w.noise == [[None, None], [None, None]]
    noisy: list[list[tuple[float, float] | None]] = [[(0.5, 1.5), None], [(1.0, math.inf), None]]
    d: list[list[tuple[float, float] | None]] = [[(1.0, 3.0)], [None]]
    carried = _widened(_rel(derived=d, noise=noisy), (0,), 1, 2)
    assert carried.derived == d and carried.noise == noisy
    assert carried.derived_half_widths == [[None], [None]]  # none disowned: padded
    disowned = replace(_rel(derived=d), derived_half_widths=[[1.0], [2.0]])
    assert _widened(disowned, (0,), 1, 2).derived_half_widths == [[1.0], [2.0]]

"""A flat private statement's expressions over its statistics rounded to their noise's resolution.

The statistics themselves are rounded where they are released (:func:`dpsql.execute.noise.release`,
to the step of their interval's half-width, :func:`dpsql.execute.bias.round_nearest`). The
post-processing query's expressions over them (``SUM(x) / COUNT(*)``, ``AVG(x) * 1.1``,
``COUNT(*) * 100.0 / 7``) run in PostgreSQL and keep every digit its arithmetic makes; each such
output value is rounded here, by the same rule: to the step of its own interval's half-width
(:func:`dpsql.sql.intervals.derived_outputs`, the release's ``derived`` intervals), or, for an
expression without one, by the tree statements' rule (:mod:`dpsql.execute.tree_rounding`): the
step of ``r |v|``, ``r`` the smallest relative half-width of the statistics it reads in that row
(in every row when the rows can't be told apart: DISTINCT). A function of released values and
intervals only; integer, text, boolean and NULL values are untouched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from dpsql.execute.bias import round_nearest
from dpsql.execute.noise import Release
from dpsql.execute.tree_rounding import half_widths, relative_resolution, round_value, whole
from dpsql.sql.analysis import Analysis
from dpsql.sql.intervals import derived_outputs, stat_index
from dpsql.sql.postprocess import stat_outputs


def round_outputs(
    a: Analysis, rel: Release, rows: Sequence[tuple[Any, ...]], rids: Sequence[int] | None
) -> list[tuple[Any, ...]]:
    """``rows`` (the post-processing query's, in output order; ``rids``: each row's release
    row, None when not known) with the outputs that are expressions over statistics rounded."""
    single = {pos for pos, _ in stat_outputs(a)}
    derived = {pos: k for k, (pos, _, _) in enumerate(derived_outputs(a))}
    reads: dict[int, tuple[int, ...]] = {}
    for pos, item in enumerate(a.outer.expressions):
        body = item.this if isinstance(item, exp.Alias) else item
        if pos in single:
            continue
        used = {i for c in body.find_all(exp.Column) if (i := stat_index(c)) is not None}
        if used:
            reads[pos] = tuple(sorted(used))
    if not reads:
        return [tuple(r) for r in rows]
    every = {pos: _relative(rel, sis, range(len(rel.stats))) for pos, sis in reads.items()}
    out = []
    for j, row in enumerate(rows):
        cells = list(row)
        rid = rids[j] if rids is not None else None
        for pos, sis in reads.items():
            k = derived.get(pos)
            iv = rel.derived[rid][k] if rid is not None and k is not None and rel.derived else None
            if whole(cells[pos]):  # adds up with what it is computed from (tree_rounding.whole)
                cells[pos] = round_value(cells[pos], 0.0)
                continue
            if iv is not None and all(map(math.isfinite, iv)):
                cells[pos] = round_nearest(cells[pos], (iv[1] - iv[0]) / 2)
                continue
            half = (  # its interval disowned (NULL columns): the noise's resolution stays
                rel.derived_half_widths[rid][k]
                if rid is not None and k is not None and rel.derived_half_widths
                else None
            )
            if half is not None:
                cells[pos] = round_nearest(cells[pos], half)
                continue
            r = _relative(rel, sis, [rid]) if rid is not None else every[pos]
            if r is not None:
                cells[pos] = round_value(cells[pos], r)
        out.append(tuple(cells))
    return out


def _relative(rel: Release, sis: Sequence[int], rids: Sequence[int]) -> float | None:
    """The smallest relative half-width of statistics ``sis`` in release rows ``rids``."""
    halves = half_widths(rel)
    picked = Release(
        rel.key_types,
        [],
        [[rel.stats[i][s] for s in sis] for i in rids],
        [[rel.intervals[i][s] for s in sis] for i in rids],
        half_widths=[[halves[i][s] for s in sis] for i in rids],
    )
    return relative_resolution([picked])

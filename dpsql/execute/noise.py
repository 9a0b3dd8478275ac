"""Turn the true per-group measures into released statistics (the only place noise is added).

Input: the upstream rows of the private query (group keys as text, then one column per measure,
then, with partition selection, the count used to select). Output: a :class:`Release` — the group
keys kept, each statistic's noisy value and interval — which is all that ever leaves this module.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.sql.plan import Plan
from dpsql.sql.postprocess import derive


@dataclass(frozen=True)
class Release:
    """What a private query releases. JSON-serializable via ``as_json``."""

    key_types: tuple[str, ...]
    groups: list[list[str | None]]
    stats: list[list[Any]]
    intervals: list[list[tuple[float, float] | None]]

    def as_json(self) -> dict[str, Any]:
        return {
            "key_types": list(self.key_types),
            "groups": self.groups,
            "stats": self.stats,
            "intervals": [[list(i) if i else None for i in row] for row in self.intervals],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Release:
        return cls(
            tuple(d["key_types"]),
            d["groups"],
            d["stats"],
            [[tuple(i) if i else None for i in row] for row in d["intervals"]],
        )


def _exact(v: Any) -> Fraction:
    return Fraction(v) if v is not None else Fraction(0)


def _snapped(values: Sequence[Fraction], grid: Fraction) -> np.ndarray:
    """Values rounded to the grid in exact arithmetic, as floats (exact: multiples of 2^k)."""
    return np.array([float(round(v / grid) * grid) for v in values], dtype=np.float64)


def release(
    plan: Plan,
    rows: list[tuple[Any, ...]],
    key_types: Sequence[str],
    declared_keys: list[tuple[str, ...]] | None,
    confidence: float,
    noiseless: bool = False,
) -> Release:
    a = plan.analysis
    nk = len(a.group_keys)
    nm = len(a.measures)
    by_key: dict[tuple[str | None, ...], tuple[Any, ...]] = {
        tuple(r[:nk]): tuple(r[nk:]) for r in rows
    }
    if declared_keys is not None:
        keys = [tuple(k) for k in itertools.product(*declared_keys)] if nk else [()]
        zero = (0,) * (nm + (1 if a.needs_selection else 0))
        table = [(k, by_key.get(k, zero)) for k in keys]
    else:
        table = list(by_key.items())
    if a.needs_selection and table:
        sel = np.array([float(v[nm]) for _, v in table])
        assert plan.selection is not None
        keep = sel >= 1 if noiseless else plan.selection.keep(sel)
        table = [t for t, k in zip(table, keep, strict=True) if k]
    noisy: dict[str, np.ndarray] = {}
    widths: dict[str, float] = {}
    for j, mp in enumerate(plan.measures):
        col = [_exact(v[j]) for _, v in table]
        vals = _snapped(col, mp.mechanism.grid)
        noisy[mp.key] = vals if noiseless else mp.mechanism.release(vals)
    stats: list[list[Any]] = [[] for _ in table]
    intervals: list[list[tuple[float, float] | None]] = [[] for _ in table]
    for s in a.statistics:
        k = len(s.measures)
        level = 1 - (1 - confidence) / k
        for key in s.measures:
            widths[key] = plan.measure_plan(key).mechanism.half_width(level)
        for i in range(len(table)):
            v, iv = derive(
                s, [float(noisy[m][i]) for m in s.measures], [widths[m] for m in s.measures]
            )
            stats[i].append(v)
            intervals[i].append(iv)
    groups = [list(k) for k, _ in table]
    return Release(tuple(key_types), groups, stats, intervals)

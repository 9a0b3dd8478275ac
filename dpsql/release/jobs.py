"""End-to-end release jobs: resolve, plan, reserve, count in PostgreSQL, add noise, commit, write.

``run_histogram`` and (in :mod:`dpsql.release.synthetic`) ``run_synthetic`` are what the CLI calls;
tests call them too, with or without a ledger.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql as pgsql
from rich.console import Console

from dpsql.errors import InvalidParameter
from dpsql.policy.model import Policy
from dpsql.release.charge import Charge, Steps
from dpsql.release.histogram import Histogram, HistogramPlan, plan_histogram, release_histogram
from dpsql.release.outputs import (
    OutColumn,
    check_target,
    plot_counts,
    write_json,
    write_pg_table,
    write_table,
)
from dpsql.release.source import Bound, bounded_counts
from dpsql.release.spec import Source, check_epsilon, resolve_source


@dataclass(frozen=True)
class Written:
    """What a release job produced."""

    files: tuple[Path, ...]
    table: str | None
    rows: int
    release_id: int | None
    meta: dict[str, Any]


def keys_from_db(dsn: str) -> Any:
    """A resolver for ``keys_from: schema.table.column`` (a public table) over ``dsn``."""

    def resolve(ref: str) -> tuple[str, ...]:
        parts = ref.split(".")
        if len(parts) != 3:
            raise InvalidParameter(f"keys_from {ref!r} must be schema.table.column")
        col = pgsql.Identifier(parts[2])
        q = pgsql.SQL("SELECT DISTINCT {c}::text FROM {t} WHERE {c} IS NOT NULL ORDER BY 1").format(
            c=col, t=pgsql.Identifier(parts[0], parts[1])
        )
        with psycopg.connect(dsn) as conn:
            conn.read_only = True
            return tuple(str(r[0]) for r in conn.execute(q))

    return resolve


def resolve(
    policy: Policy,
    upstream: str,
    table: str,
    columns: Sequence[str],
    bins: dict[str, Any] | None,
) -> Source:
    return resolve_source(policy, table, columns, bins, keys_from_db(upstream))


def histogram_meta(plan: HistogramPlan, hist: Histogram, release_id: int | None) -> dict[str, Any]:
    src = plan.source
    levels = []
    for lv in plan.levels:
        m = lv.mechanism
        levels.append(
            {
                "level": lv.name,
                "mechanism": m.name,
                "sensitivity": str(m.sensitivity),
                "sensitivity_norm": "L1" if m.name == "laplace" else "L2",
                "epsilon": str(getattr(m, "epsilon", "")) or None,
                "rho": str(getattr(m, "rho", "")) or None,
                "noise_std": m.std,
                f"half_width_{plan.confidence:g}": m.half_width(plan.confidence),
            }
        )
    cost = plan.cost
    return {
        "kind": "dpsql histogram",
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "table": src.table,
        "axes": [a.describe() for a in src.axes],
        "cells": src.cells,
        "total": int(hist.counts.sum()),
        "privacy": {
            "epsilon": float(plan.epsilon),
            "delta": float(plan.delta),
            "rho": float(cost.rho) if cost.rho else None,
            "mechanism": plan.mechanism,
            "privacy_unit": src.private.privacy_unit,
            "contribution_bound": {
                "rows_per_unit_per_cell": plan.bound.rows,
                "cells_per_unit": plan.bound.cells,
            },
            "ledger_release_id": release_id,
        },
        "levels": levels,
        "budget_shares": {g: str(v) for g, v in plan.shares.items()},
        "split": plan.target,
        "predicted_error": {
            **plan.errors.as_json(),
            "formula": "GLS covariance, closed form (docs/releases.md, dpsql/release/levels.py); "
            "before projection to non-negative integers",
        },
        "confidence": plan.confidence,
        "error_bounds": (
            f"column error_{int(plan.confidence * 100)} of the table: half-width t of the "
            f"{plan.confidence:g} interval of each cell's noisy measurement, P(|noisy - true| <= t)"
            " >= confidence for each cell. The published counts are a post-processing (GLS "
            "consistency, projection to non-negative integers with the estimated total); it uses no "
            "data, and its mean error is no larger than the measurement's (tested)."
        ),
        "post_processing": "gls consistency + simplex projection + sum-preserving rounding",
    }


def histogram_columns(plan: HistogramPlan, counts: np.ndarray) -> list[OutColumn]:
    src = plan.source
    idx = np.indices(src.shape).reshape(len(src.shape), -1)
    cols = [
        OutColumn(a.name, "text", [a.labels[i] for i in idx[j]]) for j, a in enumerate(src.axes)
    ]
    hw = plan.cells_level.mechanism.half_width(plan.confidence)
    cols.append(OutColumn("count", "integer", counts.reshape(-1)))
    cols.append(OutColumn(f"error_{int(plan.confidence * 100)}", "numeric", [hw] * counts.size))
    return cols


def run_histogram(
    policy: Policy,
    upstream: str,
    *,
    table: str,
    columns: Sequence[str],
    epsilon: float,
    out_dir: Path,
    delta: float | None = None,
    bins: dict[str, Any] | None = None,
    levels: Sequence[str] = ("cells",),
    optimize_for: str = "balanced",
    weights: dict[str, Fraction] | None = None,
    analyst: str = "analyst",
    ledger: Any = None,
    to_table: str | None = None,
    replace: bool = False,
    console: Console | None = None,
    progress: bool = True,
) -> Written:
    """The whole ``dpsql release histogram`` job."""
    eps, delta_f = check_epsilon(epsilon, delta)
    target = check_target(policy, to_table) if to_table else None
    src = resolve(policy.for_analyst(analyst), upstream, table, columns, bins)
    plan = plan_histogram(
        src,
        Bound.for_source(src, "per_cell"),
        eps,
        delta_f,
        levels,
        policy.defaults.confidence,
        optimize_for,
        weights,
    )
    with Steps(["reserve budget", "count", "noise", "write"], console, progress) as steps:
        with steps.step("reserving the privacy budget"):
            charge = Charge(ledger, analyst, plan.cost, plan.fingerprint(), delta_f, plan.mechanism)
        with steps.step(f"counting {src.cells:,} cells in PostgreSQL"):
            counts = charge.before_noise(lambda: bounded_counts(upstream, src, plan.bound))
        with steps.step("adding noise and post-processing"):
            hist = release_histogram(plan, counts)
            del counts
            charge.commit()
        with steps.step("writing outputs"):
            written = _write_histogram(plan, hist, out_dir, upstream, target, replace, charge)
    return written


def _write_histogram(
    plan: HistogramPlan,
    hist: Histogram,
    out_dir: Path,
    upstream: str,
    target: str | None,
    replace: bool,
    charge: Charge,
) -> Written:
    meta = histogram_meta(plan, hist, charge.release_id)
    cols = histogram_columns(plan, hist.counts)
    files = write_table(out_dir, "histogram", cols)
    src = plan.source
    files.append(
        plot_counts(
            out_dir / "histogram.png",
            hist.counts,
            [a.labels for a in src.axes],
            [a.name for a in src.axes],
            f"{src.table}: DP histogram (epsilon={float(plan.epsilon):g})",
        )
    )
    if target:
        write_pg_table(upstream, target, cols, files[0], replace=replace)
        meta["table_written"] = target
    files.append(write_json(out_dir / "histogram.json", meta))
    return Written(tuple(files), target, int(hist.counts.size), charge.release_id, meta)


__all__ = ["Written", "keys_from_db", "run_histogram"]

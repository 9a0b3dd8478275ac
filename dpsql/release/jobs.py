"""End-to-end release jobs: resolve, plan, reserve, count in PostgreSQL, add noise, commit, write.

``run_histogram`` here, ``run_synthetic`` (:mod:`dpsql.release.synthetic`) and ``run_ranges``
(:mod:`dpsql.release.ranges`) are what the CLI calls, each with a :class:`Job` (what every release
takes) and its own options; tests call them too, with or without a ledger.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from dataclasses import replace as with_changes
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql as pgsql
from rich.console import Console

from dpsql.budget.api import BudgetLedger
from dpsql.dp.accounting import Cost
from dpsql.errors import DpsqlError, InvalidParameter
from dpsql.policy.model import Policy
from dpsql.release.charge import Charge, Steps
from dpsql.release.histogram import Histogram, HistogramPlan, plan_histogram, release_histogram
from dpsql.release.outputs import (
    OutColumn,
    check_target,
    check_writable,
    plot_counts,
    write_json,
    write_pg_table,
    write_table,
)
from dpsql.release.source import Bound, bounded_counts, counted
from dpsql.release.spec import Source, check_epsilon, resolve_source


@dataclass(frozen=True)
class Written:
    """What a release job produced."""

    files: tuple[Path, ...]
    table: str | None
    rows: int
    release_id: int | None
    meta: dict[str, Any]


@dataclass(frozen=True)
class Job:
    """What every release takes, whatever it publishes: the private ``table`` on ``upstream``
    under ``policy``, the privacy parameters, ``bins`` of its numeric columns, who is charged
    (``analyst`` on ``ledger``; None: nothing is recorded, for library use), where the outputs go
    (``out_dir``, and ``to_table`` in PostgreSQL) and the progress display."""

    policy: Policy
    upstream: str
    table: str
    epsilon: float
    out_dir: Path
    delta: float | None = None
    bins: dict[str, Any] | None = None
    analyst: str = "analyst"
    ledger: BudgetLedger | None = None
    to_table: str | None = None
    replace: bool = False
    console: Console | None = None
    progress: bool = True
    # the numbers for a policy's ``auto`` contribution bounds (dpsql.release.source): R, G
    rows_per_unit: int | None = None
    cells_per_unit: int | None = None
    charges: list[Charge] = field(default_factory=list, compare=False, repr=False)
    ledger_place: str | None = None  # where the ledger is, said when it is charged

    def target(self) -> str | None:
        """The checked ``to_table``, or None: a table of the policy, one that exists (without
        ``replace``) or one the upstream won't let us write is refused before anything is
        charged."""
        if not self.to_table:
            return None
        name = check_target(self.policy, self.to_table)
        check_writable(self.upstream, name, replace=self.replace)
        return name

    def source(self, columns: Sequence[str]) -> Source:
        """``columns`` of the table resolved under the analyst's view of the policy, with the
        job's numbers for its ``auto`` contribution bounds (a fixed one is the policy's: a
        number given for it is refused)."""
        src = resolve(self.policy.for_analyst(self.analyst), self.upstream, self.table, columns,
                      self.bins)  # fmt: skip
        p, update = src.private, {}
        for option, key, n in (
            ("--rows-per-unit", "max_rows_per_unit", self.rows_per_unit),
            ("--cells-per-unit", "max_groups_per_unit", self.cells_per_unit),
        ):
            if n is None:
                continue
            if getattr(p, key) != "auto" or p.row_privacy:
                raise InvalidParameter(
                    f"{option} {n}: {src.table}'s {key} is not auto in the policy "
                    f"({'privacy_unit: row' if p.row_privacy else getattr(p, key)})",
                    hint=f"drop {option}: the policy's number is used",
                )
            if n < 1:
                raise InvalidParameter(f"{option} must be at least 1, got {n}",
                                       hint=f"pass {option} 1 or more")  # fmt: skip
            update[key] = n
        return with_changes(src, private=p.model_copy(update=update)) if update else src

    def steps(self, names: list[str]) -> Steps:
        """The progress display over the release's named steps."""
        return Steps(names, self.console, self.progress)

    def charge(
        self, cost: Cost, fingerprint: str, delta: Fraction, label: str, *, statement: str
    ) -> Charge:
        """Reserve ``cost`` for the analyst (nothing when there is no ledger); ``statement``
        says what was released in the analyst's ``dpsql.history`` ("release histogram of ...").
        The charge is kept in :attr:`charges` (the CLI says what it used of each budget)."""
        if self.ledger is not None and self.ledger_place and self.console is not None:
            # said when it happens: a refusal before it charges nothing and says nothing of it
            self.console.print(
                f"charging the ledger in {self.ledger_place} (analyst {self.analyst})",
                markup=False,
                highlight=False,
            )
        charge = Charge(self.ledger, self.analyst, cost, fingerprint, delta, label, statement)
        self.charges.append(charge)
        return charge

    def publish(
        self,
        kind: str,
        target: str | None,
        cols: Sequence[OutColumn],
        files: Sequence[Path],
        meta: dict[str, Any],
    ) -> tuple[Path, ...]:
        """A release's last outputs: the table ``target`` in PostgreSQL (from the CSV
        ``files[0]``; ``meta`` then names it) and ``<kind>.json`` with ``meta``; all its files."""
        if target:
            try:
                write_pg_table(self.upstream, target, cols, files[0], replace=self.replace)
            except DpsqlError as e:
                meta["table_written"] = None
                sidecar = write_json(self.out_dir / f"{kind}.json", meta)
                release = (meta.get("privacy") or {}).get("ledger_release_id")
                e.detail = "; ".join(
                    d
                    for d in (
                        e.detail,
                        f"the release was charged (ledger release #{release}) and its files "
                        f"were written: {', '.join(str(f) for f in (*files, sidecar))}",
                    )
                    if d
                )
                e.hint = f"write the table from {files[0]} (COPY ... FROM with CSV HEADER)"
                raise
            meta["table_written"] = target
        return (*files, write_json(self.out_dir / f"{kind}.json", meta))


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


def meta_header(kind: str, src: Source) -> dict[str, Any]:
    """The first entries of every release's JSON sidecar: what, when, from which table, axes."""
    return {
        "kind": kind,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "table": src.table,
        "axes": [a.describe() for a in src.axes],
    }


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
        **meta_header("dpsql histogram", src),
        "cells": src.cells,
        "total": int(hist.counts.sum()),
        "privacy": {
            "epsilon": float(plan.epsilon),
            "delta": float(plan.delta),
            "rho": float(cost.rho) if cost.rho else None,
            "mechanism": plan.mechanism,
            "privacy_unit": src.private.privacy_unit,
            "contribution_bound": (
                {"rows_per_unit_per_cell": plan.bound.rows, "cells_per_unit": plan.bound.cells}
                if plan.bound.mode == "per_cell"
                else {"rows_per_unit": plan.bound.rows}  # a declared total (Bound._with_total)
            ),
            "counts": counted(src, plan.bound),
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
    job: Job,
    columns: Sequence[str],
    *,
    levels: Sequence[str] = ("cells",),
    optimize_for: str = "balanced",
    weights: dict[str, Fraction] | None = None,
) -> Written:
    """The whole ``dpsql release histogram`` job."""
    eps, delta_f = check_epsilon(job.epsilon, job.delta)
    target = job.target()
    src = job.source(columns)
    plan = plan_histogram(
        src,
        Bound.for_source(src, "per_cell"),
        eps,
        delta_f,
        levels,
        job.policy.defaults.confidence,
        optimize_for,
        weights,
    )
    with job.steps(["reserve budget", "count", "noise", "write"]) as steps:
        with steps.step("reserving the privacy budget"):
            charge = job.charge(
                plan.cost,
                plan.fingerprint(),
                delta_f,
                plan.mechanism,
                statement=f"release histogram of {src.table} ({', '.join(a.name for a in src.axes)})",
            )
        with steps.step(f"counting {src.cells:,} cells in PostgreSQL"):
            counts = charge.before_noise(lambda: bounded_counts(job.upstream, src, plan.bound))
        with steps.step("adding noise and post-processing"):
            hist = release_histogram(plan, counts)
            del counts
            charge.commit()
        with steps.step("writing outputs"):
            written = _write_histogram(plan, hist, job, target, charge)
    return written


def _write_histogram(
    plan: HistogramPlan, hist: Histogram, job: Job, target: str | None, charge: Charge
) -> Written:
    meta = histogram_meta(plan, hist, charge.release_id)
    cols = histogram_columns(plan, hist.counts)
    out_dir = job.out_dir
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
    written = job.publish("histogram", target, cols, files, meta)
    return Written(written, target, int(hist.counts.size), charge.release_id, meta)


__all__ = ["Job", "Written", "keys_from_db", "run_histogram"]

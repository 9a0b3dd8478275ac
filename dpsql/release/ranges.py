"""``dpsql release ranges``: a table of consistent bin counts for range queries over one column.

The column's ordered bins (declared keys in their declared order, or bins of its bounds) are the
leaves of the tree of :mod:`dpsql.release.hierarchy`. The published table has one row per bin:
``bin`` (0-based), ``label``, ``count`` (the consistent estimate, real-valued: a range's count is
the sum of its bins, unbiased, so values are not rounded or clipped) and ``cumulative`` (the
running sum, so a range [a, b] is ``cumulative(b) - cumulative(a - 1)``). Declared in the policy's
``public_tables``, analysts query it through dpsql at no further cost.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpsql.errors import InvalidParameter
from dpsql.release.hierarchy import (
    BRANCHINGS,
    TreePlan,
    consistent_leaves,
    exact_size,
    flat_range_variance,
    mean_range_variance,
    measure_tree,
    plan_tree,
)
from dpsql.release.jobs import Job, Written, meta_header
from dpsql.release.outputs import OutColumn, write_table
from dpsql.release.source import Bound, bounded_counts, counted
from dpsql.release.spec import Source, check_epsilon


def run_ranges(job: Job, column: str, *, branching: int | None = None) -> Written:
    """The whole ``dpsql release ranges`` job over the ordered ``column``."""
    eps, delta_f = check_epsilon(job.epsilon, job.delta)
    if branching is not None and branching not in BRANCHINGS:
        raise InvalidParameter(
            f"--branching must be one of {', '.join(map(str, BRANCHINGS))}",
            hint="or omit it: the branching with the smallest mean range error is chosen",
        )
    target = job.target()
    src = job.source([column])
    bound = Bound.for_source(src, "per_unit")
    plan = plan_tree(src.shape[0], eps, delta_f, bound.rows, branching)
    shape = "flat" if plan.flat else f"B={plan.branching}"
    fingerprint = f"release ranges {src.table} [{src.axes[0].name}] {shape}"
    with job.steps(["reserve budget", "count", "noise", "write"]) as steps:
        with steps.step("reserving the privacy budget"):
            charge = job.charge(
                plan.cost,
                fingerprint,
                delta_f,
                "hierarchy",
                statement=f"release ranges of {src.table} ({src.axes[0].name})",
            )
        with steps.step(f"counting {plan.n:,} bins in PostgreSQL"):
            counts = charge.before_noise(lambda: bounded_counts(job.upstream, src, bound))
        with steps.step("measuring the tree and making it consistent"):
            noisy = measure_tree(plan, counts)
            del counts
            charge.commit()
            leaves = consistent_leaves(plan, noisy)
        with steps.step("writing outputs"):
            cols = _columns(src, leaves)
            files = write_table(job.out_dir, "ranges", cols)
            meta = _meta(src, plan, bound, eps, delta_f, charge.release_id)
            written = job.publish("ranges", target, cols, files, meta)
    return Written(written, target, plan.n, charge.release_id, meta)


def _columns(src: Source, leaves: np.ndarray) -> list[OutColumn]:
    axis = src.axes[0]
    return [
        OutColumn("bin", "integer", list(range(len(leaves)))),
        OutColumn("label", "text", list(axis.labels)),
        OutColumn("count", "numeric", [float(v) for v in leaves]),
        OutColumn("cumulative", "numeric", [float(v) for v in np.cumsum(leaves)]),
    ]


def _meta(
    src: Source,
    plan: TreePlan,
    bound: Bound,
    eps: Any,
    delta: Any,
    release_id: int | None,
) -> dict[str, Any]:
    exact = exact_size(plan)
    tree_rmse = math.sqrt(mean_range_variance(plan)) if exact else None
    flat = plan_tree(1, eps, delta, bound.rows, 2).mechanism  # one level: the whole budget
    return {
        **meta_header("dpsql ranges", src),
        "bins": plan.n,
        "privacy": {
            "epsilon": float(eps),
            "delta": float(delta),
            "rho": float(plan.cost.rho) if plan.cost.rho else None,
            "mechanism": (
                f"flat histogram ({plan.mechanism.name} noise per bin): with this few bins no "
                "tree has a smaller mean range error"
                if plan.flat
                else f"hierarchy (Hay et al. 2010): {plan.mechanism.name} noise on every node "
                f"of a {plan.branching}-ary tree of height {plan.height}, 1/{plan.levels} of the "
                "budget per level"
            ),
            "privacy_unit": src.private.privacy_unit,
            "contribution_bound": {"rows_per_unit": bound.rows},
            "counts": counted(src, bound),
            "ledger_release_id": release_id,
        },
        "node_noise_std": plan.mechanism.std,
        "range_error": {
            "rmse_over_all_ranges": tree_rmse,
            "flat_histogram_rmse_over_all_ranges": math.sqrt(flat_range_variance(plan.n, flat)),
            "note": "root-mean-square error of a range count, averaged over all n(n+1)/2 ranges "
            "of bins (exact, from the linear estimator); a flat histogram at the same budget "
            "for comparison",
        },
        "query": "a range [a, b] of bins: SELECT sum(count) FROM <table> WHERE bin BETWEEN a "
        "AND b, or cumulative(b) - cumulative(a - 1)",
        "post_processing": "least-squares consistency (two passes); counts are real-valued "
        "and may be negative for sparse bins: ranges are unbiased sums",
    }

"""``dpsql release synthetic``: synthetic rows with the source's schema, from AIM or MST + Private-PGM.

Each chosen column becomes a public axis (:mod:`dpsql.release.spec`: keys, or bins of the declared
bounds); a synthetic value is the key, or a uniform value within its bin (an integer for integer
columns). The cost is rho-zCDP with rho = epsilon_to_rho(epsilon, delta), so (epsilon, delta)-DP;
it is reserved on the ledger before the counting query and committed as soon as the noisy
marginals exist, before anything is fitted or written. See :mod:`dpsql.release.aim` (the default)
and :mod:`dpsql.release.mst` for the mechanisms, :mod:`dpsql.release.compress` for the merging of
rare values both do first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.dp import rng
from dpsql.dp.accounting import epsilon_to_rho
from dpsql.errors import InvalidParameter
from dpsql.policy.model import Policy
from dpsql.release.charge import Charge
from dpsql.release.compare import (
    IF_WORSE,
    Comparison,
    decide,
)
from dpsql.release.jobs import Job, Written, meta_header
from dpsql.release.marginals import Synthesis, marginal
from dpsql.release.outputs import (
    OutColumn,
    plot_marginals,
    write_json,
    write_private_json,
    write_table,
)
from dpsql.release.quality import QualityReport, quality_report
from dpsql.release.source import Bound, bounded_cells
from dpsql.release.spec import Source, check_epsilon
from dpsql.release.synthesis import (
    SYNTHESIZERS,
    SyntheticPlan,
    compare_result,
    fit_result,
    make_plan,
    run_plan,
    sample_result,
)

MAX_ROWS = 50_000_000


@dataclass(frozen=True)
class SyntheticRelease:
    written: Written
    quality: QualityReport
    comparison: Comparison | None
    published: str  # "model" or "baseline"
    synthesis: Synthesis  # what was measured (released values only)
    model: Any  # the fitted graphical model (post-processing of ``synthesis``)


def _delta(policy: Policy, delta: float | None) -> float:
    d = policy.defaults.delta if delta is None else delta
    if d <= 0:
        raise InvalidParameter(
            "synthetic data is measured with Gaussian noise (zCDP) and needs a delta > 0",
            hint="pass --delta 1e-6 (or set defaults.delta in the policy)",
        )
    return d


def _check_paths(out_dir: Path, quality_path: Path | None) -> None:
    if quality_path is None:
        return
    q, o = quality_path.resolve(), out_dir.resolve()
    if q == o or o in q.parents:
        raise InvalidParameter(
            f"the quality report {quality_path} would be written inside the release directory",
            hint="the report is computed on the real data and must not be published: write it "
            "elsewhere, e.g. --quality-report ~/quality.json",
        )


def run_synthetic(
    job: Job,
    columns: Sequence[str],
    *,
    rows: int | None = None,
    quality_path: Path | None = None,
    iters: int = 1000,
    synthesizer: str = "aim",
    compress: bool = True,
    if_worse: str = "baseline",
) -> SyntheticRelease:
    """The whole ``dpsql release synthetic`` job; returns what was written and the owner report."""
    if synthesizer not in SYNTHESIZERS:
        raise InvalidParameter(
            f"unknown synthesizer {synthesizer!r}", hint="use --synthesizer aim (default) or mst"
        )
    if if_worse not in IF_WORSE:
        raise InvalidParameter(
            f"unknown --if-worse {if_worse!r}", hint="use baseline, stop or publish"
        )
    eps, delta_f = check_epsilon(job.epsilon, _delta(job.policy, job.delta))
    if rows is not None and not 1 <= rows <= MAX_ROWS:
        raise InvalidParameter(f"--rows must be in [1, {MAX_ROWS:,}]", hint="or omit it")
    target = job.target()
    _check_paths(job.out_dir, quality_path)
    src = job.source(columns)
    bound = Bound.for_source(src, "per_unit")
    names = [a.name for a in src.axes]
    plan = make_plan(
        synthesizer, names, src.shape, epsilon_to_rho(eps, delta_f), bound.rows, compress
    )
    steps = ["reserve", "count", "measure", "fit", "compare", "sample", "write"]
    with job.steps(steps) as st:
        with st.step("reserving the privacy budget"):
            charge = job.charge(
                plan.cost,
                _fingerprint(src),
                delta_f,
                synthesizer,
                statement=f"release synthetic ({synthesizer}) of {src.table} ({', '.join(names)})",
            )
        with st.step("counting bounded cells in PostgreSQL"):
            idx, n = charge.before_noise(lambda: bounded_cells(job.upstream, src, bound))
        with st.step(f"measuring and selecting marginals ({synthesizer.upper()})"):
            result = run_plan(plan, idx, n)
            charge.commit()
        with st.step("fitting the graphical model (Private-PGM)"):
            model = fit_result(result, iters)
        with st.step("comparing with independent 1-way marginals (DP)"):
            comparison = compare_result(plan, result, model, idx, n)
            published = decide(comparison, if_worse)
        with st.step("sampling synthetic rows"):
            synth = sample_result(result, model, rows, published == "baseline")
        quality = quality_report(
            plan.model.names, plan.model.shape, idx, n, synth, [m.noisy for m in result.one_way]
        )
        del idx, n
        with st.step("writing outputs"):
            written = _write(src, plan, result, synth, eps, delta_f, job, target, charge)
            written.meta["comparison"] = None if comparison is None else comparison.as_json()
            written.meta["published"] = published
            write_json(job.out_dir / "synthetic.json", written.meta)
    if quality_path is not None:
        write_private_json(quality_path, quality.as_json())
    return SyntheticRelease(written, quality, comparison, published, result, model)


def _fingerprint(src: Source) -> str:
    axes = ";".join(f"{a.name}:{a.keys or a.edges}" for a in src.axes)
    return f"release synthetic {src.table} [{axes}]"


def synthetic_columns(src: Source, synth: np.ndarray) -> list[OutColumn]:
    """Typed synthetic values: the key of categorical axes, a uniform value within numeric bins."""
    out = []
    for j, a in enumerate(src.axes):
        if a.edges is not None:
            out.append(OutColumn(a.name, a.family, within_bins(a.edges, a.family, synth[:, j])))
            continue
        vals = np.empty(a.size, dtype=object)
        vals[:] = a.values()
        out.append(OutColumn(a.name, a.family, vals[synth[:, j]].tolist()))
    return out


def within_bins(edges: Sequence[float], family: str, bins: np.ndarray) -> np.ndarray:
    """A uniform value in [edges[b], edges[b+1]) per bin index b (integers for integer columns).

    Post-processing of the released bins (not privacy noise); drawn from :mod:`dpsql.dp.rng`
    because that is the package's only random source.
    """
    e = np.asarray(edges, dtype=np.float64)
    lo, hi = e[bins], e[bins + 1]
    if family == "integer":
        first = np.ceil(lo).astype(np.int64)
        count = np.ceil(hi).astype(np.int64) - first
        mid = np.floor((lo + hi) / 2).astype(np.int64)  # a bin holding no integer: its middle
        if not len(bins):
            return np.asarray(first)
        draws = first + rng.uniform_below(np.maximum(count, 1))
        return np.asarray(np.where(count >= 1, draws, mid))
    u = rng.uniform_below(2**52, size=len(bins)).astype(np.float64) / 2**52
    return np.asarray(lo + (hi - lo) * u)


_MECHANISM = {
    "aim": "AIM (adaptive workload-aware selection of 1- and 2-way marginals): discrete Gaussian "
    "marginals + exponential-mechanism selection, rare values merged by noisy 1-way counts",
    "mst": "MST: discrete Gaussian marginals + exponential-mechanism tree selection, rare values "
    "merged by noisy 1-way counts",
}


def _meta(
    src: Source,
    plan: SyntheticPlan,
    result: Synthesis,
    rows: int,
    eps: Fraction,
    delta: Fraction,
    release_id: int | None,
) -> dict[str, Any]:
    names = plan.model.names
    kind = plan.synthesizer
    comp = result.compression
    return {
        **meta_header("dpsql synthetic", src),
        "rows": rows,
        "values": "categorical: the key; binned numeric: uniform within the bin (integers for "
        "integer columns), a post-processing of the released bin",
        "privacy": {
            "epsilon": float(eps),
            "delta": float(delta),
            "rho": float(plan.cost.rho),
            "mechanism": _MECHANISM[kind],
            "synthesizer": kind,
            "privacy_unit": src.private.privacy_unit,
            "contribution_bound": {"rows_per_unit": plan.model.rows_bound},
            "rho_comparison": None if plan.compare is None else float(plan.compare.rho),
            "rho_comparison_used_for": None
            if plan.compare is None
            else (
                "the 1-way marginals (small data: nothing to compare)"
                if result.small
                else "the comparison with the baseline"
            ),
            "ledger_release_id": release_id,
        },
        "selected": [[names[c] for c in cl] for cl in result.selected],
        "small_data": result.small,
        "merged_values": {
            a.name: [a.labels[v] for v in comp.merged(c)]
            for c, a in enumerate(src.axes)
            if comp.merged(c).size
        },
        "measurements": [
            {
                "marginal": [names[c] for c in m.clique],
                "noise_std": m.std,
                "half_width_0.95": m.half_width,
            }
            for m in result.measurements
        ],
        "inference": f"Private-PGM (mbi {_version('mbi')}), MirrorDescent on the compressed "
        "domain; rows sampled from the fitted model, merged values drawn in proportion to their "
        "noisy counts (post-processing)",
    }


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "?"


def _write(
    src: Source,
    plan: SyntheticPlan,
    result: Synthesis,
    synth: np.ndarray,
    eps: Fraction,
    delta: Fraction,
    job: Job,
    target: str | None,
    charge: Charge,
) -> Written:
    meta = _meta(src, plan, result, len(synth), eps, delta, charge.release_id)
    cols = synthetic_columns(src, synth)
    out_dir = job.out_dir
    files = write_table(out_dir, "synthetic", cols)
    ones = np.ones(len(synth), dtype=np.int64)
    margs = [
        (a.name, a.labels, marginal(synth, ones, plan.model.shape, (j,)))
        for j, a in enumerate(src.axes)
    ]
    files.append(
        plot_marginals(
            out_dir / "synthetic.png",
            margs,
            f"{src.table}: synthetic data (epsilon={float(eps):g})",
        )
    )
    written = job.publish("synthetic", target, cols, files, meta)
    return Written(written, target, len(synth), charge.release_id, meta)

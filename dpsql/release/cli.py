"""``dpsql release histogram|synthetic``: subcommands registered into the main CLI.

Both load the policy, open the ledger (the one ``dpsql serve`` charges: ``--ledger``, else
DPSQL_LEDGER, else ``server.ledger``, else the upstream), charge the release to ``--analyst``
and the dataset, then write CSV, Parquet, a JSON sidecar and a PNG to
``--out`` and, with ``--to-table``, a PostgreSQL table that analysts may query freely.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from dpsql.release.jobs import Job

console = Console(
    width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000
)  # piped: no 80-column cut (dpsql.cli.PIPED_WIDTH)


def register(sub: Any) -> None:
    """Add ``release`` with its ``histogram``, ``synthetic`` and ``ranges`` subcommands."""
    rel = sub.add_parser(
        "release", help="publish a DP histogram, synthetic dataset or range-count table"
    )
    rsub = rel.add_subparsers(dest="release_command", required=True)

    h = rsub.add_parser("histogram", help="noisy counts per cell over keys or bins")
    _common(h)
    h.add_argument(
        "--levels",
        default="cells",
        help="what to measure, comma-separated among total, marginals, cells (the cells always; "
        "with several, the budget is split by --optimize-for and the levels are made consistent)",
    )
    h.add_argument(
        "--optimize-for",
        choices=["balanced", "cells", "marginals", "total", "even"],
        default="balanced",
        help="with several levels: split the budget to minimize the error of the cells, the "
        "marginals or the total (closed-form error of the consistent estimate, docs/releases.md); "
        "balanced (default): the split whose worst level is closest to that level's own best; "
        "even: equal shares",
    )
    h.add_argument(
        "--weights",
        help="explicit relative shares instead, e.g. total=1,marginals=1,cells=8",
    )
    h.set_defaults(func=cmd_histogram)

    s = rsub.add_parser("synthetic", help="synthetic rows from private marginals (AIM or MST)")
    _common(s)
    s.add_argument(
        "--synthesizer",
        choices=["aim", "mst"],
        default="aim",
        help="AIM (default: adaptive, workload-aware selection of 1- and 2-way marginals) or MST "
        "(a tree of 2-way marginals)",
    )
    s.add_argument(
        "--if-worse",
        choices=["baseline", "stop", "publish"],
        default="baseline",
        help="when a DP comparison (5%% of the budget) says the model would not beat independent "
        "1-way marginals: publish rows with independent columns instead (default), stop before "
        "writing anything, or publish the model anyway",
    )
    s.add_argument(
        "--no-compress",
        action="store_true",
        help="don't merge rare values (by their noisy 1-way counts) before modelling",
    )
    s.add_argument("--rows", type=int, help="number of rows (default: the noisy total)")
    s.add_argument(
        "--quality-report",
        type=Path,
        help="write the owner-only quality report (computed on the REAL data; never publish it) "
        "to this file, mode 0600",
    )
    s.add_argument("--iters", type=int, default=1000, help="Private-PGM iterations")
    s.add_argument(
        "--no-table",
        action="store_true",
        help="don't write the PostgreSQL table (default: --to-table or releases.<table>_synthetic)",
    )
    s.set_defaults(func=cmd_synthetic)

    r = rsub.add_parser(
        "ranges",
        help="consistent bin counts over one ordered column for range queries (hierarchy)",
    )
    _common(r, columns=False)
    r.add_argument(
        "--branching",
        type=int,
        help="the tree's branching factor (2, 4, 8, 16 or 32; default: the one with the "
        "smallest mean range error for this many bins)",
    )
    r.set_defaults(func=cmd_ranges)


def _common(p: argparse.ArgumentParser, columns: bool = True) -> None:
    env = os.environ
    p.add_argument("--policy", required="DPSQL_POLICY" not in env, default=env.get("DPSQL_POLICY"))
    p.add_argument("--upstream", help="DSN of the data (else DPSQL_UPSTREAM, else server.upstream)")
    p.add_argument(
        "--ledger",
        help="DSN of the budget ledger: the one `dpsql serve` charges (else DPSQL_LEDGER, "
        "else server.ledger, else the upstream)",
    )
    p.add_argument("--table", required=True, help="the private table (schema.table)")
    if columns:
        p.add_argument("--columns", required=True, help="comma-separated columns to release")
    else:
        p.add_argument("--column", required=True, help="the ordered column (keys or bounds)")
    p.add_argument(
        "--bins",
        action="append",
        default=[],
        metavar="COL=WIDTH|COL=E0,E1,..",
        help="bins of a numeric column: a width over its declared bounds, or increasing edges "
        "(default: 10 bins over the bounds); repeat for several columns",
    )
    p.add_argument(
        "--rows-per-unit",
        type=int,
        metavar="R",
        help="for a table whose max_rows_per_unit is auto: the rows of one privacy unit counted "
        "(in each cell for a histogram, in all for synthetic data and ranges); more are left out",
    )
    p.add_argument(
        "--cells-per-unit",
        type=int,
        metavar="G",
        help="histogram, for a table whose max_groups_per_unit is auto: the cells one privacy "
        "unit counts in at most",
    )
    p.add_argument("--epsilon", type=float, required=True)
    p.add_argument("--delta", type=float, help="delta (histogram: > 0 selects Gaussian noise)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--to-table", help="also write the release to this PostgreSQL table")
    p.add_argument("--replace", action="store_true", help="replace --to-table if it exists")
    p.add_argument(
        "--analyst",
        default=env.get("DPSQL_ANALYST"),
        help="the analyst whose budget is charged (else DPSQL_ANALYST, else the policy's only "
        "analyst)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


_EXTRA = ("pyarrow", "pyarrow.csv", "pyarrow.parquet", "matplotlib")  # every release's writers


def preflight(out: Path, *, synthetic: bool = False) -> None:
    """What a release needs that no data decides, checked before the ledger is charged: the
    ``release`` extra's modules (a missing one was a ModuleNotFoundError traceback after the
    charge, charged again on every retry) and an output directory that can be written.

    Raises:
        FeatureNotSupported: a module of the extra is missing (0A000).
        IoError: ``out`` cannot be created or written (58030).
    """
    import importlib
    import importlib.util

    from dpsql.errors import FeatureNotSupported, IoError

    missing = []
    for name in _EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name.split(".")[0])
    if synthetic:
        try:
            found = importlib.util.find_spec("mbi") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append("mbi")
    if missing:
        raise FeatureNotSupported(
            f"dpsql release needs {', '.join(dict.fromkeys(missing))}, which is not installed: "
            "nothing was charged",
            hint="install the release extra: pip install 'dpsql[release]'",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".dpsql-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise IoError(
            f'could not write to the output directory "{out}": {e.strerror or e}: '
            "nothing was charged",
            hint="choose a directory you can write with --out",
        ) from None


def analyst_of(policy: Any, name: str | None) -> str:
    """The analyst a release is charged to: ``--analyst`` (or DPSQL_ANALYST), one of the
    policy's, else its only one (newcomer22 #7: without it the release charged 'analyst' and refused with 53400,
    "add analysts.analyst.budget to the policy", as if a budget were exhausted).

    Raises:
        InvalidParameter: 22023, no analyst given (the policy's analysts named).
        UndefinedObject: 42704, a name the policy lacks (the closest one suggested).
    """
    import difflib

    from dpsql.errors import InvalidParameter, UndefinedObject

    names = sorted(policy.analysts)
    listed = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    if not name and len(names) == 1:
        return str(names[0])  # the policy's only analyst (the charge line names it)
    if not name:
        raise InvalidParameter(
            "dpsql release charges an analyst's budget: say whose with --analyst NAME (or "
            "DPSQL_ANALYST): nothing was charged",
            detail=f"the policy's analysts: {listed}" if names else "the policy has no analysts",
            hint=f"e.g. --analyst {names[0]}" if names else "add an analyst to the policy",
        )
    if name not in policy.analysts:
        near = difflib.get_close_matches(name, names, n=1)
        raise UndefinedObject(
            f"no analyst {name!r} in the policy: nothing was charged",
            detail=f"the policy's analysts: {listed}" if names else "the policy has no analysts",
            hint=f"did you mean --analyst {near[0]}?"
            if near
            else "pass --analyst NAME with "
            "one of them (or add the analyst and its budget to the policy)",
        )
    return name


@contextmanager
def _job(args: argparse.Namespace, **changes: Any) -> Iterator[Job]:
    """The release's common options as a :class:`~dpsql.release.jobs.Job` (``changes``
    replacing some), its ledger open until the end: the one ``dpsql serve`` and ``dpsql query``
    charge (``--ledger``, else DPSQL_LEDGER, else ``server.ledger``, else the upstream)."""
    from dpsql.budget.ledger import Ledger
    from dpsql.policy import load_policy
    from dpsql.policy.settings import upstream_and_ledger
    from dpsql.release.jobs import Job
    from dpsql.release.spec import parse_bins

    preflight(args.out, synthetic=args.func is cmd_synthetic)  # before any budget is charged
    bins = parse_bins(args.bins)
    policy = load_policy(args.policy)
    args.analyst = analyst_of(policy, args.analyst)  # before any charge
    upstream, where = upstream_and_ledger(
        {"upstream": args.upstream, "ledger": args.ledger},
        os.environ,
        policy.server,
        command="dpsql release",
    )
    ledger = Ledger.open(where, policy)
    try:
        yield replace(
            Job(
                policy,
                upstream,
                table=args.table,
                epsilon=args.epsilon,
                out_dir=args.out,
                delta=args.delta,
                bins=bins,
                analyst=args.analyst,
                ledger=ledger,
                to_table=args.to_table,
                replace=args.replace,
                console=console,
                progress=not args.no_progress,
                rows_per_unit=args.rows_per_unit,
                cells_per_unit=args.cells_per_unit,
                ledger_place=_place(where),
            ),
            **changes,
        )
    finally:
        ledger.close()


def cmd_histogram(args: argparse.Namespace) -> int:
    from dpsql.release.histogram import parse_levels, parse_weights
    from dpsql.release.jobs import run_histogram

    columns = args.columns.split(",")
    with _job(args) as job:
        w = run_histogram(
            job,
            columns,
            levels=parse_levels(args.levels, len(columns)),
            optimize_for=args.optimize_for,
            weights=parse_weights(args.weights) if args.weights else None,
        )
    _print_written(w, f"{w.rows} cells")
    _print_charged(job, w)
    return 0


def cmd_synthetic(args: argparse.Namespace) -> int:
    from dpsql.release.synthetic import run_synthetic

    to_table = None if args.no_table else (args.to_table or _default_table(args.table))
    with _job(args, to_table=to_table) as job:
        r = run_synthetic(
            job,
            args.columns.split(","),
            rows=args.rows,
            quality_path=args.quality_report,
            iters=args.iters,
            synthesizer=args.synthesizer,
            compress=not args.no_compress,
            if_worse=args.if_worse,
        )
    _print_written(r.written, f"{r.written.rows:,} synthetic rows")
    _print_charged(job, r.written)
    _print_comparison(r.comparison, r.published)
    q = r.quality
    t = Table(
        title="Quality (OWNER ONLY: computed on the real data, not private; do not publish)",
        title_justify="left",
    )
    for h in ("marginal", "TVD synthetic", "TVD independent baseline"):
        t.add_column(h, justify="right")
    for k, (a, b) in {**q.one_way, **q.two_way}.items():
        t.add_row(k, f"{a:.4f}", f"{b:.4f}")
    s = q.summary()
    t.add_row(
        "mean 1-way", f"{s['mean_1way_tvd_synthetic']:.4f}", f"{s['mean_1way_tvd_baseline']:.4f}"
    )
    t.add_row(
        "mean 2-way", f"{s['mean_2way_tvd_synthetic']:.4f}", f"{s['mean_2way_tvd_baseline']:.4f}"
    )
    console.print(t)
    return 0


def _print_comparison(c: Any, published: str) -> None:
    if c is None:
        return
    verdict = "beats" if c.model_better else "does NOT beat"
    console.print(
        f"DP comparison: the model {verdict} independent 1-way marginals "
        f"({c.gap_rows:+.1f} ± {c.half_width:.1f} rows closer per column pair, 95%)"
    )
    if published == "baseline":
        console.print(
            "[yellow]published rows with independent columns (the baseline) instead of the "
            "model[/yellow] (--if-worse publish to publish the model, stop to write nothing)"
        )
    elif not c.model_better:
        console.print("[yellow]published the model anyway (--if-worse publish)[/yellow]")


def cmd_ranges(args: argparse.Namespace) -> int:
    from dpsql.release.ranges import run_ranges

    with _job(args) as job:
        w = run_ranges(job, args.column, branching=args.branching)
    _print_written(w, f"{w.rows:,} bins")
    _print_charged(job, w)
    e = w.meta["range_error"]
    if e["rmse_over_all_ranges"] is not None:
        console.print(
            f"range counts: RMSE {e['rmse_over_all_ranges']:.1f} over all ranges "
            f"(a flat histogram at the same budget: {e['flat_histogram_rmse_over_all_ranges']:.1f})"
        )
    return 0


def _place(dsn: str) -> str:
    """Where a DSN points, without its password: 'database "x" on host:port'."""
    import psycopg

    try:
        d = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the given database"
    host = d.get("host") or d.get("hostaddr") or "localhost"
    port = d.get("port") or "5432"
    return f'database "{d.get("dbname") or d.get("user") or "postgres"}" on {host}:{port}'


def _default_table(table: str) -> str:
    """releases.<table>_synthetic (a plain identifier; anything odd is caught by the checks)."""
    return f"releases.{table.split('.')[-1].strip().lower()}_synthetic"


def _print_written(w: Any, what: str) -> None:
    p = w.meta["privacy"]
    console.print(
        f"[green]released[/green] {what}: epsilon={p['epsilon']:g}, delta={p['delta']:g}, "
        f"{p['mechanism']}; ledger release #{w.release_id}"
    )
    if p.get("counts"):
        console.print(f"  count = {p['counts']}", markup=False)
    for f in w.files:
        console.print(f"  {f}")
    if w.table:
        console.print(f"  table {w.table} (declare it in public_tables to serve it through dpsql)")


def charged_words(job: Job, privacy: dict[str, Any]) -> list[str]:
    """What the job's charges used of each budget, one line each (a first Gaussian release's
    one-time conversion to Renyi accounting included: docs/budget.md, "Units"); ``privacy``:
    the release's ``privacy`` metadata (its epsilon and delta)."""
    from fractions import Fraction

    from dpsql.budget.format import fmt_up

    out = []
    eps = Fraction(privacy["epsilon"]).limit_denominator(10**12)
    for c in job.charges:
        r = c.reservation
        if r is None:
            continue
        own = f"epsilon {privacy['epsilon']:g}"
        if privacy.get("delta"):
            own += f", delta {privacy['delta']:g}"
        if r.cost.rho:
            own += f": zCDP rho {fmt_up(r.cost.rho)}"
        parts = []
        for kind, name, more, first in r.used:
            why = (
                " (its one-time conversion to Renyi accounting: the first Gaussian release of "
                'the period moved this budget to it, docs/budget.md "Units")'
                if first and more > eps + Fraction(1, 10**9)
                else ""
            )
            parts.append(f"epsilon {fmt_up(more)} of the {kind} budget {name}{why}")
        used = f"; it used {', '.join(parts)}" if parts else ""
        out.append(
            f"charged ledger release #{r.id} ({own}) to analyst {r.analyst}{used}; "
            "dpsql budget show shows what is left"
        )
    return out


def _print_charged(job: Job, written: Any) -> None:
    for line in charged_words(job, written.meta["privacy"]):
        console.print(line, markup=False, highlight=False)

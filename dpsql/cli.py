"""Command line: demo | query | explain | check (serve, budget and release join as they land)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpsql.demo import EXAMPLES
from dpsql.errors import DpsqlError, InvalidParameter
from dpsql.policy.tables import EPOCH
from dpsql.result import Result
from dpsql.session import SessionContext

if TYPE_CHECKING:
    from dpsql.budget.ledger import Ledger
    from dpsql.engine import Engine
    from dpsql.execute.embedded import Cluster
    from dpsql.execute.prepared import Prepared
    from dpsql.explain.report import ExplainReport
    from dpsql.policy.model import Policy

# Piped or redirected output (not a terminal, no COLUMNS): lines as long as their content,
# not rich's 80 columns, which cut table cells to "..." (a number lost).
PIPED_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000
console = Console(width=PIPED_WIDTH)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else PIPED_WIDTH)


def _session(args: argparse.Namespace) -> SessionContext:
    s = SessionContext(analyst=getattr(args, "analyst", None) or "analyst")
    if getattr(args, "epsilon", None) is not None:
        s.epsilon = Fraction(str(args.epsilon))
    if getattr(args, "delta", None) is not None:
        s.delta = Fraction(str(args.delta))
    if getattr(args, "mechanism", None):
        s.mechanism = args.mechanism
    return s


def _fmt(v: Any) -> str:
    """Numbers: thousands separators from 1,000 up, 4 significant digits below."""
    if v is None:
        return "NULL"
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        return str(v)
    x = float(v)
    if isinstance(v, int) or abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def _end(x: Any, value: Any = None, low: bool = True) -> str:
    """An interval end: 'unknown' where the accuracy notice says that end does not hold (an
    infinite end here, a NULL ``_low``/``_high`` column over the wire). A date's or timestamp's
    ends are released as days or seconds since 1970-01-01 (UTC): shown as the value's type, as
    the ``_low``/``_high`` columns are over the wire (``20,243`` read as a count: newcomer23
    #20), a date's rounded outwards to whole days as those columns are."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "unknown"
    if isinstance(value, dt.datetime):
        at = dt.datetime.fromtimestamp(float(x), dt.UTC)
        if value.tzinfo is None:
            return at.replace(tzinfo=None).isoformat(sep=" ")
        return at.astimezone(value.tzinfo).isoformat(sep=" ")
    if isinstance(value, dt.date):
        days = math.floor(float(x)) if low else math.ceil(float(x))
        return (EPOCH + dt.timedelta(days=days)).isoformat()
    return _fmt(x)


def print_result(r: Result, title: str | None = None) -> None:
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in r.columns:
        t.add_column(c.name + (" (noisy)" if c.mechanism else ""), justify="right")
    unknown = False  # an end printed 'unknown'
    for i, row in enumerate(r.rows):
        cells = []
        for j, v in enumerate(row):
            iv = r.intervals[i][j] if r.intervals and i < len(r.intervals) else None
            cell = _fmt(v)
            if iv is not None and v is not None:
                # (escaped: '[unknown, 14.65]' would read as a rich markup tag and vanish)
                ends = (_end(iv[0], v), _end(iv[1], v, low=False))
                cell += f"  [dim]{escape(f'[{ends[0]}, {ends[1]}]')}[/dim]"
                unknown = unknown or "unknown" in ends
            cells.append(cell)
        t.add_row(*cells)
    console.print(t)
    for note in r.notices:  # what psql prints as NOTICE: the accuracy summary, chosen bounds
        console.print(f"[dim]NOTICE: {escape(note)}[/dim]")
    if r.cached:
        console.print("[dim]repeat of an earlier query: stored answer, no budget spent[/dim]")
    elif r.epsilon_spent:
        console.print(
            f"[dim]spent epsilon={r.epsilon_spent:g}, delta={r.delta_spent:g}; "
            "brackets: 95% intervals (noise, and what bounding removed where estimated)"
            + ("; unknown: an end its notice says does not hold" if unknown else "")
            + "[/dim]"
        )


def print_error(e: DpsqlError) -> None:
    from rich.markup import escape  # an error's words are text, not markup ('dpsql[release]')

    err_console.print(f"[bold red]ERROR {e.sqlstate}:[/bold red] {escape(e.message)}")
    if e.detail:
        err_console.print(f"[red]DETAIL:[/red] {escape(e.detail)}")
    if e.hint:
        err_console.print(f"[yellow]HINT:[/yellow] {escape(e.hint)}")


def cmd_query(args: argparse.Namespace) -> int:
    from dpsql.engine import Engine
    from dpsql.policy import load_policy

    policy = load_policy(args.policy)
    where = _upstream_of(args, policy, os.environ)
    engine = Engine(policy, where.upstream, ledger=_ledger(where, policy))
    try:
        return _run_queries(engine, args.sql, _session(args))
    finally:
        engine.close()


def _upstream_of(
    args: argparse.Namespace, policy: Policy, env: Mapping[str, str]
) -> argparse.Namespace:
    """``upstream`` and ``ledger`` for ``dpsql query``, as ``dpsql serve`` takes them: the flag,
    else ``DPSQL_UPSTREAM`` / ``DPSQL_LEDGER``, else the policy's ``server:`` section
    (:func:`dpsql.policy.settings.upstream_and_ledger`).
    """
    from dpsql.policy.settings import upstream_and_ledger

    flags = {"upstream": args.upstream, "ledger": args.ledger}
    upstream, ledger = upstream_and_ledger(flags, env, policy.server, command="dpsql query")
    no_ledger = getattr(args, "no_ledger", False)
    return argparse.Namespace(upstream=upstream, ledger=ledger, no_ledger=no_ledger)


def _ledger(args: argparse.Namespace, policy: Policy) -> Ledger | None:
    if getattr(args, "no_ledger", False):
        return None
    from dpsql.budget.ledger import Ledger

    return Ledger.open(getattr(args, "ledger", None) or args.upstream, policy)


def _run_queries(
    engine: Engine, queries: Sequence[str], session: SessionContext, command: str = "query"
) -> int:
    from dpsql.execute.timing import execute_padded

    rc = 0
    for q in queries:
        console.print(f"[bold cyan]dpsql=>[/bold cyan] {q}")
        try:
            for stmt in engine.split(q):
                prepared = engine.prepare(stmt, session.analyst)
                _no_session_command(prepared, command)
                r = execute_padded(engine, prepared, session)
                print_result(r)
        except DpsqlError as e:
            print_error(e)
            rc = 1
        console.print()
    return rc


def _no_session_command(prepared: Prepared, command: str) -> None:
    """SET / SHOW / BEGIN ... passed to ``dpsql demo`` or ``dpsql query``: the command's options
    set what SET would (newcomer23/24: the engine's words, "connect through `dpsql serve`", did
    not say ``dpsql demo --epsilon 2`` is the way)."""
    from dpsql.errors import UnsupportedSql
    from dpsql.execute.prepared import SessionCommand

    if isinstance(prepared, SessionCommand):
        serve = "dpsql demo --serve" if command == "demo" else "dpsql serve"
        raise UnsupportedSql(
            f"{prepared.first_word} is not run by `dpsql {command}`: each statement here is "
            "answered with the settings of its options",
            hint=f'set them as options: `dpsql {command} --epsilon 2 "SELECT ..."` (also '
            f"--delta, --mechanism, --analyst); to SET and SHOW settings, connect psql to "
            f"`{serve}`",
        )


def cmd_explain(args: argparse.Namespace) -> int:
    from dpsql.explain.report import explain_leaves
    from dpsql.policy import load_policy

    leaves = explain_leaves(load_policy(args.policy), args.sql, _session(args))
    if len(leaves) > 1 or leaves[0][0] != args.sql:
        console.print(
            f"[bold]A tree of {len(leaves)} DP leaves[/bold]: each runs as a private query at its "
            "share of the budget; the rest of the statement runs in PostgreSQL over their noisy "
            "rows (docs/sql.md, the tree model)"
        )
    for i, (sql, rep) in enumerate(leaves):
        if len(leaves) > 1 or sql != args.sql:
            console.print(f"\n[bold]Leaf {i}[/bold]: {sql}", markup=True, highlight=False)
        _print_report(rep)
    return 0


def _print_report(rep: ExplainReport) -> None:
    console.print(
        f"[bold]Private query[/bold] (epsilon={float(rep.epsilon):g}, delta={float(rep.delta):g})"
    )
    console.print(f"  contribution bound: {rep.contribution}")
    if rep.auto:
        console.print(f"  auto bounds: {rep.auto}", markup=False, highlight=False)
    console.print(f"  total cost: {rep.cost}")
    if rep.selection:
        console.print(f"  partition selection: {rep.selection}")
    for line in rep.sets:  # GROUP BY ROLLUP / CUBE / GROUPING SETS
        console.print(f"  grouping set {line}", markup=False)
    t = Table(title="Measures (computed in PostgreSQL, released with noise)", title_justify="left")
    for h in ("measure", "mechanism", "sensitivity", "noise std", "budget", "grid", "95% ±"):
        t.add_column(h)
    for m in rep.measures:
        t.add_row(
            m.measure,
            m.mechanism,
            m.sensitivity,
            f"{m.noise_std:.4g}",
            m.budget,
            m.grid,
            f"{m.half_width:.4g}",
        )
    console.print(t)
    t = Table(title="Output columns", title_justify="left")
    for h in ("column", "from", "mechanism", "error interval"):
        t.add_column(h)
    notes: list[str] = []
    for o in rep.outputs:
        t.add_row(o.column, o.statistic, o.mechanism, _cell(o.column, o.half_width, notes))
    console.print(t)
    for note in notes:  # the cells' sentences, below the table (newcomer25 #15)
        console.print(note, markup=False, highlight=False)
    console.print("[bold]Rewritten SQL[/bold]")
    console.print(rep.rewritten, markup=False, highlight=False)


SHORT_CELL = 40
"""An error interval longer than this is a sentence: its table cell keeps its lead (``±16.5``,
``about ±1.286e+04/N``) and a note number, the sentence follows the table (a ~450-character
cell made the table a column of words)."""


def _cell(column: str, text: str, notes: list[str]) -> str:
    """The error interval's table cell; a long one's whole text is added to ``notes``."""
    if len(text) <= SHORT_CELL:
        return text
    lead = text.split(" (", 1)[0].split("; ", 1)[0]
    notes.append(f"[{len(notes) + 1}] {column}: {text}")
    return f"{lead if len(lead) <= SHORT_CELL else 'see below'} [{len(notes)}]"


def cmd_check(args: argparse.Namespace) -> int:
    from dpsql.check import check_policy

    path = args.policy_option or args.policy or os.environ.get("DPSQL_POLICY")
    if not path:
        raise InvalidParameter("no policy file given", hint="dpsql check --policy FILE")
    return check_policy(path, args.upstream, console)


def cmd_demo(args: argparse.Namespace) -> int:
    import signal
    import threading

    from dpsql.demo import EXAMPLES_ANALYST, POLICY, load_demo
    from dpsql.engine import Engine
    from dpsql.execute.embedded import start_cluster
    from dpsql.policy import load_policy

    cleaning = threading.Event()  # once cleanup has begun, a SIGTERM must not cut it short

    def on_sigterm(*_: object) -> None:
        if not cleaning.is_set():
            sys.exit(143)

    def shielded(cleanup: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            cleaning.set()
            cleanup()

        return run

    if args.serve:  # a busy port is said before PostgreSQL starts and the examples run
        from dpsql.policy.settings import parse_listen
        from dpsql.server.run import ensure_port_free

        try:
            ensure_port_free(*parse_listen(args.listen))
        except ValueError as e:
            raise InvalidParameter(str(e), hint="--listen HOST:PORT") from None
    if threading.current_thread() is threading.main_thread():  # SIGTERM: clean up as for Ctrl-C
        signal.signal(signal.SIGTERM, on_sigterm)
    # everything after the cluster starts is inside the stack: a SIGTERM or Ctrl-C at any point
    # (loading, opening the ledger, running, serving) stops the cluster and removes its directory
    with contextlib.ExitStack() as stack:
        if args.upstream:  # any PostgreSQL (a Citus coordinator: the tables are distributed)
            dsn = args.upstream
            with console.status("loading the demo data..."):
                citus = load_demo(dsn)
            how = " (Citus: distributed by their privacy units)" if citus else ""
            console.print(f"[green]demo tables loaded[/green] upstream{how}; policy {POLICY}")
        else:
            with console.status("starting PostgreSQL and loading the demo data..."):
                cluster = start_cluster()
                stack.callback(shielded(cluster.stop))
                dsn = _demo_database(cluster)
                load_demo(dsn)
            console.print(
                f"[green]PostgreSQL up[/green] on 127.0.0.1:{cluster.port}; policy {POLICY}"
            )
        policy = load_policy(POLICY)
        engine = Engine(policy, dsn, ledger=_ledger(argparse.Namespace(upstream=dsn), policy))
        stack.callback(shielded(engine.close))
        rc = _demo_queries(engine, args)
        if args.serve:
            from dpsql.server.run import serve_engine

            listen_host = args.listen.rpartition(":")[0]
            host = "127.0.0.1" if listen_host in ("", "0.0.0.0", "::", "[::]") else listen_host
            db = psycopg_dbname(dsn)
            mine = (
                f"\n[dim]The examples were charged to analyst {EXAMPLES_ANALYST}, not to you.[/dim]"
            )
            owner = (
                ""
                if args.upstream
                else "\nThe data owner's connection (raw rows: dpsql check --upstream, dpsql "
                f"budget, dpsql init):\n  export DSN='{cluster.url('demo')}'"
            )

            def ready(port: int) -> None:  # the bound port: the kernel's pick for port 0
                console.print(  # unwrapped: lines to copy whole
                    f"[bold green]dpsql is serving on {listen_host}:{port}[/bold green]; connect with\n"
                    f'  psql "host={host} port={port} user=analyst password=analyst dbname={db}"',
                    soft_wrap=True,
                )
                console.print(
                    "(or any PostgreSQL client with those settings)\n"
                    "and try: SELECT category, AVG(amount) FROM purchases GROUP BY category;  "
                    "SHOW dpsql.budget;  \\dt   (Ctrl-C stops)" + ("" if args.sql else mine)
                )
                if owner:
                    console.print(owner, soft_wrap=True)

            return serve_engine(engine, policy, args.listen, args.port_file, ready)
        return rc if args.sql else 0


def psycopg_dbname(dsn: str) -> str:
    """The database a DSN names (what clients of ``dpsql serve`` on it connect to)."""
    import psycopg

    return str(psycopg.conninfo.conninfo_to_dict(dsn).get("dbname") or "postgres")


def _demo_database(cluster: Cluster) -> str:
    """A database named ``demo`` in the throwaway cluster (the name clients connect to: dpsql
    serves the upstream's database under its own name), its DSN."""
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE demo")
    return str(cluster.dsn("demo"))


def _demo_queries(engine: Engine, args: argparse.Namespace) -> int:
    """The queries passed (as ``--analyst``), else the examples, charged to their own analyst."""
    from dpsql.demo import EXAMPLES_ANALYST

    if args.sql:
        return _run_queries(engine, args.sql, _session(args), "demo")
    session = _session(args)
    session.analyst = EXAMPLES_ANALYST
    console.print(f"[dim]Example queries, as the demo's analyst '{EXAMPLES_ANALYST}':[/dim]\n")
    return _run_queries(engine, EXAMPLES, session, "demo")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpsql", description="A differentially private SQL proxy for PostgreSQL"
    )
    sub = p.add_subparsers(dest="command", required=True)

    def privacy_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--analyst", default=os.environ.get("DPSQL_ANALYST", "analyst"))
        sp.add_argument("--epsilon", type=float, help="per-query epsilon (default: the policy's)")
        sp.add_argument("--delta", type=float, help="per-query delta")
        sp.add_argument("--mechanism", choices=["auto", "laplace", "gaussian"])

    d = sub.add_parser("demo", help="start PostgreSQL with demo data and answer example queries")
    d.add_argument("sql", nargs="*", help="queries to run instead of the examples")
    d.add_argument("--serve", action="store_true", help="then serve the wire protocol")
    d.add_argument("--listen", default="127.0.0.1:6543", help="host:port (port 0: any free port)")
    d.add_argument("--port-file", help="with --serve: write the bound port to this file")
    d.add_argument(
        "--upstream",
        help="load the demo into this PostgreSQL (DSN; it drops and recreates purchases, pums "
        "and regions there) instead of starting one; on a Citus coordinator, distributed",
    )
    privacy_opts(d)
    d.set_defaults(func=cmd_demo)

    q = sub.add_parser("query", help="run queries through the DP engine and print noisy results")
    q.add_argument("sql", nargs="+")
    q.add_argument(
        "--policy",
        required="DPSQL_POLICY" not in os.environ,
        default=os.environ.get("DPSQL_POLICY"),
    )
    q.add_argument(
        "--upstream",
        help="PostgreSQL DSN (else DPSQL_UPSTREAM, else the policy's server.upstream)",
    )
    q.add_argument(
        "--ledger",
        help="budget ledger DSN (else DPSQL_LEDGER, else server.ledger, else the upstream)",
    )
    q.add_argument("--no-ledger", action="store_true", help=argparse.SUPPRESS)
    privacy_opts(q)
    q.set_defaults(func=cmd_query)

    e = sub.add_parser("explain", help="show the plan of a private query without reading data")
    e.add_argument("sql")
    e.add_argument("--policy", required=True)
    privacy_opts(e)
    e.set_defaults(func=cmd_explain)

    c = sub.add_parser(
        "check", help="validate a policy (and, with --upstream, against the catalog)"
    )
    c.add_argument("policy", nargs="?", help="the policy YAML file (or --policy)")
    c.add_argument(
        "--policy", dest="policy_option", help="the policy YAML file (as the others take it)"
    )
    c.add_argument(
        "--upstream", help="PostgreSQL DSN: also check tables, columns, types and grants there"
    )
    c.set_defaults(func=cmd_check)
    _extensions(sub)
    return p


def _extensions(sub: Any) -> None:
    """Subcommands that live with their packages (serve, budget, release, policy)."""
    from dpsql.budget import cli as budget_cli
    from dpsql.policy import cli as policy_cli
    from dpsql.release import cli as release_cli
    from dpsql.server import cli as server_cli

    for mod in (server_cli, budget_cli, release_cli, policy_cli):
        mod.register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except DpsqlError as e:
        print_error(e)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

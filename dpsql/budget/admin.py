"""Administering budgets: ``dpsql budget show|grant|reset``. Every change leaves an audit record.

A grant adds epsilon/delta to a budget for its current period; a reset zeroes what the current
period has spent (releases stay in the log). Neither is reachable by an analyst: only this module
(the CLI, run by whoever holds the ledger's database credentials) calls them.
"""

from __future__ import annotations

import argparse
import getpass
import os
from fractions import Fraction

import psycopg
from psycopg.types.json import Jsonb

from dpsql.budget.format import fmt_down, fmt_up
from dpsql.budget.ledger import BudgetRow, Ledger, Limit
from dpsql.budget.periods import period_start
from dpsql.budget.views import statuses
from dpsql.errors import InvalidParameter, UndefinedObject


def _limit(ledger: Ledger, analyst: str | None) -> Limit:
    if analyst is None:
        g = ledger.dataset_limit()
        if g is None:
            raise UndefinedObject(
                f"dataset {ledger.dataset!r} has no global budget in the policy",
                hint="add a top-level `budget:` to the policy, or name an analyst",
            )
        return g
    if analyst not in ledger.policy.analysts:
        raise UndefinedObject(
            f"analyst {analyst!r} is not in the policy",
            hint="known analysts: " + (", ".join(sorted(ledger.policy.analysts)) or "(none)"),
        )
    return next(lim for lim in ledger.limits(analyst) if lim.kind == "analyst")


def _audit(
    conn: psycopg.Connection,
    ledger: Ledger,
    actor: str,
    action: str,
    lim: Limit,
    start: object,
    detail: dict[str, object],
) -> None:
    conn.execute(
        ledger.q(
            "INSERT INTO {s}.admin_audit (actor, action, dataset, kind, name, period_start, detail)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
        ),
        [actor, action, ledger.dataset, lim.kind, lim.name, start, Jsonb(detail)],
    )


def _row_detail(row: BudgetRow) -> dict[str, object]:
    return {
        "epsilon_spent": str(row.spent.cost.epsilon),
        "delta_spent": str(row.spent.cost.delta),
        "rho_spent": str(row.spent.cost.rho),
        "renyi_spent": None if row.spent.renyi is None else str(row.spent.renyi),
        "renyi_order": None if row.order is None else str(row.order),
        "epsilon_granted": str(row.epsilon_granted),
        "delta_granted": str(row.delta_granted),
        "releases": row.releases,
        "generation": row.generation,
    }


def grant(
    ledger: Ledger,
    actor: str,
    analyst: str | None,
    epsilon: Fraction,
    delta: Fraction = Fraction(0),
    reason: str = "",
) -> None:
    """Add ``epsilon``/``delta`` to a budget's current period (``analyst`` None: the dataset's)."""
    epsilon, delta = Fraction(epsilon), Fraction(delta)
    if epsilon < 0 or delta < 0 or (epsilon == 0 and delta == 0) or delta >= 1:
        raise InvalidParameter(
            f"a grant needs epsilon >= 0 and 0 <= delta < 1, not both zero (got {epsilon}, "
            f"{delta})",
            hint="e.g. dpsql budget grant --analyst alice --epsilon 1",
        )
    lim = _limit(ledger, analyst)

    def run(conn: psycopg.Connection) -> None:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        start = period_start(lim.period, now)
        row = ledger.lock_budget(conn, lim.kind, lim.name, start)
        geps, gdelta = row.epsilon_granted + epsilon, row.delta_granted + delta
        conn.execute(
            ledger.q(
                "UPDATE {s}.budget SET epsilon_granted = %s, delta_granted = %s,"
                " updated_at = now() WHERE dataset = %s AND kind = %s AND name = %s"
                " AND period_start = %s"
            ),
            [
                f"{geps.numerator}/{geps.denominator}",
                f"{gdelta.numerator}/{gdelta.denominator}",
                ledger.dataset,
                lim.kind,
                lim.name,
                start,
            ],
        )
        detail = {"epsilon": str(epsilon), "delta": str(delta), "reason": reason}
        _audit(conn, ledger, actor, "grant", lim, start, {**detail, "before": _row_detail(row)})

    ledger.transact(run)


def reset(ledger: Ledger, actor: str, analyst: str | None, reason: str = "") -> None:
    """Zero what a budget spent in its current period; open reservations are no longer refundable.

    The releases stay in the log; the audit record keeps the totals that were reset.
    """
    lim = _limit(ledger, analyst)

    def run(conn: psycopg.Connection) -> None:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        start = period_start(lim.period, now)
        row = ledger.lock_budget(conn, lim.kind, lim.name, start)
        conn.execute(
            ledger.q(
                "UPDATE {s}.budget SET epsilon_spent = '0', delta_spent = '0', rho_spent = '0',"
                " renyi_spent = '0', releases = 0, generation = generation + 1, updated_at = now()"
                " WHERE dataset = %s AND kind = %s AND name = %s AND period_start = %s"
            ),
            [ledger.dataset, lim.kind, lim.name, start],
        )
        _audit(conn, ledger, actor, "reset", lim, start, {"reason": reason, **_row_detail(row)})

    ledger.transact(run)


def show(ledger: Ledger, analyst: str | None = None) -> str:
    """A text table of every budget of the dataset (or one analyst's and the dataset's)."""
    names = [analyst] if analyst else sorted(ledger.policy.analysts)
    limits = {(lim.kind, lim.name): lim for n in names for lim in ledger.limits(n)}
    g = ledger.dataset_limit()
    if g is not None:
        limits[(g.kind, g.name)] = g
    rows = [
        [
            s.budget,
            s.name,
            s.period,
            fmt_up(Fraction(s.epsilon_spent)),
            fmt_down(Fraction(s.epsilon_limit)),
            fmt_down(Fraction(s.epsilon_remaining)),
            fmt_up(Fraction(s.delta_spent)),
            fmt_down(Fraction(s.delta_explicit_limit)),
            fmt_down(Fraction(s.delta_limit)),
            fmt_up(Fraction(s.rho_spent)),
            "-" if s.renyi_order is None else fmt_down(Fraction(s.renyi_order)),
            str(s.releases),
        ]
        for s in statuses(ledger, tuple(limits[k] for k in sorted(limits)))
    ]
    head = ["budget", "name", "period", "eps spent", "eps limit", "eps left", "delta spent"]
    head += ["delta explicit", "delta limit", "rho spent", "renyi order", "releases"]
    table = [head, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Register ``budget show|grant|reset`` on the CLI's subparsers; dispatch with :func:`run`."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "budget", help="show, grant or reset privacy budgets"
    )
    _common_options(p, top=True)
    sub = p.add_subparsers(dest="budget_command", required=True)
    s = sub.add_parser("show", help="spent and remaining per budget")
    s.add_argument("--analyst")
    subs = [s]
    for name, helptext in (("grant", "add to a budget"), ("reset", "zero a budget's spending")):
        g = sub.add_parser(name, help=helptext)
        who = g.add_mutually_exclusive_group(required=True)
        who.add_argument("--analyst")
        who.add_argument("--dataset", action="store_true", help="the dataset's global budget")
        g.add_argument("--reason", default="", help="recorded in the audit log")
        g.add_argument("--actor", help="who is acting, for the audit log (default: the OS user)")
        if name == "grant":
            g.add_argument("--epsilon", default="0")
            g.add_argument("--delta", default="0")
        subs.append(g)
    r = sub.add_parser(
        "reconcile",
        help="settle releases reserved by a dpsql process that died before answering",
        description="Reservations still open after --older-than minutes belong to a dpsql "
        "process killed between charging and answering: the answer was never sent. Listed by "
        "default; --commit keeps them charged, --refund gives them back (only for crashes that "
        "say nothing about the data). Recorded in the ledger's admin audit.",
    )
    r.add_argument("--older-than", type=float, default=10.0,
                   help="minutes (default 10; keep it above the statement timeout)")  # fmt: skip
    how = r.add_mutually_exclusive_group()
    how.add_argument("--commit", action="store_true", help="confirm them as spent")
    how.add_argument("--refund", action="store_true", help="give them back")
    r.add_argument("--reason", default="", help="recorded in the audit log")
    r.add_argument("--actor", help="who is acting, for the audit log (default: the OS user)")
    subs.append(r)
    for sp in subs:  # `dpsql budget show --policy ...` as well as `dpsql budget --policy ... show`
        _common_options(sp, top=False)
    p.set_defaults(func=run)
    return p


def _common_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """--policy, --ledger, --ledger-schema: on ``budget`` (with defaults) and on each of its
    commands (without: a value given there overrides one given before the command)."""

    def default(value: str | None) -> str | None:
        return value if top else argparse.SUPPRESS

    p.add_argument("--policy", default=default(os.environ.get("DPSQL_POLICY")),
                   help="the policy YAML file (default $DPSQL_POLICY)")  # fmt: skip
    p.add_argument(
        "--ledger",
        "--ledger-dsn",
        dest="ledger_dsn",
        default=default(os.environ.get("DPSQL_LEDGER") or os.environ.get("DPSQL_UPSTREAM")),
        help="DSN of the ledger database (default $DPSQL_LEDGER, else $DPSQL_UPSTREAM: the ledger "
        "lives in the upstream database unless dpsql serve was given another)",
    )
    p.add_argument("--ledger-schema", default=default("dpsql"))


def run(args: argparse.Namespace) -> int:
    """Execute a parsed ``dpsql budget ...`` command; prints the result."""
    from dpsql.policy.load import load_policy

    if not args.policy:
        raise InvalidParameter(
            "no policy file given", hint="pass --policy FILE or set DPSQL_POLICY"
        )
    if not args.ledger_dsn:
        raise InvalidParameter(
            "no ledger database given", hint="pass --ledger DSN or set DPSQL_LEDGER"
        )
    policy = load_policy(args.policy)
    with Ledger.open(args.ledger_dsn, policy, args.ledger_schema, pool_size=2) as ledger:
        if args.budget_command == "show":
            print(show(ledger, args.analyst))
            return 0
        if args.budget_command == "reconcile":
            return _reconcile(ledger, args)
        who = None if args.dataset else args.analyst
        actor = args.actor or _os_user()
        if args.budget_command == "grant":
            grant(ledger, actor, who, _frac(args.epsilon), _frac(args.delta), args.reason)
        else:
            reset(ledger, actor, who, args.reason)
        print(show(ledger, who))
    return 0


def _reconcile(ledger: Ledger, args: argparse.Namespace) -> int:
    from datetime import timedelta

    from dpsql.budget.reconcile import report, settle, stale

    if args.older_than <= 0:
        raise InvalidParameter("--older-than must be positive (minutes)")
    items = stale(ledger, timedelta(minutes=args.older_than))
    print(report(items))
    action = "refund" if args.refund else "commit" if args.commit else None
    if action is None or not items:
        if items:
            print("(listed only: --commit keeps them charged and closes them, --refund gives "
                  "them back; see dpsql budget reconcile --help)")  # fmt: skip
        return 0
    actor = args.actor or _os_user()
    for it in items:
        settle(ledger, it, action, actor, args.reason)
    print(f"{len(items)} reservation(s) {'refunded' if action == 'refund' else 'committed'}")
    return 0


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.getuid()}"


def _frac(text: str) -> Fraction:
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError) as e:
        raise InvalidParameter(f"not a number: {text!r}", hint="e.g. 0.5 or 1/2") from e

"""``dpsql budget show|grant|reset|reconcile``: a subcommand of :mod:`dpsql.cli`, run by whoever
holds the ledger database's credentials (never reachable by an analyst)."""

from __future__ import annotations

import argparse
import getpass
import os
from datetime import timedelta
from fractions import Fraction
from typing import Any

from dpsql.budget.admin import grant, reset, show
from dpsql.budget.ledger import Ledger
from dpsql.budget.reconcile import Action, report, settle, stale
from dpsql.errors import InvalidParameter
from dpsql.policy.load import load_policy


def register(sub: Any) -> None:
    """Add the ``budget`` subcommand to the CLI's subparsers."""
    add_parser(sub)


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
    if args.older_than <= 0:
        raise InvalidParameter("--older-than must be positive (minutes)")
    items = stale(ledger, timedelta(minutes=args.older_than))
    print(report(items))
    action: Action | None = "refund" if args.refund else "commit" if args.commit else None
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

"""``dpsql serve``: the PostgreSQL wire-protocol proxy (registered into dpsql.cli)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from dpsql.wire.auth import AuthConfig
from dpsql.wire.framing import DEFAULT_MAX_MESSAGE_SIZE
from dpsql.wire.server import ServerConfig

_METHODS = ("scram-sha-256", "md5", "password", "trust")


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``, ``:port`` or ``port``) to a pair.

    >>> parse_listen("127.0.0.1:6543"), parse_listen("6000"), parse_listen("[::1]:5")
    (('127.0.0.1', 6543), ('127.0.0.1', 6000), ('::1', 5))
    """
    host, sep, port = text.rpartition(":")
    if not sep:
        return "127.0.0.1", int(text)
    return (host.strip("[]") or "127.0.0.1"), int(port)


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def register(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve the PostgreSQL wire protocol (psql, BI tools, drivers)")
    s.add_argument("--policy", required=_env("DPSQL_POLICY") is None, default=_env("DPSQL_POLICY"))
    s.add_argument(
        "--upstream", required=_env("DPSQL_UPSTREAM") is None, default=_env("DPSQL_UPSTREAM")
    )
    s.add_argument("--listen", default=_env("DPSQL_LISTEN", "127.0.0.1:6543"), help="host:port")
    s.add_argument("--ledger", default=_env("DPSQL_LEDGER"), help="budget ledger DSN")
    s.add_argument("--tls-cert", default=_env("DPSQL_TLS_CERT"))
    s.add_argument("--tls-key", default=_env("DPSQL_TLS_KEY"))
    s.add_argument(
        "--require-tls",
        action="store_true",
        default=_env("DPSQL_REQUIRE_TLS", "") in ("1", "true", "yes", "on"),
    )
    s.add_argument(
        "--auth",
        default=_env("DPSQL_AUTH", "scram-sha-256"),
        help="comma-separated methods: scram-sha-256 (default), md5 (= SCRAM), password, trust",
    )
    s.add_argument("--max-sessions", type=int, default=_env_int("DPSQL_MAX_SESSIONS", 200))
    s.add_argument(
        "--max-sessions-per-analyst",
        type=int,
        default=_env_int("DPSQL_MAX_SESSIONS_PER_ANALYST", 20),
    )
    s.add_argument(
        "--max-message-size",
        type=int,
        default=_env_int("DPSQL_MAX_MESSAGE_SIZE", DEFAULT_MAX_MESSAGE_SIZE),
    )
    s.add_argument("--shutdown-grace", type=float, default=10.0, help="seconds")
    s.add_argument("--log-level", default=_env("DPSQL_LOG_LEVEL", "INFO"))
    s.set_defaults(func=cmd_serve)

    v = sub.add_parser(
        "verifier", help="make a SCRAM-SHA-256 verifier for an analyst's credential in the policy"
    )
    v.add_argument("analyst", nargs="?", default="analyst", help="name shown in the YAML snippet")
    v.add_argument("--iterations", type=int, default=4096)
    v.add_argument("--stdin", action="store_true", help="read the password from standard input")
    v.set_defaults(func=cmd_verifier)


def cmd_verifier(args: argparse.Namespace) -> int:
    """Print a verifier (the password is read without echo, or from stdin)."""
    import getpass
    import sys

    from dpsql.wire.auth import make_verifier

    if args.stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            print("passwords differ", file=sys.stderr)
            return 1
    if not password:
        print("empty password", file=sys.stderr)
        return 1
    verifier = make_verifier(password, iterations=args.iterations)
    print(f'analysts:\n  {args.analyst}:\n    credential: "{verifier}"')
    return 0


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    methods = tuple(x.strip().lower() for x in args.auth.split(",") if x.strip())
    bad = [x for x in methods if x not in _METHODS]
    if bad:
        raise SystemExit(f"unknown auth method(s) {bad}; use {', '.join(_METHODS)}")
    host, port = parse_listen(args.listen)
    return ServerConfig(
        host=host,
        port=port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        require_tls=args.require_tls,
        auth=AuthConfig(methods=methods),
        max_message_size=args.max_message_size,
        max_sessions=args.max_sessions,
        max_sessions_per_analyst=args.max_sessions_per_analyst,
        shutdown_grace_s=args.shutdown_grace,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from dpsql.cli import _ledger
    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.serve import serve

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    config = config_from_args(args)
    policy = load_policy(args.policy)
    engine = Engine(policy, args.upstream, ledger=_ledger(args, policy))
    try:
        serve(engine, policy, config)
    finally:
        engine.close()
    return 0

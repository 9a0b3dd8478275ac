"""``dpsql serve``: the PostgreSQL wire-protocol proxy (a subcommand of :mod:`dpsql.cli`).

Settings come from the command line, the environment (``DPSQL_<NAME>``) and the policy file's
``server:`` section, in that order of precedence (:func:`dpsql.policy.settings.resolve_server`).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import InvalidParameter, PolicyError
from dpsql.policy import load_policy
from dpsql.policy.model import Policy
from dpsql.policy.settings import Resolved, ServerSettings, parse_listen, resolve_server
from dpsql.server.run import ensure_port_free, serve
from dpsql.server.startup_checks import startup_problems
from dpsql.server.workers import Workers
from dpsql.wire.auth import AuthConfig
from dpsql.wire.log import LineFormatter, set_statement_text
from dpsql.wire.server import Server, ServerConfig, freeze_startup_heap

log = logging.getLogger("dpsql.serve")

_SERVE_HELP = """Every setting can also come from the environment (DPSQL_<NAME>, e.g. DPSQL_MAX_SESSIONS)
or from the policy file's `server:` section (e.g. max_sessions: 50; strings may use ${VAR} or
${VAR:-default}). Precedence: command line > environment > policy file > default. See docs/server.md."""


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def register(sub: Any) -> None:
    s = sub.add_parser(
        "serve",
        help="serve the PostgreSQL wire protocol (psql, BI tools, drivers)",
        description=_SERVE_HELP,
    )
    # Settings default to None (= not on the command line); resolve() fills them from the
    # environment, then the policy's `server:` section, then ServerConfig's defaults.
    # A new setting: a field in dpsql.policy.settings.ServerSettings + one flag here.
    s.add_argument("--policy", required=_env("DPSQL_POLICY") is None, default=_env("DPSQL_POLICY"))
    s.add_argument("--upstream", help="DSN of the PostgreSQL holding the data")
    s.add_argument("--listen", help="host:port (default 127.0.0.1:6543; port 0: any free port)")
    s.add_argument(
        "--port-file", help="write the bound port to this file once accepting connections"
    )
    s.add_argument("--ledger", help="budget ledger DSN (default: the upstream)")
    s.add_argument("--tls-cert")
    s.add_argument("--tls-key")
    s.add_argument("--require-tls", action=argparse.BooleanOptionalAction, default=None)
    s.add_argument(
        "--auth",
        help="comma-separated methods: scram-sha-256 (default), md5 (= SCRAM), password, trust",
    )
    s.add_argument("--max-sessions", type=int, help="default 200")
    s.add_argument("--max-sessions-per-analyst", type=int, help="default 20")
    s.add_argument("--max-message-size", type=int, help="bytes (default 16 MiB)")
    s.add_argument(
        "--max-login-failures", type=int, help="failed logins per analyst per window (default 5)"
    )
    s.add_argument(
        "--max-login-failures-per-host",
        type=int,
        help="failed logins per client address per window (default 50)",
    )
    s.add_argument(
        "--login-failure-window",
        type=float,
        help="seconds a failed login counts for the limits (default 60)",
    )
    s.add_argument(
        "--statement-timeout-ms",
        type=int,
        help="default: the policy's defaults.statement_timeout_ms",
    )
    s.add_argument("--shutdown-grace", type=float, help="seconds (default 10)")
    s.add_argument("--workers", type=int, help="server processes sharing the port (default 1)")
    s.add_argument("--log-level", help="DEBUG, INFO (default), WARNING, ERROR")
    s.add_argument(
        "--metrics-listen",
        help="host:port for Prometheus /metrics (default off; --workers: port + worker number)",
    )
    s.add_argument(
        "--log-statements",
        choices=["text", "redacted", "none"],
        help="statement text in the JSON statement log: literals as ? (default), as sent, none",
    )
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


def resolve(args: argparse.Namespace, policy: Policy, env: Mapping[str, str]) -> Resolved:
    """Command line > environment > the policy's ``server:`` section; missing ones are errors.

    Raises:
        InvalidParameter: a bad flag or variable, no upstream at all, or an incomplete TLS setup.
        PolicyError: a setting only the file gives, from a ``${VAR}`` that is unset.
    """
    try:
        got = resolve_server(vars(args), env, policy.server)
    except ValueError as e:
        raise InvalidParameter(str(e), hint="see `dpsql serve --help`") from None
    if got.unresolved:
        msgs = list(got.unresolved.values())
        raise PolicyError(
            msgs[0],
            detail="\n".join(msgs) if len(msgs) > 1 else None,
            hint="export the variable, give the flag, or write ${VAR:-default} in the file",
        )
    st = got.settings
    if st.upstream is None:
        raise InvalidParameter(
            "no upstream PostgreSQL: give --upstream, DPSQL_UPSTREAM or server.upstream",
            hint='e.g. `server: {upstream: "${DPSQL_UPSTREAM}"}` in the policy file',
        )
    if (st.tls_cert is None) != (st.tls_key is None):
        raise InvalidParameter(
            "TLS needs both a certificate and a key", hint="give tls_cert and tls_key together"
        )
    if st.require_tls and st.tls_cert is None:
        raise InvalidParameter(
            "require_tls is on but no TLS certificate is configured",
            hint="give tls_cert and tls_key (flags, DPSQL_TLS_CERT/KEY or the server: section)",
        )
    return got


def config_from_settings(st: ServerSettings) -> ServerConfig:
    """The wire server's config; anything unset keeps ServerConfig's default."""
    given: dict[str, Any] = {}
    if st.listen is not None:
        given["host"], given["port"] = parse_listen(st.listen)
    auth: dict[str, Any] = {name: value for name, value in (
        ("methods", st.auth),
        ("max_failures", st.max_login_failures),
        ("max_failures_per_host", st.max_login_failures_per_host),
        ("window_s", st.login_failure_window),
    ) if value is not None}  # fmt: skip
    if auth:
        given["auth"] = AuthConfig(**auth)
    if st.shutdown_grace is not None:
        given["shutdown_grace_s"] = st.shutdown_grace
    for key in ("tls_cert", "tls_key", "require_tls", "max_message_size", "max_sessions",
                "max_sessions_per_analyst", "metrics_listen"):  # fmt: skip
        if getattr(st, key) is not None:
            given[key] = getattr(st, key)
    given["database"] = ""  # clients name the upstream's database (3D000 for any other)
    return ServerConfig(**given)


def cmd_serve(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy)
    got = resolve(args, policy, os.environ)
    st = got.settings
    handler = logging.StreamHandler()
    handler.setFormatter(LineFormatter())  # LINE_FORMAT's text, cheaper per statement line
    logging.basicConfig(level=st.log_level or "INFO", handlers=[handler])
    log.info(
        "settings from: %s (the rest: defaults)",
        ", ".join(f"{k}={src}" for k, src in sorted(got.sources.items())) or "nowhere",
    )
    config = config_from_settings(st)
    ensure_port_free(config.host, config.port)
    set_statement_text(st.log_statements or "redacted")
    if not _startup_checks(policy, st):
        return 1
    if st.port_file:  # a script waiting for the file must not read a previous run's port
        Path(st.port_file).unlink(missing_ok=True)
    try:
        _run(policy, config, st)
    finally:
        if st.port_file:
            Path(st.port_file).unlink(missing_ok=True)
    return 0


def _startup_checks(policy: Policy, st: ServerSettings) -> bool:
    """Log one line per problem :mod:`dpsql.server.startup_checks` finds; False when one is fatal."""
    assert st.upstream is not None
    problems = startup_problems(policy, st.upstream, st.ledger or st.upstream)
    for p in problems:
        (log.error if p.fatal else log.warning)("%s", p.text)
    fatal = sum(p.fatal for p in problems)
    if fatal:
        log.error("not starting: %d problem(s) above (see docs/deploy.md)", fatal)
    return not fatal


def _run(policy: Policy, config: ServerConfig, st: ServerSettings) -> None:
    """Serve in this process, or in ``st.workers`` forked ones."""
    assert st.upstream is not None
    upstream, timeout_ms = st.upstream, st.statement_timeout_ms
    ledger_dsn = st.ledger or upstream
    if (st.workers or 1) > 1:
        Ledger.open(ledger_dsn, policy).close()  # create or migrate it once, before forking

        def make_engine() -> Engine:  # in each worker, after the fork
            ledger = Ledger.open(ledger_dsn, policy)
            return Engine(policy, upstream, ledger=ledger, statement_timeout_ms=timeout_ms)

        Workers(make_engine, policy, config, st.workers or 1, st.port_file).run()
        return
    ledger = Ledger.open(ledger_dsn, policy)
    engine = Engine(policy, upstream, ledger=ledger, statement_timeout_ms=timeout_ms)
    freeze_startup_heap()
    try:
        serve(Server(engine, policy, config), st.port_file)
    finally:
        engine.close()

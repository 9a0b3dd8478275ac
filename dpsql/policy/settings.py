"""Deployment settings in the policy file: ``server:`` (how ``dpsql serve`` runs) and ``timing:``
(when answers over private tables are delivered).

Neither changes an answer, so both are left out of the policy's digest (``exclude=True`` on the
fields of :class:`dpsql.policy.model.Policy`): moving the listen port or the padding quantum keeps
the free repeats of earlier answers.

``server:`` keys are the ``dpsql serve`` flags with underscores (``--max-sessions`` is
``max_sessions``); string values may use ``${VAR}`` / ``${VAR:-default}`` (see :func:`interpolate`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

AuthMethod = Literal["scram-sha-256", "md5", "password", "trust"]
AUTH_METHODS: tuple[str, ...] = ("scram-sha-256", "md5", "password", "trust")
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

# Failed logins are kept per name and per address in fixed tables of 4096 rows x the limit
# (dpsql.wire.limits.FailureLog): 1000 keeps each table at 32 MiB.
MAX_LOGIN_FAILURES = 1000

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


class UnsetVariable(LookupError):
    """A ``${VAR}`` without a default whose variable is not set."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def interpolate(text: str, env: Mapping[str, str] | None = None) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}`` (default when unset or empty, as in the shell)
    from the environment; ``$$`` is a literal ``$``.

    Only braces are recognised (a bare ``$word`` stays as it is, so passwords with ``$`` in them
    don't need escaping unless followed by ``{``).

    >>> interpolate("postgresql://${U}@db/${DB:-prod}", {"U": "dpsql"})
    'postgresql://dpsql@db/prod'
    >>> interpolate("p$$w ${X:-}", {})
    'p$w '

    Raises:
        UnsetVariable: ``${VAR}`` without a default and VAR is not set.
        ValueError: a ``${`` that is not a well-formed reference.
    """
    env = os.environ if env is None else env

    def sub(m: re.Match[str]) -> str:
        whole = m.group(0)
        if whole == "$$":
            return "$"
        if whole == "${":
            raise ValueError("malformed ${...} reference: write ${NAME} or ${NAME:-default}")
        name, default = m.group(1), m.group(2)
        value = env.get(name)
        if default is not None and not value:  # as in the shell: unset or empty
            return default
        if value is None:
            raise UnsetVariable(name)
        return value

    return _VAR.sub(sub, text)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``, ``:port`` or ``port``) to a pair.

    >>> parse_listen("127.0.0.1:6543"), parse_listen("6000"), parse_listen("[::1]:5")
    (('127.0.0.1', 6543), ('127.0.0.1', 6000), ('::1', 5))
    """
    host, sep, port = text.strip().rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"listen address {text!r} is not host:port") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} is out of range 0..65535")
    if not sep:
        return "127.0.0.1", number
    return (host.strip("[]") or "127.0.0.1"), number


class ServerSettings(_Strict):
    """``server:`` — what ``dpsql serve`` can also be told by flags and environment variables.

    Every field is optional; precedence is command line > environment > this section > default.
    """

    upstream: str | None = Field(
        default=None, repr=False, description="DSN of the PostgreSQL holding the data"
    )
    listen: str | None = Field(default=None, description="host:port (default 127.0.0.1:6543)")
    port_file: str | None = Field(
        default=None, description="write the bound port here once listening (for --listen :0)"
    )
    ledger: str | None = Field(
        default=None, repr=False, description="budget ledger DSN (default: the upstream)"
    )
    tls_cert: str | None = None
    tls_key: str | None = None
    require_tls: bool | None = None
    auth: tuple[AuthMethod, ...] | None = Field(
        default=None, description="allowed methods: scram-sha-256, md5, password, trust"
    )
    max_sessions: Annotated[int, Field(ge=1)] | None = None
    metrics_listen: str | None = Field(
        default=None, description="host:port of the Prometheus /metrics endpoint (default: off)"
    )
    log_statements: Literal["text", "redacted", "none"] | None = Field(
        default=None, description="statement text in the statement log (default redacted)"
    )
    max_sessions_per_analyst: Annotated[int, Field(ge=1)] | None = None
    max_message_size: Annotated[int, Field(ge=1024)] | None = None
    max_login_failures: Annotated[int, Field(ge=1, le=MAX_LOGIN_FAILURES)] | None = Field(
        default=None, description="failed logins per analyst within the window (default 5)"
    )
    max_login_failures_per_host: Annotated[int, Field(ge=1, le=MAX_LOGIN_FAILURES)] | None = Field(
        default=None, description="failed logins per client address (default 50)"
    )
    login_failure_window: Annotated[float, Field(gt=0, le=86_400)] | None = Field(
        default=None, description="s: failures older than this no longer count (default 60)"
    )
    statement_timeout_ms: Annotated[int, Field(ge=100)] | None = Field(
        default=None, description="overrides defaults.statement_timeout_ms for this server"
    )
    shutdown_grace: Annotated[float, Field(ge=0)] | None = Field(default=None, description="s")
    log_level: LogLevel | None = None
    workers: Annotated[int, Field(ge=1, le=256)] | None = Field(
        default=None, description="server processes sharing the port (SO_REUSEPORT; default 1)"
    )

    # ``${VAR}`` references whose variable was unset at load: key -> "file:line: ..." message.
    # An error only if `dpsql serve` needs that key (no flag or environment variable gives it).
    _unresolved: dict[str, str] = PrivateAttr(default_factory=dict)
    # key -> "file:line" where the section set it (filled by the loader).
    _where: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("auth", mode="before")
    @classmethod
    def _methods(cls, v: object) -> object:
        if isinstance(v, str):
            v = [x for x in v.split(",") if x.strip()]
        if isinstance(v, list | tuple):
            return tuple(x.strip().lower() if isinstance(x, str) else x for x in v)
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        if v is not None:
            parse_listen(v)
        return v

    @property
    def unresolved(self) -> Mapping[str, str]:
        """Keys whose ``${VAR}`` was unset when the file was loaded, with a file:line message."""
        return self._unresolved


SERVER_KEYS: tuple[str, ...] = tuple(ServerSettings.model_fields)
SECRET_KEYS = frozenset({"upstream", "ledger"})


def flag_name(key: str) -> str:
    """``max_sessions`` -> ``--max-sessions``."""
    return "--" + key.replace("_", "-")


def env_name(key: str) -> str:
    """``max_sessions`` -> ``DPSQL_MAX_SESSIONS``."""
    return "DPSQL_" + key.upper()


@dataclass(frozen=True)
class Resolved:
    """Server settings merged from every layer, and where each came from."""

    settings: ServerSettings
    sources: Mapping[str, str]  # key -> "--flag", "DPSQL_X", "file:line" (absent: default)
    unresolved: Mapping[str, str]  # keys no layer gave whose ${VAR} in the file was unset


def resolve_server(
    flags: Mapping[str, object],
    env: Mapping[str, str],
    file: ServerSettings | None,
    keys: Collection[str] = SERVER_KEYS,
) -> Resolved:
    """Merge command line > environment > ``server:`` section; unset keys stay None (defaults).

    ``flags`` holds the command-line values that were given (None: not given); ``env`` the
    environment (``DPSQL_<KEY>``; an empty variable counts as unset). Each layer is validated by
    the same model as the file, and an error names the flag or variable. Only ``keys`` are
    resolved (``dpsql query`` needs the upstream and the ledger, not the rest).

    >>> r = resolve_server({"listen": None}, {"DPSQL_LISTEN": ":7000"}, ServerSettings(listen=":1"))
    >>> r.settings.listen, r.sources["listen"]
    (':7000', 'DPSQL_LISTEN')

    Raises:
        ValueError: a flag or environment value is invalid (the message names it).
    """
    cli = {k: v for k, v in flags.items() if k in keys and v is not None}
    envs = {k: env[env_name(k)] for k in keys if env.get(env_name(k), "") != ""}
    merged: dict[str, object] = {}
    sources: dict[str, str] = {}
    for layer, name in (
        (file, "file"),
        (_layer(envs, env_name), "env"),
        (_layer(cli, flag_name), "cli"),
    ):
        if layer is None:
            continue
        for key in layer.model_fields_set & set(keys):
            value = getattr(layer, key)
            if value is not None:
                merged[key] = value
                sources[key] = (
                    flag_name(key) if name == "cli" else env_name(key) if name == "env"
                    else file._where.get(key, "policy file") if file is not None else ""
                )  # fmt: skip
    unresolved = {
        k: msg
        for k, msg in (file.unresolved.items() if file is not None else ())
        if k not in merged and k in keys
    }
    return Resolved(ServerSettings.model_validate(merged), sources, unresolved)


def upstream_and_ledger(
    flags: Mapping[str, str | None],
    env: Mapping[str, str],
    file: ServerSettings | None,
    *,
    command: str,
) -> tuple[str, str]:
    """The upstream DSN and the ledger's for a command that runs without ``dpsql serve``
    (``dpsql query``, ``dpsql release``): each from its flag, else ``DPSQL_UPSTREAM`` /
    ``DPSQL_LEDGER``, else the policy's ``server:`` section, as ``dpsql serve`` takes them;
    the ledger defaults to the upstream database. Every command that charges a budget finds the
    one ledger the same way: a release that opened the upstream while the server charged
    ``DPSQL_LEDGER`` spent every analyst's budget twice.

    Raises:
        InvalidParameter: a bad value, or no upstream anywhere.
        PolicyError: only the file gives a value, from a ``${VAR}`` that is unset.
    """
    from dpsql.errors import InvalidParameter, PolicyError

    keys = ("upstream", "ledger")
    try:
        got = resolve_server(dict(flags), env, file, keys=keys)
    except ValueError as e:
        raise InvalidParameter(str(e), hint=f"see `{command} --help`") from None
    for key in keys:
        if key in got.unresolved:
            raise PolicyError(
                got.unresolved[key],
                hint=f"export the variable, give --{key}, or write ${{VAR:-default}} in the file",
            )
    upstream = got.settings.upstream
    if upstream is None:
        raise InvalidParameter(
            "no upstream PostgreSQL: give --upstream, DPSQL_UPSTREAM or server.upstream",
            hint='e.g. `server: {upstream: "${DPSQL_UPSTREAM}"}` in the policy file',
        )
    return upstream, got.settings.ledger or upstream


def _layer(values: Mapping[str, object], name: Callable[[str], str]) -> ServerSettings:
    try:
        return ServerSettings.model_validate(dict(values))
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        raise ValueError(f"{name(key)}: {err['msg'].removeprefix('Value error, ')}") from None


class Timing(_Strict):
    """``timing:`` — padding of answers over private tables (docs/timing.md).

    An execution of a private statement (a fresh release, a refusal or error after it started, a
    timeout) is delivered ``delay_ns`` after it arrived: at the next multiple of ``quantum_ms``
    and no earlier than ``min_ms``. 0 and 0 (the default) is off.
    """

    quantum_ms: Annotated[int, Field(ge=0, le=600_000)] = Field(
        default=0, description="deliver at the next multiple of this many ms (0: no rounding)"
    )
    min_ms: Annotated[int, Field(ge=0, le=3_600_000)] = Field(
        default=0, description="deliver no earlier than this many ms after the statement arrived"
    )
    pad_repeats: bool = Field(
        default=True,
        description="pad free repeats answered from the ledger too (they then look like fresh "
        "answers; false answers them at once)",
    )

    @property
    def enabled(self) -> bool:
        return self.quantum_ms > 0 or self.min_ms > 0


__all__ = [
    "AUTH_METHODS",
    "Resolved",
    "resolve_server",
    "ServerSettings",
    "Timing",
    "UnsetVariable",
    "interpolate",
    "parse_listen",
]

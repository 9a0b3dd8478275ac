"""The policy file's ``server:`` and ``timing:`` sections: validation with file:line errors,
``${VAR}`` interpolation, and the precedence command line > environment > file > default."""

from __future__ import annotations

import argparse

import pytest

from dpsql.errors import InvalidParameter, PolicyError
from dpsql.policy import load_policy, parse_policy
from dpsql.policy.settings import ServerSettings, interpolate, resolve_server
from dpsql.server.cli import config_from_settings, resolve

BASE = """version: 1
tables:
  t:
    privacy_unit: uid
    columns:
      uid: {type: integer, identifier: true}
"""
SERVER = (
    BASE
    + """server:
  upstream: "${T_DSN}"
  listen: 0.0.0.0:7000
  auth: [scram-sha-256, password]
  max_sessions: 50
  log_level: debug
timing: {quantum_ms: 250, min_ms: 1000}
"""
)


def test_sections_parse_to_typed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_DSN", "postgresql://dpsql:s3cret@db/prod")
    p = parse_policy(SERVER, "p.yaml")
    assert p.server is not None
    assert p.server.upstream == "postgresql://dpsql:s3cret@db/prod"
    assert p.server.auth == ("scram-sha-256", "password")
    assert (p.server.max_sessions, p.server.log_level) == (50, "DEBUG")
    assert (p.timing.quantum_ms, p.timing.min_ms, p.timing.pad_repeats) == (250, 1000, True)
    assert "s3cret" not in repr(p) and "s3cret" not in repr(p.server)


def test_sections_do_not_change_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free repeats are keyed by the policy's JSON: deployment settings must not move it."""
    monkeypatch.setenv("T_DSN", "x")
    assert parse_policy(SERVER).model_dump_json() == parse_policy(BASE).model_dump_json()


def test_no_sections_is_the_default() -> None:
    p = parse_policy(BASE)
    assert p.server is None and not p.timing.enabled


@pytest.mark.parametrize(
    ("extra", "line", "words"),
    [
        ("server:\n  max_sesions: 5\n", 8, "server.max_sesions: unknown field"),
        ("server:\n  max_sessions: 0\n", 8, "server.max_sessions: Input should be greater"),
        ("server:\n  auth: [kerberos]\n", 8, "server.auth.0: Input should be"),
        ("server:\n  listen: here\n", 8, "server.listen: listen address 'here' is not host:port"),
        ("server:\n  listen: ':70000'\n", 8, "out of range"),
        ("server:\n  log_level: loud\n", 8, "server.log_level"),
        ("server:\n  upstream: 'x'\n  ledger: '${BAD NAME}'\n", 9, "malformed ${...}"),
        ("server:\n  upstrem: '${T_UNSET_VAR}'\n", 8, "server.upstrem: unknown field"),
        ("timing: {quantum_ms: -5}\n", 7, "timing.quantum_ms"),
        ("timing: {quantum: 5}\n", 7, "timing.quantum: unknown field"),
        ("server: [1]\n", 7, "server: Input should be a valid dictionary"),
    ],
)
def test_errors_name_file_line_field(extra: str, line: int, words: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy(BASE + extra, "p.yaml")
    assert e.value.message.startswith(f"p.yaml:{line}: "), e.value.message
    assert words in e.value.message, e.value.message


def test_interpolation() -> None:
    env = {"U": "dpsql", "EMPTY": ""}
    assert interpolate("postgresql://${U}@h/${DB:-prod}", env) == "postgresql://dpsql@h/prod"
    assert interpolate("${EMPTY}|${EMPTY:-d}|$$|$${U}|$U|a$b", env) == "|d|$|${U}|$U|a$b"
    with pytest.raises(LookupError):
        interpolate("${NOPE}", env)
    with pytest.raises(ValueError, match="malformed"):
        interpolate("${1X}", env)


def test_non_string_values_from_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_MAX", "7")
    monkeypatch.setenv("T_EMPTY", "")
    p = parse_policy(
        BASE + "server:\n  max_sessions: ${T_MAX}\n  require_tls: ${T_TLS:-no}\n"
        '  ledger: "${T_EMPTY}"\n  tls_cert: ""\n'
    )
    assert p.server is not None and p.server.max_sessions == 7 and p.server.require_tls is False
    assert p.server.ledger is None and p.server.tls_cert is None  # empty: not set


def test_unset_variable_is_an_error_only_where_serve_needs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("T_DSN", raising=False)
    p = parse_policy(SERVER, "p.yaml")  # `dpsql query` and `dpsql check` still load it
    assert p.server is not None and p.server.upstream is None
    assert p.server.unresolved["upstream"].startswith("p.yaml:8: server.upstream: environment ")
    with pytest.raises(PolicyError) as e:
        resolve(_args(), p, {})
    assert "T_DSN is not set" in e.value.message and e.value.hint
    got = resolve(_args(upstream="postgresql://flag"), p, {})  # a flag gives it
    assert got.settings.upstream == "postgresql://flag" and not got.unresolved
    got = resolve(_args(), p, {"DPSQL_UPSTREAM": "postgresql://env"})  # or the environment
    assert got.settings.upstream == "postgresql://env"


def _args(**given: object) -> argparse.Namespace:
    from dpsql.policy.settings import SERVER_KEYS

    return argparse.Namespace(**({k: None for k in SERVER_KEYS} | {"policy": "p"} | given))


def test_precedence_command_line_environment_file_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("T_DSN", "postgresql://file")
    p = parse_policy(SERVER, "p.yaml")
    env = {"DPSQL_LISTEN": "127.0.0.1:7001", "DPSQL_MAX_SESSIONS": "60", "DPSQL_LEDGER": ""}
    got = resolve(_args(max_sessions=70), p, env)
    st = got.settings
    assert st.max_sessions == 70 and got.sources["max_sessions"] == "--max-sessions"
    assert st.listen == "127.0.0.1:7001" and got.sources["listen"] == "DPSQL_LISTEN"
    assert st.upstream == "postgresql://file" and got.sources["upstream"] == "p.yaml:8"
    assert st.ledger is None and "ledger" not in got.sources  # empty variable: unset
    assert st.max_sessions_per_analyst is None  # default
    config = config_from_settings(st)
    assert (config.host, config.port, config.max_sessions) == ("127.0.0.1", 7001, 70)
    assert config.auth.methods == ("scram-sha-256", "password")
    assert config.max_sessions_per_analyst == 20 and config.shutdown_grace_s == 10.0


def test_defaults_without_any_section() -> None:
    got = resolve(_args(upstream="postgresql://x"), parse_policy(BASE), {})
    config = config_from_settings(got.settings)
    assert (config.host, config.port, config.auth.methods) == (
        "127.0.0.1",
        6543,
        ("scram-sha-256",),
    )
    assert got.sources == {"upstream": "--upstream"}


def test_require_tls_false_on_the_command_line_beats_the_file() -> None:
    file = ServerSettings(require_tls=True, tls_cert="c", tls_key="k")
    got = resolve_server({"require_tls": False}, {}, file)
    assert got.settings.require_tls is False and got.sources["require_tls"] == "--require-tls"


@pytest.mark.parametrize(
    ("given", "env", "words"),
    [
        ({}, {"DPSQL_MAX_SESSIONS": "many"}, "DPSQL_MAX_SESSIONS: Input should be a valid integer"),
        ({"auth": "scram-sha-256,kerberos"}, {}, "--auth: Input should be"),
        ({"listen": "x:y"}, {}, "--listen: listen address"),
        ({}, {}, "no upstream PostgreSQL"),
        ({"upstream": "u", "tls_cert": "c"}, {}, "both a certificate and a key"),
        ({"upstream": "u", "require_tls": True}, {}, "no TLS certificate"),
    ],
)
def test_bad_settings_name_their_source(given: dict[str, object], env: dict[str, str],
                                        words: str) -> None:  # fmt: skip
    with pytest.raises(InvalidParameter) as e:
        resolve(_args(**given), parse_policy(BASE), env)
    assert words in e.value.message and e.value.hint


def test_demo_policy_unchanged() -> None:
    from dpsql.demo import POLICY

    p = load_policy(POLICY)
    assert p.server is None and not p.timing.enabled

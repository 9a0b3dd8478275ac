"""Failed-login limits as settings: ``max_login_failures``, ``max_login_failures_per_host`` and
``login_failure_window`` from flags, ``DPSQL_*`` variables and the ``server:`` section
(command line > environment > file > default), validated, and enforced by a real ``dpsql serve``.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from dpsql.cli import build_parser
from dpsql.errors import InvalidParameter, PolicyError
from dpsql.policy import parse_policy
from dpsql.server.cli import config_from_settings, resolve
from dpsql.wire.auth import AuthConfig, make_verifier
from tests.helpers import db_name, start_serve

BASE = """version: 1
tables:
  t:
    privacy_unit: uid
    columns:
      uid: {type: integer, identifier: true}
"""
KEYS = ("max_login_failures", "max_login_failures_per_host", "login_failure_window")


def _serve_args(*flags: str) -> object:
    return build_parser().parse_args(["serve", "--policy", "p.yaml", *flags])


def _auth(server: str, env: dict[str, str], *flags: str) -> tuple[AuthConfig, dict[str, str]]:
    """The AuthConfig `dpsql serve` would run with, and where each limit came from."""
    policy = parse_policy(BASE + server, "p.yaml")
    got = resolve(_serve_args("--upstream", "u", *flags), policy, env)  # type: ignore[arg-type]
    sources = {k: v for k, v in got.sources.items() if k in KEYS}
    return config_from_settings(got.settings).auth, sources


def test_defaults() -> None:
    auth, sources = _auth("", {})
    assert (auth.max_failures, auth.max_failures_per_host, auth.window_s) == (5, 50, 60.0)
    assert auth.methods == ("scram-sha-256",) and sources == {}


def test_each_layer_and_precedence() -> None:
    file = ("server:\n  max_login_failures: 4\n  max_login_failures_per_host: 40\n"
            "  login_failure_window: 400\n  auth: [scram-sha-256, password]\n")  # fmt: skip
    auth, sources = _auth(file, {})
    assert (auth.max_failures, auth.max_failures_per_host, auth.window_s) == (4, 40, 400.0)
    assert auth.methods == ("scram-sha-256", "password")  # the limits keep the auth methods
    assert sources == {k: f"p.yaml:{n}" for k, n in zip(KEYS, (8, 9, 10), strict=True)}

    env = {
        "DPSQL_MAX_LOGIN_FAILURES": "3",
        "DPSQL_LOGIN_FAILURE_WINDOW": "2.5",
        "DPSQL_MAX_LOGIN_FAILURES_PER_HOST": "",
    }  # fmt: skip  (empty: unset)
    auth, sources = _auth(file, env)
    assert (auth.max_failures, auth.max_failures_per_host, auth.window_s) == (3, 40, 2.5)
    assert sources["max_login_failures"] == "DPSQL_MAX_LOGIN_FAILURES"
    assert sources["max_login_failures_per_host"] == "p.yaml:9"

    auth, sources = _auth(file, env, "--max-login-failures", "2",
                          "--max-login-failures-per-host", "20")  # fmt: skip
    assert (auth.max_failures, auth.max_failures_per_host, auth.window_s) == (2, 20, 2.5)
    assert sources["max_login_failures"] == "--max-login-failures"
    assert sources["login_failure_window"] == "DPSQL_LOGIN_FAILURE_WINDOW"

    auth, _ = _auth("", {}, "--login-failure-window", "90")  # one key alone: the rest default
    assert (auth.max_failures, auth.max_failures_per_host, auth.window_s) == (5, 50, 90.0)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("max_login_failures: 0", "server.max_login_failures: Input should be greater than or"),
        ("max_login_failures: -3", "server.max_login_failures: Input should be greater"),
        ("max_login_failures: 1001", "server.max_login_failures: Input should be less than or"),
        ("max_login_failures: 2.5", "server.max_login_failures: Input should be a valid integer"),
        ("max_login_failures_per_host: 0", "server.max_login_failures_per_host: Input should"),
        ("max_login_failures_per_host: many", "server.max_login_failures_per_host: Input"),
        ("login_failure_window: 0", "server.login_failure_window: Input should be greater than 0"),
        ("login_failure_window: -1", "server.login_failure_window: Input should be greater"),
        ("login_failure_window: 100000", "server.login_failure_window: Input should be less"),
        ("login_failure_window: a minute", "server.login_failure_window: Input should be a valid"),
        ("max_login_failure: 3", "server.max_login_failure: unknown field"),
    ],
)
def test_file_values_are_validated(extra: str, words: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy(BASE + f"server:\n  {extra}\n", "p.yaml")
    assert e.value.message.startswith("p.yaml:8: "), e.value.message
    assert words in e.value.message, e.value.message


@pytest.mark.parametrize(
    ("flags", "env", "words"),
    [
        (["--max-login-failures", "0"], {}, "--max-login-failures: Input should be greater"),
        (["--max-login-failures-per-host", "-1"], {}, "--max-login-failures-per-host: Input"),
        (["--login-failure-window", "0"], {}, "--login-failure-window: Input should be greater"),
        ([], {"DPSQL_MAX_LOGIN_FAILURES": "five"},
         "DPSQL_MAX_LOGIN_FAILURES: Input should be a valid integer"),
        ([], {"DPSQL_MAX_LOGIN_FAILURES_PER_HOST": "5000"},
         "DPSQL_MAX_LOGIN_FAILURES_PER_HOST: Input should be less than or equal to 1000"),
        ([], {"DPSQL_LOGIN_FAILURE_WINDOW": "-5"}, "DPSQL_LOGIN_FAILURE_WINDOW: Input should be"),
    ],
)  # fmt: skip
def test_bad_flags_and_variables_name_themselves(
    flags: list[str], env: dict[str, str], words: str
) -> None:
    with pytest.raises(InvalidParameter) as e:
        _auth("", env, *flags)
    assert words in e.value.message, e.value.message
    assert e.value.hint


def test_auth_config_refuses_nonsense() -> None:
    for bad in ({"max_failures": 0}, {"max_failures_per_host": -1}, {"window_s": 0.0}):
        with pytest.raises(ValueError, match="failed-login"):
            AuthConfig(**bad)  # type: ignore[arg-type]


# --- a real `dpsql serve` -------------------------------------------------------------------------


def _startup_error(port: int, user: str) -> dict[str, str]:
    """Send a StartupMessage as ``user``; the fields of the ErrorResponse it gets ({} if the
    server asks for a password instead)."""
    body = struct.pack("!i", 196608) + b"user\0" + user.encode() + b"\0database\0x\0\0"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(struct.pack("!i", len(body) + 4) + body)
        head = s.recv(5, socket.MSG_WAITALL)
        if head[:1] != b"E":
            return {}
        (length,) = struct.unpack("!i", head[1:5])
        data = s.recv(length - 4, socket.MSG_WAITALL)
    return {f[:1]: f[1:] for f in data.decode().split("\0") if f}


@contextmanager
def _served(
    make_db: Callable[[str], str], tmp_path: Path, server: str, env: dict[str, str], *flags: str
) -> Iterator[tuple[int, Callable[[], str]]]:
    policy = tmp_path / "policy.yaml"
    analysts = "".join(
        f'  {name}:\n    credential: "{make_verifier("pw-" + name)}"\n    budget: {{epsilon: 1}}\n'
        for name in ("zoe", "bob")
    )
    policy.write_text(BASE + "analysts:\n" + analysts + server)
    full = {k: v for k, v in os.environ.items() if not k.startswith("DPSQL_")} | env
    log = tmp_path / "serve.log"
    with log.open("w+") as out:
        upstream = make_db("logins")
        with psycopg.connect(upstream, autocommit=True) as conn:  # serve checks the policy's table
            conn.execute("CREATE TABLE t (uid integer)")
        proc, port = start_serve(["--policy", str(policy), "--upstream", upstream,
                                  *flags], env=full, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        _DATABASES[port] = db_name(upstream)  # the one database it serves
        try:
            yield port, log.read_text
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


_DATABASES: dict[int, str] = {}


def _login(port: int, user: str, password: str) -> None:
    db = _DATABASES[port]
    dsn = (
        f"host=127.0.0.1 port={port} user={user} password={password} dbname={db} connect_timeout=10"
    )
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_enforces_the_configured_analyst_limit(
    make_db: Callable[[str], str], tmp_path: Path, workers: int
) -> None:
    """File says 5, the environment 4, the flag 2: the third login of zoe is refused (28000)
    even with her password; bob still logs in. With two worker processes the limit is the
    same (the failures are counted in shared memory, whichever worker sees them)."""
    server = "server:\n  max_login_failures: 5\n  max_login_failures_per_host: 100\n"
    env = {"DPSQL_MAX_LOGIN_FAILURES": "4", "DPSQL_LOGIN_FAILURE_WINDOW": "300",
           "DPSQL_WORKERS": str(workers)}  # fmt: skip
    with _served(make_db, tmp_path, server, env, "--max-login-failures", "2") as (port, logs):
        for _ in range(2):
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                _login(port, "zoe", "wrong")
        with pytest.raises(psycopg.OperationalError, match="too many failed login attempts"):
            _login(port, "zoe", "pw-zoe")
        refused = _startup_error(port, "zoe")
        assert refused["C"] == "28000" and refused["S"] == "FATAL"
        assert refused["M"] == "too many failed login attempts"
        assert refused["H"] == "wait 300 seconds before trying again"
        for _ in range(2 * workers):  # whichever worker answers
            _login(port, "bob", "pw-bob")
            assert _startup_error(port, "zoe")["C"] == "28000"
            assert _startup_error(port, "bob") == {}  # not limited: asked for a password
        text = logs()
    assert "max_login_failures=--max-login-failures" in text
    assert "login_failure_window=DPSQL_LOGIN_FAILURE_WINDOW" in text
    assert "max_login_failures_per_host=" in text and "policy.yaml:" in text
    assert text.count("login failed analyst=zoe") == 2
    assert "login refused: rate limited analyst=zoe" in text


def test_serve_enforces_the_host_limit_and_window(
    make_db: Callable[[str], str], tmp_path: Path
) -> None:
    """Three failures from one address under three names block that address for everyone
    (bob too) until the 20-second window has passed; then bob logs in. (The window is long
    enough for the refusals to land inside it on a loaded machine -- five logins, about 1 s each
    at load 20 on 2 cores; 10 s left a margin of 2 --; if they did not, bob would be let in early
    and the refusal assertions would fail: no clock assertion needed.)"""
    server = "server:\n  login_failure_window: 20\n"
    env = {"DPSQL_MAX_LOGIN_FAILURES_PER_HOST": "3"}
    with _served(make_db, tmp_path, server, env, "--max-login-failures", "100") as (port, _):
        first_recorded = float("inf")  # after it is
        for name in ("zoe", "nobody", "bob"):
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                _login(port, name, "wrong")
            first_recorded = min(first_recorded, time.monotonic())
        refused = _startup_error(port, "bob")
        assert (refused["C"], refused["M"]) == ("28000", "too many failed login attempts")
        assert refused["H"] == "wait 20 seconds before trying again"
        with pytest.raises(psycopg.OperationalError, match="too many failed login attempts"):
            _login(port, "bob", "pw-bob")
        time.sleep(max(0.0, first_recorded + 20.1 - time.monotonic()))  # the first one left
        _login(port, "bob", "pw-bob")

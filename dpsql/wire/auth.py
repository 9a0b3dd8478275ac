"""Authentication: SCRAM-SHA-256 against the analysts' verifiers, login rate limiting, verifiers.

A verifier is PostgreSQL's ``pg_authid`` format, ``SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>``
(base64 fields); the password itself is never stored. ``md5`` cannot be checked against a SCRAM
verifier, so, as PostgreSQL does, an enabled ``md5`` method means SCRAM. ``password`` (cleartext,
checked against the verifier) and ``trust`` are off unless the configuration lists them.

An unknown analyst goes through the same exchange with a made-up verifier and fails like a wrong
password, so logins don't reveal who exists. Failures are logged and, past a limit per analyst and per
client address within a window, refused outright for the rest of the window.

>>> v = make_verifier("s3cret", iterations=4096)
>>> v.startswith("SCRAM-SHA-256$4096:")
True
>>> check_password(v, "s3cret"), check_password(v, "nope")
(True, False)
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

from dpsql.errors import AuthenticationFailed, InvalidAuthorization, ProtocolViolation
from dpsql.policy.model import Policy
from dpsql.policy.verifier import Verifier, parse_verifier
from dpsql.wire import messages as m
from dpsql.wire.conn import Channel
from dpsql.wire.limits import FailureLog

log = logging.getLogger("dpsql.wire.auth")
_SCRAM = ScramMechanism("SCRAM-SHA-256")
_MECH = "SCRAM-SHA-256"
_PLUS = "SCRAM-SHA-256-PLUS"
_SCRAM_PLUS = ScramMechanism(_PLUS)
AUTH_TIMEOUT_S = 60.0
# Salts of made-up verifiers for unknown users: one secret per server, made at import (before
# `--workers` fork), so an unknown user's salt is the same whichever worker answers (a salt that
# changed between connections would tell that the user does not exist).
_MOCK_SECRET = secrets.token_bytes(32)


def make_verifier(password: str, iterations: int = 4096) -> str:
    """A SCRAM-SHA-256 verifier for ``password``, for an analyst's ``credential`` in the policy."""
    salt, stored, server, it = _SCRAM.make_auth_info(password, iteration_count=iterations)
    b64 = base64.b64encode
    return f"SCRAM-SHA-256${it}:{b64(salt).decode()}${b64(stored).decode()}:{b64(server).decode()}"


def check_password(verifier: str, password: str) -> bool:
    """Whether ``password`` matches ``verifier`` (for the cleartext method)."""
    v = parse_verifier(verifier)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), v.salt, v.iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    return hmac.compare_digest(hashlib.sha256(client_key).digest(), v.stored_key)


@dataclass(frozen=True)
class AuthConfig:
    """Which methods are allowed and how failures are limited."""

    methods: tuple[str, ...] = ("scram-sha-256",)  # also: md5 (= SCRAM), password, trust
    max_failures: int = 5  # per analyst within the window
    max_failures_per_host: int = 50  # per client address (shared by NAT'd users, so higher)
    window_s: float = 60.0  # a failure counts for this many seconds
    failure_delay_s: float = 0.2

    def __post_init__(self) -> None:
        if self.max_failures < 1 or self.max_failures_per_host < 1:
            raise ValueError("the failed-login limits must be positive")
        if not self.window_s > 0 or self.failure_delay_s < 0:
            raise ValueError("the failed-login window must be positive, the delay not negative")


class LoginLimiter:
    """Counts failed logins per analyst and per client host within a sliding window.

    With ``shared=True`` (``dpsql serve --workers N``: created in the parent before forking) the
    counts are in shared memory (:class:`dpsql.wire.limits.FailureLog`), so the limits hold
    across all worker processes, not per worker.
    """

    def __init__(
        self, max_failures: int, window_s: float, max_per_host: int = 50, *, shared: bool = False
    ) -> None:
        self.max_failures = max_failures
        self.max_per_host = max_per_host
        self.window_s = window_s
        self._users = FailureLog(max_failures, window_s, shared=shared)
        self._hosts = FailureLog(max_per_host, window_s, shared=shared)

    @classmethod
    def for_config(cls, config: AuthConfig, *, shared: bool = False) -> LoginLimiter:
        return cls(config.max_failures, config.window_s, config.max_failures_per_host,
                   shared=shared)  # fmt: skip

    def blocked(self, user: str, host: str) -> bool:
        return self._users.full(user) or self._hosts.full(host)

    def failed(self, user: str, host: str) -> None:
        self._users.add(user)
        self._hosts.add(host)

    def succeeded(self, user: str) -> None:
        self._users.clear(user)


class Authenticator:
    """Runs the authentication exchange for a session (one per server)."""

    def __init__(
        self,
        policy: Policy,
        config: AuthConfig,
        tls_cert_pem: str | None = None,
        limiter: LoginLimiter | None = None,
    ) -> None:
        self.policy = policy
        self.config = config
        self.tls_cert_pem = tls_cert_pem  # for SCRAM-SHA-256-PLUS (tls-server-end-point)
        self.limiter = limiter or LoginLimiter.for_config(config)
        self._mock_secret = _MOCK_SECRET

    def _mock(self, user: str) -> Verifier:
        salt = hmac.new(self._mock_secret, user.encode(), "sha256").digest()[:16]
        return Verifier(4096, salt, secrets.token_bytes(32), secrets.token_bytes(32))

    async def authenticate(self, ch: Channel, user: str) -> str:
        """Authenticate ``user`` on ``ch``; return the analyst name. Sends AuthenticationOk.

        Raises:
            AuthenticationFailed / InvalidAuthorization: the login is refused (FATAL).
        """
        host = ch.peer.rsplit(":", 1)[0]
        if self.limiter.blocked(user, host):
            log.warning("login refused: rate limited analyst=%s peer=%s", user, ch.peer)
            raise InvalidAuthorization(
                "too many failed login attempts",
                hint=f"wait {self.config.window_s:g} seconds before trying again",
            )
        analyst = self.policy.analysts.get(user)
        methods = self.config.methods
        try:
            if "trust" in methods and analyst is not None:
                ok = True
            elif "password" in methods and not ({"scram-sha-256", "md5"} & set(methods)):
                ok = await self._cleartext(ch, analyst.credential if analyst else None)
            else:
                cred = analyst.credential if analyst else None
                verifier = parse_verifier(cred) if cred else self._mock(user)
                ok = await self._scram(ch, verifier) and analyst is not None and cred is not None
        except TimeoutError:
            ok = False
        if not ok:
            self.limiter.failed(user, host)
            log.warning("login failed analyst=%s peer=%s", user, ch.peer)
            await asyncio.sleep(self.config.failure_delay_s)
            raise AuthenticationFailed(
                f'password authentication failed for user "{user}"',
                hint="check the user name and password",
            )
        self.limiter.succeeded(user)
        ch.send(m.AuthenticationOk().encode())
        return user

    async def _cleartext(self, ch: Channel, credential: str | None) -> bool:
        ch.send(m.AuthenticationCleartextPassword().encode())
        await ch.flush()
        frame = await ch.recv(AUTH_TIMEOUT_S)
        _expect_p(frame.code)
        pw = m.PasswordMessage.decode(frame.body).password
        return credential is not None and check_password(credential, pw)

    async def _scram(self, ch: Channel, v: Verifier) -> bool:
        plus = ch.tls and self.tls_cert_pem is not None
        ch.send(m.AuthenticationSASL((_PLUS, _MECH) if plus else (_MECH,)).encode())
        await ch.flush()
        frame = await ch.recv(AUTH_TIMEOUT_S)
        _expect_p(frame.code)
        first = m.SASLInitialResponse.decode(frame.body)
        offered = (_PLUS, _MECH) if plus else (_MECH,)
        if first.mechanism not in offered or first.data is None:
            raise ProtocolViolation(
                f"client selected an invalid SASL authentication mechanism {first.mechanism!r}",
                hint="use SCRAM-SHA-256",
            )

        def keys(_user: str) -> tuple[bytes, bytes, bytes, int]:
            return v.salt, v.stored_key, v.server_key, v.iterations

        if first.mechanism == _PLUS:
            binding = ("tls-server-end-point", self.tls_cert_pem)
            server = _SCRAM_PLUS.make_server(keys, channel_binding=binding)
        else:
            server = _SCRAM.make_server(keys)
        try:
            client_first = first.data.decode("utf-8")
            # libpq sends an empty SCRAM user name ("n=,"): PostgreSQL ignores it, scramp refuses
            # it, so scramp sees a placeholder and the proof is checked on the original message.
            gs2_end = _gs2_end(client_first)
            bare = client_first[gs2_end:]
            patched = client_first[:gs2_end] + (
                "n=*" + bare[2:] if bare.startswith("n=,") else bare
            )
            server.set_client_first(patched)
            server.client_first_bare = bare
            ch.send(m.AuthenticationSASLContinue(server.get_server_first().encode()).encode())
            await ch.flush()
            frame = await ch.recv(AUTH_TIMEOUT_S)
            _expect_p(frame.code)
            final = m.SASLResponse.decode(frame.body).data.decode("utf-8")
            server.set_client_final(final)
            ch.send(m.AuthenticationSASLFinal(server.get_server_final().encode()).encode())
            return True
        except (ScramException, UnicodeDecodeError, ValueError):
            return False


def _gs2_end(client_first: str) -> int:
    first = client_first.index(",")
    return client_first.index(",", first + 1) + 1


def _expect_p(code: bytes | None) -> None:
    if code != b"p":
        raise ProtocolViolation(
            f"expected a password response, got message type {code!r}",
            hint="the client must answer the authentication request",
        )

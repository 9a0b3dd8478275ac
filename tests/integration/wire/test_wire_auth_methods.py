"""Non-default authentication methods, only when configured: cleartext (checked against the SCRAM
verifier), md5 (answered with SCRAM, as PostgreSQL does for SCRAM verifiers) and trust."""

from __future__ import annotations

import psycopg
import pytest

from dpsql.server.run import ServerThread
from dpsql.wire import messages as m
from dpsql.wire.auth import AuthConfig
from dpsql.wire.server import ServerConfig
from tests.wire_support import PASSWORD, POLICY, FakeEngine, RawClient


def _dsn(port: int, password: str) -> str:
    return f"host=127.0.0.1 port={port} user=ana password='{password}' dbname=db sslmode=disable"


def test_cleartext_only_when_enabled() -> None:
    cfg = ServerConfig(port=0, auth=AuthConfig(methods=("password",), failure_delay_s=0))
    with ServerThread(FakeEngine(), POLICY, cfg) as srv:
        c = RawClient(srv.port)
        c.send(m.StartupMessage(parameters={"user": "ana"}))
        assert c.recv() == m.AuthenticationCleartextPassword()
        c.close()
        with psycopg.connect(_dsn(srv.port, PASSWORD)) as conn:
            assert conn.execute("SELECT gen 1").fetchone() == (0,)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(_dsn(srv.port, "nope"))


def test_md5_means_scram() -> None:
    cfg = ServerConfig(port=0, auth=AuthConfig(methods=("md5",)))
    with ServerThread(FakeEngine(), POLICY, cfg) as srv:
        c = RawClient(srv.port)
        c.send(m.StartupMessage(parameters={"user": "ana"}))
        assert isinstance(c.recv(), m.AuthenticationSASL)
        c.close()


def test_trust_needs_a_known_analyst() -> None:
    cfg = ServerConfig(port=0, auth=AuthConfig(methods=("trust",), failure_delay_s=0))
    with ServerThread(FakeEngine(), POLICY, cfg) as srv:
        with psycopg.connect(_dsn(srv.port, "")) as conn:
            assert conn.info.parameter_status("session_authorization") == "ana"
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(_dsn(srv.port, "x").replace("user=ana", "user=stranger"))


def test_total_session_limit() -> None:
    with ServerThread(FakeEngine(), POLICY, ServerConfig(port=0, max_sessions=2)) as srv:
        a = psycopg.connect(_dsn(srv.port, PASSWORD))
        b = psycopg.connect(_dsn(srv.port, PASSWORD))
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(_dsn(srv.port, PASSWORD))
        a.close()
        b.close()

"""TLS: SSLRequest answered 'S' and a handshake when a certificate is configured, 'N' otherwise;
``require_tls`` refuses plaintext; bytes stuffed after SSLRequest are refused (CVE-2021-23214)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dpsql.server.run import ServerThread
from dpsql.wire import messages as m
from dpsql.wire.server import ServerConfig
from tests.conftest import IN_CI
from tests.wire_support import PASSWORD, POLICY, FakeEngine


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    openssl = shutil.which("openssl")
    if openssl is None:
        if IN_CI:
            pytest.fail("openssl is required in CI")
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "server.crt", d / "server.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
         str(crt), "-days", "1", "-subj", "/CN=localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(crt), str(key)


@pytest.fixture(scope="module")
def tls_server(cert: tuple[str, str]) -> Iterator[ServerThread]:
    cfg = ServerConfig(port=0, tls_cert=cert[0], tls_key=cert[1], require_tls=True)
    with ServerThread(FakeEngine(), POLICY, cfg) as srv:
        yield srv


def dsn(port: int, sslmode: str) -> str:
    return (f"host=127.0.0.1 port={port} user=ana password='{PASSWORD}' dbname=db "
            f"sslmode={sslmode} gssencmode=disable")  # fmt: skip


def test_tls_session(tls_server: ServerThread) -> None:
    with psycopg.connect(dsn(tls_server.port, "require"), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT gen 2").fetchall() == [(0,), (1,)]


def test_channel_binding(tls_server: ServerThread) -> None:
    """SCRAM-SHA-256-PLUS with tls-server-end-point when the client requires channel binding."""
    with psycopg.connect(dsn(tls_server.port, "require") + " channel_binding=require") as conn:
        assert conn.execute("SELECT gen 1").fetchone() == (0,)


def test_require_tls_refuses_plaintext(tls_server: ServerThread) -> None:
    with pytest.raises(psycopg.OperationalError, match="requires an encrypted connection"):
        psycopg.connect(dsn(tls_server.port, "disable"))


def test_no_certificate_answers_n() -> None:
    with ServerThread(FakeEngine(), POLICY, ServerConfig(port=0)) as srv:
        with pytest.raises(psycopg.OperationalError, match="does not support SSL"):
            psycopg.connect(dsn(srv.port, "require"))
        with psycopg.connect(dsn(srv.port, "prefer")) as conn:
            assert not conn.pgconn.ssl_in_use


def test_data_stuffed_after_ssl_request_is_refused(tls_server: ServerThread) -> None:
    s = socket.create_connection(("127.0.0.1", tls_server.port), timeout=30)
    s.sendall(m.SSLRequest().encode() + m.StartupMessage(parameters={"user": "ana"}).encode())
    assert s.recv(1) == b"S"
    rest = b""
    try:
        while chunk := s.recv(4096):
            rest += chunk
    except ConnectionError:
        pass
    assert b"unencrypted data" in rest
    s.close()


def test_require_tls_without_certificate_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="require_tls"):
        ServerThread(FakeEngine(), POLICY, ServerConfig(port=0, require_tls=True))

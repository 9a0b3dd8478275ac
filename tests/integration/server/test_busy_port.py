"""A listen address another process holds is refused in words, before anything starts: ``dpsql
serve`` (before its start-up checks) and ``dpsql demo --serve`` (before PostgreSQL starts and
the examples run), instead of a Python traceback when the server binds."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dpsql.cli import main
from dpsql.demo import POLICY


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def test_serve_refuses_a_busy_port(
    busy_port: int, make_db: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = make_db("busy_port")
    argv = ["serve", "--policy", str(POLICY), "--upstream", dsn]
    assert main([*argv, "--listen", f"127.0.0.1:{busy_port}"]) == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{busy_port} is already in use" in err and "--listen 127.0.0.1:0" in err
    assert "Traceback" not in err


def test_demo_serve_refuses_a_busy_port_before_starting(
    busy_port: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_cluster() -> None:
        raise AssertionError("PostgreSQL started although the port is taken")

    monkeypatch.setattr("dpsql.execute.embedded.start_cluster", no_cluster)
    assert main(["demo", "--serve", "--listen", f"127.0.0.1:{busy_port}"]) == 1
    err = capsys.readouterr().err
    assert "already in use" in err and "Traceback" not in err


def test_a_free_port_passes(tmp_path: Path) -> None:
    from dpsql.server.run import ensure_port_free

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    ensure_port_free("127.0.0.1", port)  # released: free again
    ensure_port_free("127.0.0.1", 0)

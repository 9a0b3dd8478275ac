"""Reference proxies for ``bench/proxy_latency.py``: what any proxy costs on this machine.

Each proxy adds two socket hops whose CPU comes out of the cores PostgreSQL and the clients use,
so the ratio to direct PostgreSQL says as much about the machine as about the proxy. Measured in
the same run as dpsql, two references show where the floor is:

* ``null relay``: ``bench/null_relay.py``, a pure-Python uvloop byte relay that parses nothing
  (the floor of a Python proxy);
* ``pgbouncer``: PgBouncer (C, libevent) in session pooling mode, trust authentication from the
  clients, the upstream's password to PostgreSQL; only when the ``pgbouncer`` binary is found.

Both carry the "direct" workload (the same SQL the direct measurement runs), never dpsql's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

HERE = Path(__file__).resolve().parent
PGBOUNCER_HINT = "install it with `apt-get install pgbouncer` (Debian/Ubuntu) to measure it too"


@dataclass(frozen=True)
class Reference:
    """A running reference proxy: its name, process and the DSN clients use."""

    name: str
    proc: subprocess.Popen[bytes]
    dsn: str
    workdir: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], port: int, what: str, log: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"{what} did not start (log: {log})")
        time.sleep(0.05)


def _tcp_upstream(dsn: str) -> dict[str, str]:
    """The upstream's connection parameters, with a TCP host (the relays speak TCP only)."""
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    host = params.get("host", "")
    if not host or host.startswith("/") or host == "localhost":
        params["host"] = "127.0.0.1"
    params.setdefault("port", "5432")
    return params


def start_null_relay(dsn: str) -> Reference:
    """``bench/null_relay.py`` in a subprocess, relaying to ``dsn``'s PostgreSQL."""
    up = _tcp_upstream(dsn)
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="dpsql-bench-relay-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "null_relay.py"), str(port), up["host"], up["port"]],
        stdout=log, stderr=log,
    )  # fmt: skip
    _wait_listening(proc, port, "the null relay", log.name)
    return Reference("null relay", proc, make_conninfo(dsn, host="127.0.0.1", port=port))


def pgbouncer_binary() -> str | None:
    """The ``pgbouncer`` executable (PATH, else Debian's /usr/sbin), or None."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")
    return found


def start_pgbouncer(dsn: str, binary: str) -> Reference:
    """PgBouncer in session mode in front of ``dsn``'s PostgreSQL (trust from the clients).

    PgBouncer refuses to run as root: then it runs with ``-u nobody`` and its throwaway
    configuration directory is world-readable (it holds the benchmark cluster's password).
    """
    up = _tcp_upstream(dsn)
    user = up.get("user", os.environ.get("USER", "postgres"))
    workdir = tempfile.mkdtemp(prefix="dpsql-bench-pgbouncer-")
    os.chmod(workdir, 0o755)
    port = free_port()
    upstream = make_conninfo(
        "", **{k: v for k, v in up.items() if k in ("host", "port", "dbname", "user", "password")}
    )
    ini, users, log = (os.path.join(workdir, n) for n in ("pgbouncer.ini", "users.txt", "log"))
    with open(ini, "w") as f:
        f.write(
            f"[databases]\nbench = {upstream}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n"
            f"listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {users}\n"
            "pool_mode = session\nmax_client_conn = 200\ndefault_pool_size = 100\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
    with open(users, "w") as f:
        f.write(f'"{user}" ""\n')
    for path in (ini, users):
        os.chmod(path, 0o644)
    cmd = [binary, *(["-u", "nobody"] if os.geteuid() == 0 else []), ini]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    _wait_listening(proc, port, "pgbouncer", log)
    client = make_conninfo(
        host="127.0.0.1", port=port, user=user, dbname="bench", sslmode="disable"
    )
    return Reference("pgbouncer", proc, client, workdir)


def start_references(dsn: str, null_relay: bool, pgbouncer: bool) -> list[Reference]:
    """The requested references that can run here (a line says why pgbouncer is left out)."""
    refs = []
    if null_relay:
        refs.append(start_null_relay(dsn))
    if pgbouncer:
        binary = pgbouncer_binary()
        if binary is None:
            print(f"pgbouncer reference skipped: no `pgbouncer` binary found; {PGBOUNCER_HINT}")
        else:
            refs.append(start_pgbouncer(dsn, binary))
    return refs

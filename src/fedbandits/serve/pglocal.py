"""A throwaway PostgreSQL server in a temporary folder: the tests', CI's and ``serve demo --replicas``'.

It runs Debian's ``postgresql`` package (``initdb`` and ``postgres`` from ``pg_config --bindir`` or
``/usr/lib/postgresql/*/bin``); nothing is mocked.  The server listens on 127.0.0.1 only, at a free
port, with no Unix socket; its one role has a random password (``scram-sha-256``: credentials are
required even here) and the data folder is the caller's alone (0700).  As root (CI's containers) the
server runs as the ``postgres`` user, as PostgreSQL requires.  It is started in a session of its own
and stopped by its PID: :meth:`LocalPostgres.stop` (fast shutdown), :meth:`LocalPostgres.kill`
(``SIGKILL`` to the server and every backend, as a crash would), :meth:`LocalPostgres.start` again on
the same data (crash recovery replays the WAL).
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

#: the role the server is created with
ROLE = "fedbandits"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server programs on this machine (Debian: ``apt install postgresql``)."""


def bindir() -> Path | None:
    """The folder of ``initdb`` and ``postgres``, or None."""
    found = shutil.which("pg_config")
    if found:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([found, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            path = Path(out.stdout.strip())
            if (path / "initdb").exists() and (path / "postgres").exists():
                return path
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    for path in map(Path, candidates):
        if (path / "initdb").exists() and (path / "postgres").exists():
            return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPostgres:
    """One throwaway server: ``with LocalPostgres() as pg: pg.url("silo0")``."""

    def __init__(self, *, fsync: bool = True) -> None:
        """``fsync``: the server's own setting; off survives a killed server (the WAL is in the kernel's
        cache once a commit returns) but not a machine's crash -- the SQLite log's ``durability =
        "process"``; on (the default) survives both."""
        found = bindir()
        if found is None:
            raise PostgresUnavailable("PostgreSQL is not installed (Debian: apt install postgresql)")
        self.bin = found
        self.fsync = fsync
        self.folder = Path(tempfile.mkdtemp(prefix="fedbandits-pg-"))
        self.data = self.folder / "data"
        self.password = secrets.token_urlsafe(24)
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.folder / "server.log"
        try:
            self._user = _server_user()
            self._init()
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)  # nothing of a server that could not be made stays
            raise

    def _init(self) -> None:
        if self._user is not None:
            shutil.chown(self.folder, self._user, self._user)
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n", encoding="utf-8")
        if self._user is not None:
            shutil.chown(pwfile, self._user, self._user)
        pwfile.chmod(0o600)
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", ROLE, "--pwfile", str(pwfile),
            "-A", "scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip
        pwfile.unlink()

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, user=self._user, group=self._user, cwd=self.folder
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"{Path(argv[0]).name} failed: {' '.join(done.stderr.split())[:300]}")

    def url(self, database: str = "postgres") -> str:
        """A connection URL (the password in it: for this throwaway server only)."""
        return f"postgresql://{ROLE}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> LocalPostgres:
        if self.process is not None and self.process.poll() is None:
            return self
        argv = [
            str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
            "-c", f"fsync={'on' if self.fsync else 'off'}", "-c", "max_connections=60",
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                user=self._user, group=self._user, cwd=self.folder,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-600:]
                raise PostgresUnavailable(f"postgres exited with {self.process.returncode}: {' '.join(tail.split())}")
            if self._ready():
                return self
            time.sleep(0.05)
        self.kill()
        raise PostgresUnavailable(f"postgres did not accept connections within {timeout:g} s")

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def create_database(self, name: str) -> str:
        """A new database (one per silo) and its URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT to the server's PID): open transactions roll back, nothing committed is lost."""
        self._signal(signal.SIGINT, timeout)

    def kill(self) -> None:
        """SIGKILL to the server and its backends (its session): a crash; the next start recovers from the WAL."""
        self._signal(signal.SIGKILL, 30.0, group=True)

    def _signal(self, sig: int, timeout: float, group: bool = False) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            self.process = None
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(process.pid, sig)
            else:
                os.kill(process.pid, sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        if group:  # the backends of a killed server exit on their own; wait until none holds the data
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _group_alive(process.pid):
                time.sleep(0.05)
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _server_user() -> str | None:
    """None, or ``postgres`` when running as root (the server refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable("running as root and there is no 'postgres' user to run the server as") from None
    return "postgres"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
